"""The research bench end to end (``desched demo``): its settings and every step as a function
over paths and records. The ``demo`` flow only composes these, through thin Prefect tasks.

Steps: prepare the workloads (generate the scenarios, import the SWF logs); simulate today's
scorer (its decision logs) and Q1's family; ingest the logs (the ``ingest-logs`` flow); train
the duration model per Q3 workload on the first part of its trace and predict the rest; tune
the baseline's weights with both learners; run every registered policy (and the baseline
with each learned card) on the held-out parts, and the policies that need no prediction over
seeds; build and write the report (``desched.bench.report``).

Which policies run where comes from the registry and what the policies declare
(``desched.bench.roles``); the roles the report names (baseline, Q1's reference and
candidate) are settings.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import polars as pl
from pydantic import Field
from pydantic_settings import SettingsConfigDict

from desched.bench import roles
from desched.bench.evaluate import EvalCell, EvalRow, aggregate, cells_of
from desched.bench.learning import Objective
from desched.bench.pool import SERIAL, Pool, default_jobs
from desched.bench.report.build import build_report
from desched.bench.report.inputs import (
    HeldoutRun,
    HeldoutRuns,
    Ingestion,
    Latency,
    PredictorResult,
    Q1Runs,
    Roles,
    WorkloadInfo,
)
from desched.bench.report.records import DeploySection, Report, Timing
from desched.bench.specs import offered_load, policy_spec, workers_for
from desched.bench.tuning import TuneSettings
from desched.bench.weights import WeightsCard
from desched.errors import DeschedError
from desched.models.training import ObjectiveName
from desched.policies import REGISTRY
from desched.records import Record
from desched.runs import RunSummary
from desched.samples import traces_dir
from desched.settings import DeschedSettings
from desched.today import TODAY_SCORER
from desched.trace import group_means

if TYPE_CHECKING:
    from desched.warehouse.report import IngestSummary

Mode = Literal["quick", "full"]

TARGET_LOAD = 0.85
"""Offered load the worker count of a real log is chosen for (``workers_for``)."""
DEFAULT_SWF_DIR = traces_dir()
"""The checkout's ``data/samples/traces`` (or ``$DESCHED_SAMPLES_DIR/traces``)."""


class WorkloadSpec(Record):
    """One workload of the demo: a generated scenario or a real SWF log (or a time slice)."""

    name: str
    kind: Literal["scenario", "swf"]
    source: str = Field(description="the scenario's name, or the SWF log's file name")
    tasks: int | None = None
    seed: int = 1
    workers: int | None = None
    load: float = TARGET_LOAD
    slice_start: int = Field(default=0, description="SWF: first job (in submit order) of the "
                                                    "time slice; with ``tasks`` its length")


FULL: dict[str, Any] = {
    "workloads": (
        WorkloadSpec(name="flood", kind="scenario", source="flood", tasks=20_000, workers=8),
        WorkloadSpec(name="steady", kind="scenario", source="steady", tasks=20_000, workers=8),
        WorkloadSpec(name="lanl", kind="swf", source="LANL-CM5-1994-4.1-cln.swf.gz"),
        WorkloadSpec(name="atlas", kind="swf", source="LLNL-Atlas-2006-2.1-cln.swf.gz"),
    ),
    "q3_workloads": ("steady", "flood", "lanl", "atlas"),
    "q3_train_frac": {"flood": 0.05},
    "tune_slices_heldout": {"lanl": "56-60", "atlas": "13-17"},
    "eval_slices": {"lanl": "10-14", "atlas": "2-6"},
}
"""The full run's sizes (the README's figures)."""

