"""Prefect tasks of the ``demo`` flow: thin I/O around ``desched.bench.demo``.

Every task here passes frames and records in memory within one flow run, so none hashes
its inputs or caches its result. ``Progress`` shows the flow's steps on stderr and as a
Prefect progress artifact.
"""

from __future__ import annotations

import contextlib
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

from prefect import get_run_logger, task
from prefect.artifacts import (
    create_link_artifact,
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.cache_policies import NONE
from prefect.exceptions import MissingContextError

from desched.bench import demo
from desched.bench.demo import (
    STEP_SHARES,
    Candidates,
    DemoRun,
    DemoSettings,
    Mode,
    Workload,
    WorkloadSpec,
    deploy_of,
    heldout_candidates,
    ingestion_of,
    over_seeds_cells,
    over_seeds_rows,
    process_seconds,
    time_left_s,
    trace_specs,
    tune_settings,
)
from desched.bench.evaluate import EvalCell, EvalRow, run_cell
from desched.bench.pool import Pool
from desched.bench.report.inputs import HeldoutRuns, PredictorResult, Q1Runs
from desched.bench.report.records import Report
from desched.bench.report.write import draw_plots as draw_plot_files
from desched.bench.report.write import q1_gap_rows
from desched.bench.report.write import write_report as write_report_files
from desched.bench.weights import WeightsCard

T = TypeVar("T")

__all__ = [  # the tasks, and what the demo flow reads of desched.bench through this module
    "STEP_SHARES", "DemoRun", "DemoSettings", "EvalRow", "HeldoutRuns", "Mode", "Pool",
    "PredictorResult", "Progress", "Report", "WeightsCard", "Workload",
    "assemble_report", "deploy_of", "draw_plots", "evaluate_over_seeds",
    "heldout_candidates", "ingestion_of", "over_seeds_cells", "over_seeds_rows",
    "prepare_workload", "process_seconds", "publish_report", "simulate_q1_all", "simulate_q3_all", "trace_specs",
    "train_predictors", "tune_settings", "write_report",
]


@task(name="prepare-workload", task_run_name="prepare-{spec.name}", cache_policy=NONE)
def prepare_workload(spec: WorkloadSpec, settings: DemoSettings, traces_dir: str) -> Workload:
    """Generate the scenario or import the SWF log; write its trace."""
    return demo.prepare_workload(spec, settings, traces_dir)


@task(name="simulate-q1-all", cache_policy=NONE)
def simulate_q1_all(workloads: list[Workload], logs_dir: str, runs_dir: str, baseline: str,
                    pool: Pool) -> dict[str, Q1Runs]:
    """The baseline (its decision log) and the rest of Q1's family on every workload, every
    run one call of ``pool``."""
    return demo.simulate_q1_all(workloads, logs_dir, runs_dir, baseline, pool)


@task(name="train-predictors", cache_policy=NONE)
def train_predictors(calls: list[tuple[Any, ...]], pool: Pool) -> list[PredictorResult]:
    """Q3's model of every workload (``train_predictor``'s arguments in ``calls``) and its
    predictions for the held-out part, each one call of ``pool``: trainings of different
    workloads share nothing but the warehouse, read-only. The largest starts first
    (``demo.training_rows``): LANL's, several times the others', started last would run alone
    at the end."""
    return list(pool(demo.train_predictor, calls,
                     costs=[demo.training_rows(c[0], c[-1]) for c in calls]))


@task(name="simulate-q3-all", cache_policy=NONE)
def simulate_q3_all(parts: dict[str, tuple[str, int, Candidates]],
                    pool: Pool) -> dict[str, HeldoutRuns]:
    """Every candidate on the held-out part of every workload, each run one call of
    ``pool``."""
    return demo.simulate_heldout_all(parts, pool)


@task(name="evaluate-over-seeds", cache_policy=NONE)
def evaluate_over_seeds(cells: list[tuple[str, str, int]], workers: int,
                        pool: Pool) -> list[EvalCell]:
    """``desched.bench.evaluate.run_cell`` of every cell, each one call of ``pool`` (spawned
    processes import desched only, not this flow's Prefect state)."""
    return list(pool(run_cell, [(t, p, s, workers) for t, p, s in cells]))


@task(name="assemble-report", cache_policy=NONE)
def assemble_report(**parts: Any) -> Report:
    """The report's record from every step's results (``desched.bench.demo``)."""
    return demo.assemble_report(**parts)


@task(name="draw-plots", cache_policy=NONE)
def draw_plots(report: Report, q1_dirs: dict[str, dict[str, str]], out_dir: str,
               sims: dict[str, HeldoutRuns], pool: Pool) -> list[str]:
    """The report's PNG plots into ``out_dir``, each one call of ``pool``; returns their
    file names."""
    return draw_plot_files(report, q1_dirs, out_dir, sims, pool)


@task(name="write-report", cache_policy=NONE)
def write_report(report: Report, q1_dirs: dict[str, dict[str, str]], out_dir: str,
                 sims: dict[str, HeldoutRuns], pool: Pool, drawn: list[str]) -> str:
    """``report.json``, ``report.md`` and the PNG plots into ``out_dir``, each plot one call
    of ``pool``, but those in ``drawn`` (``draw_plots`` wrote them from this report's
    sections)."""
    return str(write_report_files(report, q1_dirs, out_dir, sims, pool, drawn))


MAX_MARKDOWN_BYTES = 200_000
"""A markdown artifact's size at most: Prefect publishes each artifact as an event, and its
server refuses events over about 1.5 MB (an inline-image report was 1.46 MB)."""


@task(name="publish-report", cache_policy=NONE)
def publish_report(report_dir: str, report: Report) -> None:
    """The report as artifacts that point at its stored files: a link to ``report.md`` (and
    ``report.html`` where written) and to each plot, the report's text without its images
    (when under ``MAX_MARKDOWN_BYTES``; else a line saying where it is), and the Pareto points
    and the Q1 gap as table artifacts."""
    folder = Path(report_dir).resolve()
    md = folder / "report.md"
    for path in [md, folder / "report.html", *sorted(folder.glob("*.png"))]:
        if path.is_file():
            create_link_artifact(key=f"desched-report-{_key(path.name)}", link=path.as_uri(),
                                 link_text=str(path), description=f"desched demo {report.run}")
    text = _without_images(md.read_text(encoding="utf-8")) if md.is_file() else ""
    if len(text.encode()) > MAX_MARKDOWN_BYTES:
        text = f"The report is {len(text.encode()):,} bytes: read it at {md}."
    create_markdown_artifact(key="desched-report", markdown=text,
                             description=f"desched demo report {report.run} ({md})")
    create_table_artifact(key="desched-report-pareto",
                          table=[p.model_dump() for p in report.pareto.points],
                          description="Mean response time against fairness, every policy")
    create_table_artifact(key="desched-report-q1-gap", table=q1_gap_rows(report),
                          description="Fairness gap the one counter closes, and its cost")


def _key(name: str) -> str:
    """An artifact key from a file name: lower-case letters, digits and dashes."""
    return re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")


def _without_images(markdown: str) -> str:
    """``markdown`` with each image replaced by its alt text and file name (the files are
    linked artifacts; an inline data URI would make the artifact too large to publish)."""
    return re.sub(r"!\[([^\]]*)\]\(([^)]+)\)",
                  lambda m: f"*[plot: {m[1] or m[2]} ({m[2][:80]})]*", markdown)


class Progress:
    """One line per step on stderr with the elapsed time, and a Prefect progress artifact."""

    def __init__(self, total: int, echo: Callable[[str], None] | None = None,
                 shares: dict[str, float] | None = None) -> None:
        self.shares = shares or {}
        self.t0 = time.perf_counter()
        self.total = total
        self.done = 0
        self.steps: dict[str, float] = {}
        self.echo = echo or _stderr
        self.artifact: UUID | None = None
        try:
            self.artifact = create_progress_artifact(  # type: ignore[assignment]
                progress=0.0, key="desched-demo-progress", description="desched demo steps")
        except Exception:  # noqa: BLE001 (progress is a display, never a failure)
            self.artifact = None

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def say(self, line: str) -> None:
        """``line`` on stderr (``echo``) and, inside a flow run, in its log (the UI)."""
        self.echo(line)
        with contextlib.suppress(MissingContextError):
            get_run_logger().info(line)

    def run(self, name: str, what: str, fn: Callable[[], T]) -> T:
        self.say(f"[{self.elapsed():6.1f}s] {self.done + 1}/{self.total} {what} ...")
        started = time.perf_counter()
        result = fn()
        self.steps[name] = time.perf_counter() - started
        self.done += 1
        left = time_left_s(self.elapsed(), list(self.steps), self.shares)
        estimate = f"; about {_duration(left)} left" if left and self.done < self.total else ""
        self.say(f"[{self.elapsed():6.1f}s] {self.done}/{self.total} {name} done "
                 f"({self.steps[name]:.1f} s{estimate})")
        if self.artifact is not None:
            with contextlib.suppress(Exception):  # a display, never a failure
                update_progress_artifact(self.artifact, 100.0 * self.done / self.total)
        return result


def _duration(seconds: float) -> str:
    """``40 s``, ``3 min``, ``1 h 20 min``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def _stderr(line: str) -> None:
    sys.stderr.write(line + "\n")  # not print: the flow's log_prints would route it to logs
    sys.stderr.flush()
