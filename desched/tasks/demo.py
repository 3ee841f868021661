"""Prefect tasks of the ``demo`` flow: thin I/O around ``desched.bench.demo``.

Every task here passes frames and records in memory within one flow run, so none hashes
its inputs or caches its result. ``Progress`` shows the flow's steps on stderr and as a
Prefect progress artifact.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar
from uuid import UUID

from prefect import task
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.cache_policies import NONE

from desched.bench import demo
from desched.bench.demo import Candidates, DemoSettings, Workload, WorkloadSpec, time_left_s
from desched.bench.evaluate import EvalCell, run_cells
from desched.bench.report.inputs import HeldoutRuns, PredictorResult, Q1Runs
from desched.bench.report.records import Report
from desched.bench.report.write import markdown_with_inline_images, q1_gap_rows
from desched.bench.report.write import write_report as write_report_files

T = TypeVar("T")


@task(name="prepare-workload", task_run_name="prepare-{spec.name}", cache_policy=NONE)
def prepare_workload(spec: WorkloadSpec, settings: DemoSettings, traces_dir: str) -> Workload:
    """Generate the scenario or import the SWF log; write its trace."""
    return demo.prepare_workload(spec, settings, traces_dir)


@task(name="simulate-q1", task_run_name="simulate-{workload.name}", cache_policy=NONE,
      tags=["simulation"])
def simulate_q1(workload: Workload, logs_dir: str, runs_dir: str, baseline: str) -> Q1Runs:
    """The baseline (its decision log) and the rest of Q1's family on one workload."""
    return demo.simulate_q1(workload, logs_dir, runs_dir, baseline)


@task(name="train-predictor", task_run_name="train-{workload.name}", cache_policy=NONE)
def train_predictor(
    workload: Workload, db_path: str, log_file: str, baseline_run: str, registry_dir: str,
    heldout_path: str, settings: DemoSettings,
) -> PredictorResult:
    """Q3's model for one workload and its predictions for the held-out part."""
    return demo.train_predictor(workload, db_path, log_file, baseline_run, registry_dir,
                                heldout_path, settings)


@task(name="simulate-q3", task_run_name="policies-on-{name}", cache_policy=NONE,
      tags=["simulation"])
def simulate_q3(name: str, heldout_trace: str, workers: int,
                candidates: Candidates) -> HeldoutRuns:
    """Every candidate on the held-out part of a trace."""
    return demo.simulate_heldout(name, heldout_trace, workers, candidates)


@task(name="evaluate-over-seeds", cache_policy=NONE, tags=["simulation"])
def evaluate_over_seeds(cells: list[tuple[str, str, int]], workers: int,
                        jobs: int) -> list[EvalCell]:
    """``desched.bench.evaluate.run_cells`` over every cell on ``jobs`` spawned processes
    (they import desched only, not this flow's Prefect state)."""
    return run_cells(cells, workers, jobs=jobs)


@task(name="write-report", cache_policy=NONE)
def write_report(report: Report, q1_dirs: dict[str, dict[str, str]], out_dir: str,
                 sims: dict[str, HeldoutRuns]) -> str:
    """``report.json``, ``report.md`` and the PNG plots into ``out_dir``."""
    return str(write_report_files(report, q1_dirs, out_dir, sims))


@task(name="publish-report", cache_policy=NONE)
def publish_report(report_dir: str, report: Report) -> None:
    """The report as a markdown artifact (its plots embedded) and the Pareto points and Q1
    gap table as table artifacts."""
    create_markdown_artifact(key="desched-report", markdown=markdown_with_inline_images(
        Path(report_dir)), description=f"desched demo report {report.run}")
    create_table_artifact(key="desched-report-pareto",
                          table=[p.model_dump() for p in report.pareto.points],
                          description="Mean response time against fairness, every policy")
    create_table_artifact(key="desched-report-q1-gap", table=q1_gap_rows(report),
                          description="Fairness gap the one counter closes, and its cost")


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

    def run(self, name: str, what: str, fn: Callable[[], T]) -> T:
        self.echo(f"[{self.elapsed():6.1f}s] {self.done + 1}/{self.total} {what} ...")
        started = time.perf_counter()
        result = fn()
        self.steps[name] = time.perf_counter() - started
        self.done += 1
        left = time_left_s(self.elapsed(), list(self.steps), self.shares)
        estimate = f"; about {_duration(left)} left" if left and self.done < self.total else ""
        self.echo(f"[{self.elapsed():6.1f}s] {self.done}/{self.total} {name} done "
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