QUICK: dict[str, Any] = {
    "workloads": (
        WorkloadSpec(name="flood", kind="scenario", source="flood", tasks=4_000, workers=8),
        WorkloadSpec(name="steady", kind="scenario", source="steady", tasks=4_000, workers=8),
        WorkloadSpec(name="lanl", kind="swf", source="LANL-CM5-1994-4.1-cln.swf.gz",
                     tasks=6_000, slice_start=40_000),
        WorkloadSpec(name="atlas", kind="swf", source="LLNL-Atlas-2006-2.1-cln.swf.gz",
                     tasks=6_000, slice_start=12_000),
    ),
    "q3_workloads": ("steady", "lanl"),
    "train_objectives": ("l1-log", "l1"),
    "train_quantiles": (),
    "train_rounds": 120,
    "latency_rows": 500,
    "tune_tasks": 800,
    "tune_trials": 6,
    "rl_iterations": 3,
    "tune_train_seeds": "2-3",
    "tune_heldout_seeds": "100-102",
    "tune_slices_train": {"lanl": "0-1"},
    "tune_slices_heldout": {"lanl": "146-148", "atlas": "42-44"},
    "eval_tasks": 1000,
    "eval_seeds": "200-202",
    "eval_slices": {"lanl": "20-22", "atlas": "6-8"},
    "eval_slice_tasks": 1000,
}
"""The quick run's sizes: a first look in about a minute."""


STEP_SHARES: dict[Mode, dict[str, float]] = {
    "quick": {"workloads": 2.8, "simulate": 0.6, "ingest": 3.2, "train": 2.9, "tune": 7.4,
              "evaluate": 1.4, "report": 4.8},
    "full": {"workloads": 4.9, "simulate": 1.8, "ingest": 4.2, "train": 15.6, "tune": 21.8,
             "evaluate": 3.0, "report": 3.9},
}
"""Seconds per step of one measured run of each mode (2026-12-06 on 2 vCPUs, load about 1:
quick 23 s, full 55 s from a fresh clone), for the estimate of time left (``time_left_s``):
only their proportions matter."""


def time_left_s(elapsed_s: float, done: list[str], shares: dict[str, float]) -> float | None:
    """Estimate of the time the steps not in ``done`` will take, when those in ``done`` took
    ``elapsed_s``: this machine's pace on the steps done, applied to the measured shares of
    the rest. None before any step is done or when the shares know none of them."""
    spent = sum(shares.get(step, 0.0) for step in done)
    if spent <= 0:
        return None
    rest = sum(v for step, v in shares.items() if step not in done)
    return elapsed_s * rest / spent


