"""Prefect tasks of the ``demo`` flow: thin I/O around ``desched`` functions.

Every task here passes frames and summaries in memory within one flow run, so none hashes
its inputs or caches its result. The experiment's sizes are ``DemoSettings``; the numbers
the report states come from these tasks' return values (``desched.report``).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import polars as pl
from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NONE

from desched import report as rep
from desched.errors import DeschedError
from desched.models.training import ObjectiveName

Mode = Literal["quick", "full"]

SWF_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "traces"
SWF_LOGS = {
    "lanl": "LANL-CM5-1994-4.1-cln.swf.gz",
    "atlas": "LLNL-Atlas-2006-2.1-cln.swf.gz",
}
TARGET_LOAD = 0.85
"""Offered load the worker count of a real log is chosen for (``workers_for``)."""
COUNTER_MEMORY_TASKS = 40.0
"""``ifs-counter``'s half-life on a real log, in mean task durations: its default 900 s is
40 mean durations of the DES scenarios (about 22.5 s); a log of hour-long jobs gets the same
memory relative to its jobs, not 900 s."""


def counter_params(kind: str, mean_duration_s: float) -> dict[str, Any]:
    """Parameters of ``ifs-counter`` for a workload (``COUNTER_MEMORY_TASKS``)."""
    from desched.policies.ifs_counter import IfsCounterParams

    if kind == "scenario":
        return {"half_life_s": IfsCounterParams.model_fields["half_life_s"].default}
    return {"half_life_s": round(COUNTER_MEMORY_TASKS * mean_duration_s, 1)}


@dataclass(frozen=True)
class WorkloadSpec:
    """One workload of the demo: a generated scenario or a real SWF log (or a time slice)."""

    name: str
    kind: Literal["scenario", "swf"]
    source: str
    tasks: int | None = None
    seed: int = 1
    workers: int | None = None
    load: float = TARGET_LOAD
    slice_start: int = 0
    """SWF: first job (in submit order) of the time slice; with ``tasks`` its length."""


@dataclass(frozen=True)
class DemoSettings:
    """Sizes of one demo run; ``quick`` for a first look, ``full`` for the report."""

    mode: Mode
    workloads: tuple[WorkloadSpec, ...]
    q3_workloads: tuple[str, ...]
    train_frac: float = 0.6
    """Q3: the first ``train_frac`` of a trace (by submit time) trains the model."""
    train_objectives: tuple[ObjectiveName, ...] = ("l2-log", "l1-log", "l1", "l2")
    train_quantiles: tuple[float, ...] = (0.5, 0.9)
    train_rounds: int = 400
    latency_rows: int = 2000
    tune_tasks: int = 2000
    tune_trials: int = 60
    rl_iterations: int = 50
    tune_train_seeds: str = "2-4"  # never the workload seed (1) that Q1 and Q3 report on
    tune_heldout_seeds: str = "100-104"
    tune_slices_train: str = "0-2"
    tune_slices_heldout: dict[str, str] = field(default_factory=dict)
    eval_tasks: int = 4000
    eval_seeds: str = "200-204"
    eval_slices: dict[str, str] = field(default_factory=dict)
    eval_slice_tasks: int = 4000
    jobs: int = 2

    @classmethod
    def of(cls, mode: Mode) -> DemoSettings:
        lanl = str(SWF_DIR / SWF_LOGS["lanl"])
        atlas = str(SWF_DIR / SWF_LOGS["atlas"])
        if mode == "full":
            return cls(
                mode="full",
                workloads=(
                    WorkloadSpec("flood", "scenario", "flood", tasks=20_000, workers=8),
                    WorkloadSpec("steady", "scenario", "steady", tasks=20_000, workers=8),
                    WorkloadSpec("lanl", "swf", lanl),
                    WorkloadSpec("atlas", "swf", atlas),
                ),
                q3_workloads=("steady", "flood", "lanl", "atlas"),
                tune_slices_heldout={"lanl": "56-60", "atlas": "13-17"},
                eval_slices={"lanl": "10-14", "atlas": "2-6"},
            )
        return cls(
            mode="quick",
            workloads=(
                WorkloadSpec("flood", "scenario", "flood", tasks=4_000, workers=8),
                WorkloadSpec("steady", "scenario", "steady", tasks=4_000, workers=8),
                WorkloadSpec("lanl", "swf", lanl, tasks=6_000, slice_start=40_000),
                WorkloadSpec("atlas", "swf", atlas, tasks=6_000, slice_start=12_000),
            ),
            q3_workloads=("steady", "lanl"),
            train_objectives=("l1-log", "l1"),
            train_quantiles=(),
            train_rounds=120,
            latency_rows=500,
            tune_tasks=800,
            tune_trials=6,
            rl_iterations=3,
            tune_train_seeds="2-3",
            tune_heldout_seeds="100-102",
            tune_slices_train="0-1",
            tune_slices_heldout={"lanl": "146-148", "atlas": "42-44"},
            eval_tasks=1000,
            eval_seeds="200-202",
            eval_slices={"lanl": "20-22", "atlas": "6-8"},
            eval_slice_tasks=1000,
        )

    def describe(self) -> dict[str, Any]:
        out = asdict(self)
        out["workloads"] = [asdict(w) for w in self.workloads]
        return out


@dataclass(frozen=True)
class Workload:
    """A prepared workload: its trace file and what the report says about it."""

    name: str
    kind: str
    source: str
    trace: str
    workers: int
    info: dict[str, Any]


def workers_for(frame: pl.DataFrame, load: float) -> int:
    """The worker count whose offered load ``total work / submission span / workers`` is
    closest to ``load`` (at least 1)."""
    span = float(frame["submit_s"].max()) - float(frame["submit_s"].min())  # type: ignore[arg-type]
    work = float(frame["duration_s"].sum())
    return max(1, round(work / (span * load))) if span > 0 else 1


def offered_load(frame: pl.DataFrame, workers: int) -> float:
    span = float(frame["submit_s"].max()) - float(frame["submit_s"].min())  # type: ignore[arg-type]
    return float(frame["duration_s"].sum()) / (span * workers) if span > 0 else math.inf


@task(name="prepare-workload", task_run_name="prepare-{spec.name}", cache_policy=NONE)
def prepare_workload(spec: WorkloadSpec, traces_dir: str) -> Workload:
    """Generate the scenario, or import the SWF log (and cut its time slice); write the trace.

    SWF's ``status`` becomes ``swf_status``: a decision log's completion records carry their
    own ``status`` ("ok"), and ``desched.runs`` would otherwise write two columns of that name.
    """
    from desched.trace import write_trace

    info: dict[str, Any] = {}
    if spec.kind == "scenario":
        from desched.workloads import generate

        workers = spec.workers or 8
        frame = generate(spec.source, tasks=spec.tasks or 20_000, load=spec.load,
                         workers=workers, seed=spec.seed)
        info["seed"] = spec.seed
    else:
        from desched.swf import import_swf

        frame, swf_report = import_swf(spec.source)
        info["swf_jobs_in_file"] = swf_report.job_lines
        info["swf_jobs_kept"] = swf_report.jobs_kept
        info["swf_jobs_dropped"] = swf_report.dropped_total
        frame = frame.rename({"status": "swf_status"})
        if spec.tasks is not None:
            frame = frame.slice(spec.slice_start, spec.tasks)
            t0 = float(frame["submit_s"].min())  # type: ignore[arg-type]
            frame = frame.with_columns(pl.col("submit_s") - t0)
            info["slice_first_job"] = spec.slice_start
        workers = spec.workers or workers_for(frame, spec.load)
    span = float(frame["submit_s"].max())  # type: ignore[arg-type]
    info.update(
        tasks=frame.height,
        tenants=int(frame["tenant"].n_unique()),
        task_types=int(frame["task_type"].n_unique()),
        span_h=span / 3600.0,
        mean_duration_s=float(frame["duration_s"].mean()),  # type: ignore[arg-type]
        workers=workers,
        offered_load=offered_load(frame, workers),
        target_load=spec.load,
    )
    info["counter_params"] = counter_params(spec.kind, info["mean_duration_s"])
    path = Path(traces_dir) / f"{spec.name}.parquet"
    write_trace(frame, path)
    return Workload(spec.name, spec.kind, Path(spec.source).name, str(path), workers, info)


def _run(trace: pl.DataFrame, policy: str, params: dict[str, Any], workers: int,
         out: Path) -> dict[str, Any]:
    from desched.policies import make_policy
    from desched.runs import write_run
    from desched.simulator import simulate
    from desched.trace import TaskTable

    tasks = TaskTable.from_frame(trace)
    pol = make_policy(policy, tasks, params)
    result = simulate(tasks, pol, workers)
    return write_run(out, trace, result, components=pol.components,
                     params=pol.params.model_dump(), seed=0)


@task(name="simulate-q1", task_run_name="simulate-{workload.name}", cache_policy=NONE,
      tags=["simulation"])
def simulate_q1(workload: Workload, logs_dir: str, runs_dir: str) -> dict[str, Any]:
    """The baseline (``ifs-memoryless``) with its decision log under ``logs_dir``, and the
    other Q1 policies under ``runs_dir``; returns run folders and summaries per policy."""
    from desched.trace import read_trace

    trace = read_trace(workload.trace)
    summaries: dict[str, Any] = {}
    dirs: dict[str, str] = {}
    for policy in rep.Q1_POLICIES:
        folder = (Path(logs_dir) / workload.name if policy == rep.BASELINE
                  else Path(runs_dir) / workload.name / policy)
        params = workload.info["counter_params"] if policy == "ifs-counter" else {}
        summaries[policy] = _run(trace, policy, params, workload.workers, folder)
        dirs[policy] = str(folder)
    return {"workload": workload.name, "dirs": dirs, "summaries": summaries}


@task(name="train-predictor", task_run_name="train-{workload.name}", cache_policy=NONE)
def train_predictor(
    workload: Workload, db_path: str, log_file: str, baseline_run: str, registry_dir: str,
    heldout_path: str, settings: DemoSettings,
) -> dict[str, Any]:
    """Q3's model for one workload, trained on the warehouse's validated completion records
    of the first ``train_frac`` of the trace (by submit time), registered; then predictions
    for the rest (``predicted_s``), written as the held-out trace, scored against the
    baselines, and the per-prediction latency of the compiled model.

    History features of the held-out tasks come from the completions of the baseline run
    (what the service saw under today's scorer), each only from tasks that had ended before
    the task's submission.
    """
    from desched.models import promotion, training
    from desched.models.duration import Predictor
    from desched.models.features import with_history
    from desched.trace import read_trace, write_trace

    completions = training.load_warehouse(db_path)
    source = str(Path(log_file).resolve())
    mine = completions.filter(pl.col("source") == source) if "source" in completions.columns \
        else completions
    if mine.height == 0:
        raise DeschedError(f"{db_path}: no completion records of {source}")
    trace = read_trace(workload.trace)
    cut_s = float(trace["submit_s"].quantile(settings.train_frac, "lower"))  # type: ignore[arg-type]
    first = mine.filter(pl.col("submit_s") < cut_s)
    train_settings = training.TrainSettings(
        objectives=settings.train_objectives, quantiles=settings.train_quantiles,
        max_rounds=settings.train_rounds, num_threads=settings.jobs)
    result = training.train(first, train_settings, source=f"{db_path}:{workload.name}")
    registered = promotion.register(Path(registry_dir) / workload.name, result)
    card = registered.model_dump(mode="json")

    # Held-out part: history from the baseline run's completions, never the training rows.
    runs = pl.read_parquet(Path(baseline_run) / "tasks.parquet")
    history = with_history(runs.sort("submit_s", maintain_order=True))
    rest = history.filter(pl.col("submit_s") >= cut_s)
    fit_rows = history.filter(pl.col("submit_s") < cut_s)
    predictor = Predictor.load(Path(registry_dir) / workload.name, card["version"])
    x = predictor.features_of(rest)
    predicted = predictor.predict_batch(x)
    y = rest["duration_s"].to_numpy()
    heldout_scores = {"model": training.score(y, predicted)}
    for name, pred in training.baseline_predictions(fit_rows, rest).items():
        heldout_scores[name] = training.score(y, pred)

    rows = rest.head(settings.latency_rows).to_dicts()
    fast = []
    for row in rows:
        t0 = time.perf_counter()
        predictor.predict_one(row)
        fast.append(time.perf_counter() - t0)
    booster = predictor.booster()
    booster.predict(x[:1])  # load and warm up once, as a long-lived service would have
    for row in rows[:1]:
        predictor.predict_one(row)
    slow = []
    for i in range(min(200, x.shape[0])):
        one = x[i : i + 1]
        t0 = time.perf_counter()
        booster.predict(one)
        slow.append(time.perf_counter() - t0)

    keep = [c for c in trace.columns if c != "predicted_s"]
    heldout = rest.select(keep).with_columns(
        pl.Series("predicted_s", np.maximum(predicted, 1e-3)))
    write_trace(heldout, heldout_path)
    return {
        "workload": workload.name,
        "version": card["version"],
        "registry": str(Path(registry_dir) / workload.name),
        "objective": card["objective"],
        "objectives_compared": card["objectives_compared"],
        "train_rows": int(first.height),
        "heldout_rows": int(rest.height),
        "cut_s": cut_s,
        "train_frac": settings.train_frac,
        "card_test": {"model": card["metrics"], **card["baselines"]},
        "heldout": heldout_scores,
        "quantiles": card["quantile_metrics"],
        "training_time_s": card["training_time_s"],
        "compile_time_s": card["compile_time_s"],
        "latency_us": _latency(fast),
        "booster_latency_us": _latency(slow),
        "heldout_trace": heldout_path,
        "workers": workload.workers,
        "card": registered,
    }


def _latency(samples: list[float]) -> dict[str, float]:
    us = np.asarray(samples) * 1e6
    return {"p50": float(np.percentile(us, 50)), "p99": float(np.percentile(us, 99)),
            "mean": float(us.mean()), "n": float(us.size)}


@task(name="simulate-q3", task_run_name="policies-on-{name}", cache_policy=NONE,
      tags=["simulation"])
def simulate_q3(name: str, heldout_trace: str, workers: int, weights: dict[str, str],
                counter: dict[str, Any]) -> dict[str, Any]:
    """Every registered policy, and today's scorer with each learned weights card, on the
    held-out part of a trace (which carries the model's ``predicted_s``)."""
    from desched.evaluate import simulate_summary
    from desched.policies import REGISTRY
    from desched.trace import read_trace

    trace = read_trace(heldout_trace)
    candidates: dict[str, tuple[str, dict[str, Any]]] = {p: (p, {}) for p in rep.Q3_ORDER
                                                         if p in REGISTRY}
    for p in sorted(REGISTRY):
        candidates.setdefault(p, (p, {}))
    candidates["ifs-counter"] = ("ifs-counter", dict(counter))
    for learner, folder in weights.items():
        candidates[f"{rep.BASELINE} ({learner} weights)"] = (rep.BASELINE, {"weights": folder})
    out = {}
    for label, (policy, params) in candidates.items():
        out[label] = simulate_summary(trace, policy, params, workers)
    durations = trace.group_by("tenant").agg(
        pl.col("duration_s").mean().alias("mean_duration_s"), pl.len().alias("tasks"))
    return {"workload": name, "workers": workers, "tasks": trace.height, "summaries": out,
            "tenant_durations": {r["tenant"]: r["mean_duration_s"] for r in
                                 durations.iter_rows(named=True)}}


@task(name="evaluate-over-seeds", cache_policy=NONE, tags=["simulation"])
def evaluate_over_seeds(cells: list[tuple[str, str, int]], workers: int,
                        jobs: int) -> list[dict[str, Any]]:
    """``desched.evaluate.run_cells`` over every cell on ``jobs`` spawned processes (they
    import desched only, not this flow's Prefect state)."""
    from desched.evaluate import run_cells

    return run_cells(cells, workers, jobs=jobs)


@task(name="write-report", cache_policy=NONE)
def write_report(report: dict[str, Any], inputs: rep.ReportInputs, out_dir: str,
                 q3_extra: dict[str, Any]) -> str:
    """``report.json``, ``report.md`` and the PNG plots into ``out_dir``."""
    return str(rep.write_report(report, inputs, out_dir, q3_extra))


@task(name="publish-report", cache_policy=NONE)
def publish_report(report_dir: str, report: dict[str, Any]) -> None:
    """The report as a markdown artifact (its plots embedded) and the Pareto points and Q1
    gap table as table artifacts."""
    create_markdown_artifact(key="desched-report", markdown=rep.markdown_with_inline_images(
        Path(report_dir)), description=f"desched demo report {report['run']}")
    create_table_artifact(key="desched-report-pareto", table=report["pareto"]["points"],
                          description="Mean response time against fairness, every policy")
    create_table_artifact(key="desched-report-q1-gap", table=rep.q1_gap_rows(report),
                          description="Fairness gap the one counter closes, and its cost")


def load_average() -> list[float]:
    import os

    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []
