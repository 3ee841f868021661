"""The report's files: ``report.json``, ``report.md``, ``report.html`` and the plots, written
together in one folder (the pages link to the PNGs beside them)."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from desched.bench.learning import Mapper, serial_map
from desched.bench.report.deploy import plot_tenant_harm
from desched.bench.report.html import write_html
from desched.bench.report.inputs import HeldoutRuns
from desched.bench.report.markdown import render_markdown
from desched.bench.report.numbers import unmatched_numbers
from desched.bench.report.plots import (
    plot_learning_curves,
    plot_pareto,
    plot_q1,
    plot_q3_tenants,
)
from desched.bench.report.records import Report
from desched.errors import DeschedError


def write_report(report: Report, q1_dirs: dict[str, dict[str, str]], out_dir: str | Path,
                 q3_sims: dict[str, HeldoutRuns] | None = None,
                 mapper: Mapper = serial_map, drawn: Collection[str] = ()) -> Path:
    """Write ``report.json``, ``report.md``, ``report.html`` and the plots beside them (Q1's
    from the run folders ``q1_dirs``: workload -> policy -> folder); refuse a text that
    states a number the JSON lacks. Returns the folder.

    The plots are ``draw_plots``' on ``mapper``, but for those named in ``drawn``: files that
    ``draw_plots`` already wrote into ``out_dir`` from this report's sections."""
    out = Path(out_dir)
    draw_plots(report, q1_dirs, out, q3_sims, mapper, skip=drawn)
    text = render_markdown(report)
    data = report.to_json()
    missing = unmatched_numbers(text, data)
    if missing:
        raise DeschedError(f"report.md states numbers absent from report.json: "
                           f"{', '.join(missing[:10])}")
    (out / "report.json").write_text(json.dumps(data, indent=1, allow_nan=False) + "\n")
    (out / "report.md").write_text(text)
    write_html(out, text, f"desched report {report.run}")
    return out


def draw_plots(report: Report, q1_dirs: dict[str, dict[str, str]], out_dir: str | Path,
               q3_sims: dict[str, HeldoutRuns] | None = None, mapper: Mapper = serial_map,
               skip: Collection[str] = ()) -> list[str]:
    """Draw the report's figures into ``out_dir`` but those whose file name is in ``skip``;
    returns the names drawn. Each figure is one call of ``mapper`` (``plot_calls``): they
    are independent, so a pool draws them on its processes (about 1 s of matplotlib each,
    plus its import once per process), and a figure is the same file wherever it is drawn.

    A figure depends only on its own section: a report assembled without the judge's
    section (``desched.bench.demo.assemble_report(draft=True)``) draws every other figure as
    the full report does."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    calls = [c for c in plot_calls(report, q1_dirs, out, q3_sims) if c[-1].name not in skip]
    mapper(_render, calls)
    return [c[-1].name for c in calls]


def plot_calls(report: Report, q1_dirs: dict[str, dict[str, str]], out: Path,
               q3_sims: dict[str, HeldoutRuns] | None = None) -> list[tuple[Any, ...]]:
    """``(plot function, *its arguments)`` for every figure of the report, the costliest
    first (a pool that takes calls in order then finishes them together)."""
    plots = report.plots
    calls: list[tuple[Any, ...]] = []
    if q3_sims:
        calls.append((plot_q3_tenants, report.q3, q3_sims, out / plots.q3))
    calls.append((plot_pareto, report.pareto.points, out / plots.pareto))
    baseline = report.q1.baseline
    for w, dirs in q1_dirs.items():
        calls.append((plot_q1, dirs, report.q1.workloads[w], baseline,
                      f"Q1 on {w}: per-tenant wait and service share over time",
                      out / plots.q1[w]))
    if report.deploy is not None and plots.deploy:
        calls.append((plot_tenant_harm, report.deploy, out / plots.deploy))
    today = "/".join(f"{v:g}" for v in report.q2.reference.weights.values())
    calls.append((plot_learning_curves, report.q2.learners, f"today's {today}".strip(),
                  out / plots.q2))
    return calls


def _render(plot: Callable[..., Path], *args: Any) -> Path:
    """``plot(*args)``: one figure, written where its last argument says."""
    return plot(*args)


def read_report(folder: str | Path) -> Report:
    """The ``report.json`` of a report folder."""
    return Report.from_json(json.loads((Path(folder) / "report.json").read_text()))


def markdown_with_inline_images(folder: Path) -> str:
    """``report.md`` with its PNGs inlined as data URLs (for a Prefect markdown artifact)."""
    text = (folder / "report.md").read_text()

    def inline(m: re.Match[str]) -> str:
        path = folder / m.group(2)
        if not path.is_file():
            return m.group(0)
        data = base64.b64encode(path.read_bytes()).decode()
        return f"![{m.group(1)}](data:image/png;base64,{data})"

    return re.sub(r"!\[([^\]]*)\]\(([^)]+\.png)\)", inline, text)


def q1_gap_rows(report: Report) -> list[dict[str, float | str | None]]:
    """One row per workload: gaps closed and costs (the Q1 table artifact)."""
    rows: list[dict[str, float | str | None]] = []
    for w, b in report.q1.workloads.items():
        rows.append({"workload": w,
                     **{f"gap_closed_{k}_pct": v for k, v in b.gap_closed_pct.model_dump().items()},
                     **{f"cost_{k}_pct": v for k, v in b.cost_pct.model_dump().items()}})
    return rows