class DemoSettings(DeschedSettings):
    """Sizes and roles of one demo run; ``of("quick")`` for a first look, ``of("full")`` for
    the report. A mode's preset fixes the sizes it names; each other field also reads
    ``DESCHED_DEMO_<NAME>`` (e.g. ``DESCHED_DEMO_SWF_DIR``, ``DESCHED_DEMO_JOBS``)."""

    model_config = SettingsConfigDict(env_prefix="DESCHED_DEMO_", extra="forbid", frozen=True)

    mode: Mode = Field(description="quick (small traces, few tuning steps) or full")
    workloads: tuple[WorkloadSpec, ...] = Field(description="the workloads, in report order")
    q3_workloads: tuple[str, ...] = Field(description="workloads Q3 trains a model for")
    swf_dir: Path = Field(DEFAULT_SWF_DIR, description="folder of the SWF logs")
    target_load: float = Field(TARGET_LOAD, gt=0,
                               description="offered load a real log's worker count aims at")
    baseline: str = Field(TODAY_SCORER, description="today's scorer, every comparison's "
                                                        "baseline and the policy tuned in Q2")
    q1_reference: str = Field("vtc", description="Q1: the fair scheduler whose gap is measured")
    q1_candidate: str = Field("ifs-counter", description="Q1: the one counter")
    train_frac: float = Field(0.6, gt=0, lt=1, description="Q3: the first part of a trace (by "
                                                           "submit time) that trains the model")
    q3_train_frac: dict[str, float] = Field(
        default_factory=dict,
        description="Q3: a workload's own train_frac. The flood scenario's burst comes at "
                    "10-20 % of its span, so the default split would hold out only the quiet "
                    "tail after it; 0.05 trains on the time before the burst and judges the "
                    "part in which the flood is queued")
    train_objectives: tuple[ObjectiveName, ...] = Field(
        ("l2-log", "l1-log", "l1", "l2"), description="Q3: training objectives compared")
    train_quantiles: tuple[float, ...] = Field((0.5, 0.9), description="Q3: quantile models")
    train_rounds: int = Field(400, ge=1, description="Q3: boosting rounds at most")
    latency_rows: int = Field(2000, ge=1, description="Q3: predictions timed one by one")
    tune_tasks: int = Field(2000, ge=1, description="Q2: tasks per trace")
    tune_trials: int = Field(60, ge=1, description="Q2: Optuna trials")
    rl_iterations: int = Field(50, ge=1, description="Q2: REINFORCE iterations")
    tune_workers: int = Field(8, ge=1, description="Q2: workers simulated")
    fairness_weight: float = Field(5.0, ge=0, description="Q2: the objective's fairness weight")
    tune_scenarios: tuple[str, ...] = Field(("flood", "steady", "heavy-tail"),
                                            description="Q2: scenarios trained and judged on")
    tune_train_seeds: str = Field("2-4", description="Q2: training seeds of the scenarios; "
                                                     "never the workload seed (1)")
    tune_heldout_seeds: str = Field("100-104", description="Q2: held-out scenario seeds")
    tune_slices_train: dict[str, str] = Field(
        default_factory=lambda: {"lanl": "0-2"}, description="Q2: training slices per log")
    tune_slices_heldout: dict[str, str] = Field(
        default_factory=dict, description="Q2: held-out slices per log")
    eval_scenarios: tuple[str, ...] = Field(("flood", "steady"),
                                            description="over seeds: scenarios evaluated")
    eval_tasks: int = Field(4000, ge=1, description="over seeds: tasks per scenario trace")
    eval_seeds: str = Field("200-204", description="over seeds: scenario seeds")
    eval_slices: dict[str, str] = Field(default_factory=dict,
                                        description="over seeds: slices per log")
    eval_slice_tasks: int = Field(4000, ge=1, description="over seeds: tasks per log slice")
    eval_workers: int = Field(8, ge=1, description="over seeds: workers simulated")
    jobs: int = Field(default_factory=default_jobs, ge=1,
                      description="processes for the independent simulations and trainings "
                      "(default: one per core); every fit runs on one thread")
    dask_address: str | None = Field(None, description="a Dask scheduler address: the "
                                     "independent runs go to that cluster instead")
    judge_results: Path | None = Field(
        None, description="a judge.json (`desched judge --out DIR`) that the report's "
        "'Which policy to deploy' shows; without one the demo runs the judge on its own real "
        "logs (the first `tasks` of each) and scenarios, with its training settings")

    @classmethod
    def of(cls, mode: Mode, **overrides: Any) -> DemoSettings:
        """The settings of ``mode`` (``FULL`` or ``QUICK``), ``overrides`` on top."""
        return cls(mode=mode, **{**(FULL if mode == "full" else QUICK), **overrides})

    def roles(self) -> Roles:
        return Roles(baseline=self.baseline, reference=self.q1_reference,
                     candidate=self.q1_candidate)

    def log_path(self, spec: WorkloadSpec) -> Path:
        return self.swf_dir / spec.source

    def describe(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class DemoRun(Record):
    """What one run of the ``demo`` flow hands back: the report's folder (``report.md``,
    ``report.html``, ``report.json``, the plots), the report itself, seconds per step and in
    the flow (``total_s``), and since the process started (``process_seconds``)."""

    report_dir: str
    report: Report
    steps: dict[str, float]
    total_s: float
    process_s: float | None = None


def process_seconds() -> float | None:
    """Seconds since this process started (the interpreter's start, so Prefect's server
    start-up and every import count), None where psutil cannot tell."""
    try:
        import psutil

        return max(0.0, time.time() - float(psutil.Process().create_time()))
    except Exception:  # noqa: BLE001 (a figure of the report, never a failure)
        return None


class Workload(Record):
    """A prepared workload: its trace file and what the report says about it."""

    name: str
    trace: str
    workers: int
    info: WorkloadInfo


def scaled_params(kind: str, mean_duration_s: float) -> dict[str, dict[str, float]]:
    """Every policy's ``duration_scaled`` parameters for a workload: their defaults on a DES
    scenario (their unit), ``factor * mean_duration_s`` on a real log."""
    if kind == "scenario":
        return {n: {k: float(cls.Params.model_fields[k].default)
                    for k in cls.Params.duration_scaled}
                for n, cls in REGISTRY.items() if cls.Params.duration_scaled}
    return roles.duration_scaled_params(mean_duration_s)


def prepare_workload(spec: WorkloadSpec, settings: DemoSettings, traces_dir: str) -> Workload:
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

        path = settings.log_path(spec)
        if not path.is_file():
            raise DeschedError(f"{path}: no such SWF log (set DESCHED_DEMO_SWF_DIR)")
        frame, swf_report = import_swf(path)
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
    mean_duration_s = float(frame["duration_s"].mean())  # type: ignore[arg-type]
    workload_info = WorkloadInfo(
        kind=spec.kind, source=Path(spec.source).name, **info,
        tasks=frame.height,
        tenants=int(frame["tenant"].n_unique()),
        task_types=int(frame["task_type"].n_unique()),
        span_h=float(frame["submit_s"].max()) / 3600.0,  # type: ignore[arg-type]
        mean_duration_s=mean_duration_s,
        workers=workers,
        offered_load=offered_load(frame, workers),
        target_load=spec.load,
        scaled_params=scaled_params(spec.kind, mean_duration_s),
    )
    path = Path(traces_dir) / f"{spec.name}.parquet"
    write_trace(frame, path)
    return Workload(name=spec.name, trace=str(path), workers=workers, info=workload_info)


def run_and_write(trace: pl.DataFrame, policy: str, params: dict[str, Any], workers: int,
                  out: Path) -> RunSummary:
    """Simulate ``policy`` on ``trace`` and write its run folder ``out`` (seed 0)."""
    from desched.policies import make_policy
    from desched.runs import write_run
    from desched.simulator import simulate
    from desched.trace import TaskTable

    tasks = TaskTable.from_frame(trace)
    pol = make_policy(policy, tasks, params)
    result = simulate(tasks, pol, workers)
    return write_run(out, trace, result, components=pol.components,
                     params=pol.params.model_dump(), seed=0)


def run_and_write_file(trace_path: str, policy: str, params: dict[str, Any], workers: int,
                       out: str) -> RunSummary:
    """``run_and_write`` on the trace file ``trace_path``: one call of a ``Pool``."""
    from desched.trace import read_trace

    return run_and_write(read_trace(trace_path), policy, params, workers, Path(out))


def simulate_q1(workload: Workload, logs_dir: str, runs_dir: str, baseline: str,
                pool: Pool = SERIAL) -> Q1Runs:
    """The baseline with its decision log under ``logs_dir``, and the rest of Q1's family
    (``roles.q1_family``) under ``runs_dir``, each with its workload-scaled parameters."""
    return simulate_q1_all([workload], logs_dir, runs_dir, baseline, pool)[workload.name]


def simulate_q1_all(workloads: list[Workload], logs_dir: str, runs_dir: str, baseline: str,
                    pool: Pool = SERIAL) -> dict[str, Q1Runs]:
    """``simulate_q1`` of every workload, every run one call of ``pool``."""
    family = roles.q1_family(baseline)
    folders = {(w.name, p): (Path(logs_dir) / w.name if p == baseline
                             else Path(runs_dir) / w.name / p)
               for w in workloads for p in family}
    calls = [(w.trace, p, dict(w.info.scaled_params.get(p, {})), w.workers,
              str(folders[w.name, p])) for w in workloads for p in family]
    summaries = iter(pool(run_and_write_file, calls,
                          costs=[w.info.tasks for w in workloads for _ in family]))
    return {w.name: Q1Runs(workload=w.name,
                           dirs={p: str(folders[w.name, p]) for p in family},
                           summaries={p: next(summaries) for p in family})
            for w in workloads}


def _latency(samples: list[float]) -> Latency:
    us = np.asarray(samples) * 1e6
    return Latency(p50=float(np.percentile(us, 50)), p99=float(np.percentile(us, 99)),
                   mean=float(us.mean()), n=float(us.size))


def training_rows(workload: Workload, settings: DemoSettings) -> float:
    """About how many rows ``train_predictor`` fits on for ``workload`` (its trace's tasks
    times its ``train_frac``): what orders the trainings on a pool, the longest first."""
    return workload.info.tasks * settings.q3_train_frac.get(workload.name, settings.train_frac)


def train_predictor(
    workload: Workload, db_path: str, log_file: str, baseline_run: str, registry_dir: str,
    heldout_path: str, settings: DemoSettings,
) -> PredictorResult:
    """Q3's model for one workload, trained on the warehouse's validated completion records
    of the first ``train_frac`` of the trace (by submit time; ``q3_train_frac`` per
    workload), registered; then predictions
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
    train_frac = settings.q3_train_frac.get(workload.name, settings.train_frac)
    cut_s = float(trace["submit_s"].quantile(train_frac, "lower"))  # type: ignore[arg-type]
    first = mine.filter(pl.col("submit_s") < cut_s)
    train_settings = training.TrainSettings(
        objectives=settings.train_objectives, quantiles=settings.train_quantiles,
        max_rounds=settings.train_rounds, num_threads=1)
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
    return PredictorResult(
        workload=workload.name,
        version=card["version"],
        registry=str(Path(registry_dir) / workload.name),
        objective=card["objective"],
        objectives_compared=card["objectives_compared"],
        train_rows=int(first.height),
        heldout_rows=int(rest.height),
        cut_s=cut_s,
        train_frac=train_frac,
        card_test={"model": card["metrics"], **card["baselines"]},
        heldout=heldout_scores,
        quantiles=card["quantile_metrics"],
        training_time_s=card["training_time_s"],
        compile_time_s=card["compile_time_s"],
        latency_us=_latency(fast),
        booster_latency_us=_latency(slow),
        heldout_trace=heldout_path,
        workers=workload.workers,
        card=registered,
    )


Candidates = dict[str, tuple[str, dict[str, Any]]]
"""Label -> (registered policy, parameters)."""


def weights_label(card: WeightsCard, learner: str) -> str:
    """``ifs-memoryless (optuna weights)``: a policy run with a learned card."""
    return f"{card.policy} ({learner} weights)"


def heldout_candidates(info: WorkloadInfo, cards: dict[str, tuple[WeightsCard, str]],
                       baseline: str) -> Candidates:
    """Every registered policy (``roles.q3_order``) with its workload-scaled parameters,
    then each learned card's policy with the card (learner -> (card, folder))."""
    out: Candidates = {p: (p, dict(info.scaled_params.get(p, {})))
                       for p in roles.q3_order(list(REGISTRY), baseline)}
    for learner, (card, folder) in cards.items():
        out[weights_label(card, learner)] = (card.policy, {"weights": folder})
    return out


def heldout_summary(heldout_trace: str, policy: str, params: dict[str, Any],
                    workers: int) -> RunSummary:
    """One candidate on the held-out trace file: one call of a ``Pool``."""
    from desched.bench.evaluate import simulate_summary
    from desched.trace import read_trace

    return simulate_summary(read_trace(heldout_trace), policy, params, workers)


def simulate_heldout(name: str, heldout_trace: str, workers: int,
                     candidates: Candidates, pool: Pool = SERIAL) -> HeldoutRuns:
    """Every candidate on the held-out part of a trace (which carries the model's
    ``predicted_s``), and each tenant's mean task duration there."""
    return simulate_heldout_all({name: (heldout_trace, workers, candidates)}, pool)[name]


def simulate_heldout_all(parts: dict[str, tuple[str, int, Candidates]],
                         pool: Pool = SERIAL) -> dict[str, HeldoutRuns]:
    """``simulate_heldout`` of every workload (name -> held-out trace, workers,
    candidates), every run one call of ``pool``."""
    from desched.trace import read_trace

    calls = [(path, policy, params, workers)
             for path, workers, candidates in parts.values()
             for policy, params in candidates.values()]
    summaries = iter(pool(heldout_summary, calls))
    out = {}
    for name, (path, workers, candidates) in parts.items():
        runs = {label: HeldoutRun(policy=policy, params=params, summary=next(summaries))
                for label, (policy, params) in candidates.items()}
        trace = read_trace(path)
        out[name] = HeldoutRuns(workload=name, workers=workers, tasks=trace.height, runs=runs,
                                tenant_durations=tenant_mean_durations(trace))
    return out


def tenant_mean_durations(trace: pl.DataFrame) -> dict[str, float]:
    """Each tenant's mean ``duration_s``, its tasks summed in trace order
    (``desched.trace.group_means``: the same bits every run), by tenant name."""
    means = group_means(trace, ["tenant"], "duration_s").sort("tenant")
    return dict(zip(means["tenant"].cast(pl.String).to_list(), means["mean"].to_list(),
                    strict=True))


def trace_specs(settings: DemoSettings) -> dict[str, list[str]]:
    """Trace specs (``desched.bench.specs``) for tuning (``train``, ``heldout``) and for the
    evaluation over seeds (``evaluate``)."""
    paths = {w.name: settings.log_path(w) for w in settings.workloads if w.kind == "swf"}
    n, load = settings.tune_tasks, settings.target_load
    train = [f"{s}?tasks={n}&load=0.9&seeds={settings.tune_train_seeds}"
             for s in settings.tune_scenarios]
    train += [f"{paths[w]}?slice_tasks={n}&load={load}&seeds={seeds}"
              for w, seeds in settings.tune_slices_train.items()]
    heldout = [f"{s}?tasks={n}&load=0.9&seeds={settings.tune_heldout_seeds}"
               for s in settings.tune_scenarios]
    heldout += [f"{paths[w]}?slice_tasks={n}&load={load}&seeds={seeds}"
                for w, seeds in settings.tune_slices_heldout.items()]
    m = settings.eval_tasks
    evaluate = [f"{s}?tasks={m}&load=0.9&seeds={settings.eval_seeds}"
                for s in settings.eval_scenarios]
    evaluate += [f"{paths[w]}?slice_tasks={settings.eval_slice_tasks}&load={load}&seeds={seeds}"
                 for w, seeds in settings.eval_slices.items()]
    return {"train": train, "heldout": heldout, "evaluate": evaluate}


def spec_labeller(settings: DemoSettings) -> Callable[[str], str]:
    """``flood``, ``lanl``, ...: the short name the report uses for a trace spec."""
    logs = {w.source: w.name for w in settings.workloads if w.kind == "swf"}

    def label(spec: str) -> str:
        base = spec.partition("?")[0]
        for file, name in logs.items():
            if base.endswith(file):
                return name
        return base

    return label


def tune_settings(settings: DemoSettings, specs: dict[str, list[str]],
                  learner: Literal["optuna", "rl"]) -> TuneSettings:
    """Q2's tuning run for ``learner``: the baseline's weights, on the demo's traces."""
    return TuneSettings(
        train=specs["train"], heldout=specs["heldout"], train_seeds=None, heldout_seeds=None,
        workers=settings.tune_workers, policy=settings.baseline, learner=learner,
        trials=settings.tune_trials if learner == "optuna" else settings.rl_iterations,
        seed=0, windows=20, objective=Objective(fairness_weight=settings.fairness_weight),
        reference=settings.baseline)


def over_seeds_cells(settings: DemoSettings, specs: dict[str, list[str]],
                     workloads: dict[str, Workload],
                     cards: dict[str, tuple[WeightsCard, str]],
                     ) -> tuple[list[tuple[str, str, int]], dict[str, str]]:
    """The evaluation over seeds: every policy that needs no prediction (Q1's family
    first), with the workload's scaled parameters, and the baseline with each learned card,
    on every ``evaluate`` spec. Returns the cells and the row label of each policy spec."""
    label_of = spec_labeller(settings)
    q1 = roles.q1_family(settings.baseline)
    names = [*q1, *(p for p in roles.runnable_without_predictions() if p not in q1)]
    cells: list[tuple[str, str, int]] = []
    labels: dict[str, str] = {}
    for spec in specs["evaluate"]:
        scaled = workloads[label_of(spec)].info.scaled_params
        mine = {policy_spec(p, scaled.get(p)): p for p in names}
        for learner, (card, folder) in cards.items():
            mine[policy_spec(card.policy, {"weights": folder})] = weights_label(card, learner)
        labels.update(mine)
        cells += cells_of([spec], list(mine), [0])  # each spec names its own seeds
    return cells, labels


def over_seeds_rows(cells: list[EvalCell], labels: dict[str, str],
                    baseline: str) -> list[EvalRow]:
    """The cells under their readable labels, aggregated over seeds against the baseline."""
    named = [c.model_copy(update={"policy_spec": labels.get(c.policy_spec, c.policy_spec)})
             for c in cells]
    return aggregate(named, baseline)


def ingestion_of(summary: IngestSummary) -> Ingestion:
    """The report's account of an ingestion run (``desched.warehouse.report.IngestSummary``)."""
    return Ingestion(
        files_seen=summary.files_seen,
        files_read=summary.files_read,
        decisions_loaded=summary.decisions_loaded,
        completions_loaded=summary.completions_loaded,
        rows_quarantined=summary.rows_quarantined,
        quarantined_by_rule=dict(summary.quarantined_by_rule),
        gx_rows_checked=summary.gx_rows_checked,
        warehouse_rows=dict(summary.counts),
    )


def load_average() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def commands_of(root: Path) -> dict[str, str]:
    """The commands that rerun the demo into ``root``."""
    commands = {"quick": "desched demo --quick", "full": "desched demo", "make": "make demo"}
    if str(root) != "data":
        commands = {k: (v + f" --out {root}" if k != "make" else v)
                    for k, v in commands.items()}
    return commands


def deploy_of(settings: DemoSettings, root: Path, pool: Pool = SERIAL) -> DeploySection:
    """The report's "Which policy to deploy": ``settings.judge_results`` when given, else the
    judge run on the demo's real logs and scenarios (cached under ``root/judge-cache``), its
    trainings and simulations on ``pool``."""
    from desched.bench.report.deploy import deploy_section, judge_for_report
    from desched.models.training import TrainSettings

    train = TrainSettings(objectives=settings.train_objectives,
                          quantiles=settings.train_quantiles, max_rounds=settings.train_rounds,
                          num_threads=1)
    logs = [(s.name, settings.log_path(s), s.tasks) for s in settings.workloads
            if s.kind == "swf"]
    scenarios = [(s.source, s.tasks or 20_000) for s in settings.workloads
                 if s.kind == "scenario"]
    result, source = judge_for_report(logs, scenarios, results=settings.judge_results,
                                      cache_dir=root / "judge-cache", settings=train,
                                      pool=pool)
    return deploy_section(result, source)


def assemble_report(
    *, run: str, settings: DemoSettings, specs: dict[str, list[str]],
    workloads: dict[str, Workload], ingestion: Ingestion, q1: dict[str, Q1Runs],
    eval_rows: list[EvalRow], cards: dict[str, WeightsCard],
    trained: dict[str, PredictorResult], sims: dict[str, HeldoutRuns],
    steps: dict[str, float], total_s: float, root: Path, pool: Pool = SERIAL,
    deploy: DeploySection | None = None, draft: bool = False,
) -> Report:
    """The report of one demo run (``desched.bench.report.build``); ``deploy`` is its "Which
    policy to deploy" when already made (``deploy_of``), else it is made here on ``pool``.
    A ``draft`` has no such section and makes none: every other section is the full
    report's, and so are the figures drawn from them (the demo draws them while the judge
    finishes)."""
    if deploy is None and not draft:
        deploy = deploy_of(settings, root, pool)
    return build_report(
        deploy=None if draft else deploy,
        run=run, mode=settings.mode,
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        settings={**settings.describe(), "duration_scaled": roles.duration_scale_factors(),
                  "specs": specs},
        parts=settings.roles(),
        workloads={w: wl.info for w, wl in workloads.items()},
        ingestion=ingestion, q1_runs=q1, q1_eval_rows=eval_rows, q2_cards=cards,
        spec_label=spec_labeller(settings), q3_train=trained, q3_sims=sims,
        timing=Timing(steps=dict(steps), total_s=total_s, load_average=load_average(),
                      cpus=os.cpu_count() or 0, process_s=process_seconds()),
        commands=commands_of(root),
    )
