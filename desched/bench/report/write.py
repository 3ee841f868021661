"""The report's files: ``report.json``, ``report.md``, ``report.html`` and the plots, written
together in one folder (the pages link to the PNGs beside them)."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

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
                 q3_sims: dict[str, HeldoutRuns] | None = None) -> Path:
    """Write ``report.json``, ``report.md``, ``report.html`` and the plots beside them (Q1's
    from the run folders ``q1_dirs``: workload -> policy -> folder); refuse a text that
    states a number the JSON lacks. Returns the folder."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plots = report.plots
    baseline = report.q1.baseline
    for w, dirs in q1_dirs.items():
        plot_q1(dirs, report.q1.workloads[w], baseline,
                f"Q1 on {w}: per-tenant wait and service share over time", out / plots.q1[w])
    today = "/".join(f"{v:g}" for v in report.q2.reference.weights.values())
    plot_learning_curves(report.q2.learners, f"today's {today}".strip(), out / plots.q2)
    if q3_sims:
        plot_q3_tenants(report.q3, q3_sims, out / plots.q3)
    plot_pareto(report.pareto.points, out / plots.pareto)
    if report.deploy is not None and plots.deploy:
        plot_tenant_harm(report.deploy, out / plots.deploy)
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
