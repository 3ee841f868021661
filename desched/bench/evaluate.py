"""Policy evaluation over traces and seeds: one cell, then means with 95 % confidence intervals.

A cell is one (trace spec, policy spec, seed) of ``desched.bench.specs``. ``run_cell``
simulates it and returns an ``EvalCell`` (the run's summary without its per-tenant table,
plus the trace's fingerprint and the window drift). ``aggregate`` turns cells into one
``EvalRow`` per (trace, policy): every metric of ``METRICS`` as an ``Interval`` (mean, 95 %
t-interval and count over seeds), the per-window drift series (Jain's index and service lag
by window index, again with intervals), and the paired difference from a baseline policy on
the same seeds. Nothing here imports Prefect; the flow ``evaluate-policies`` maps
``run_cell`` over a task runner.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from pydantic import SerializerFunctionWrapHandler, model_serializer

from desched.bench.specs import PolicySpec, TraceSpec, fingerprint, past_last_slice
from desched.controls import Controls
from desched.errors import DeschedError
from desched.metrics import RunMetrics, WindowDrift
from desched.policies.base import Policy
from desched.records import Record, json_text
from desched.runs import RunPolicy, RunSummary
from desched.tables import markdown_table as _markdown_table

METRICS: tuple[str, ...] = (
    "mean_wait_s",
    "p99_wait_s",
    "mean_response_s",
    "p50_response_s",
    "p99_response_s",
    "mean_slowdown",
    "mean_bounded_slowdown",
    "jain_slowdown",
    "max_service_lag_s",
    "window_jain_mean",
    "window_jain_min",
    "window_lag_mean_s",
    "utilization",
    "makespan_s",
)
"""Scalar metrics aggregated over seeds; ``window_*`` summarise the per-window drift series."""

CONFIDENCE = 0.95


class Interval(Record):
    """Mean and two-sided t-interval of the mean over ``n`` values (``mean_ci``)."""

    mean: float
    lo: float
    hi: float
    half: float
    n: int


class CellKey(Record):
    """Which cell: the trace spec and its short name, the policy spec, the trace's content."""

    trace: str
    trace_name: str
    policy_spec: str
    fingerprint: str


class EvalCell(WindowDrift, RunMetrics, RunPolicy, CellKey):
    """One evaluation cell: its key, the run's summary (``per_tenant`` only when asked for;
    no wall-clock speed: a cell is a function of its arguments alone) and its window drift.
    A dump leaves ``per_tenant`` out when it was not kept."""

    @model_serializer(mode="wrap")
    def _omit_per_tenant(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict) and data.get("per_tenant") is None:
            data.pop("per_tenant", None)
        return data

    def metric(self, name: str) -> float:
        """The scalar metric ``name`` of ``METRICS``."""
        return float(getattr(self, name))


class DriftPoint(Record):
    """One window index over the cells of a row: its mean start (relative to each trace's
    first submission) and the windowed Jain's index and service lag with intervals."""

    window: int
    start_s: float
    jain_slowdown: Interval
    service_lag_s: Interval


class EvalRow(Record):
    """One (trace, policy) over seeds: every metric of ``METRICS`` as an interval, the drift
    series and, with a baseline, the paired differences ``policy - baseline``. A dump
    leaves ``vs_baseline`` out when there is none."""

    trace: str
    trace_name: str
    policy: str
    seeds: list[int]
    metrics: dict[str, Interval]
    windows: list[DriftPoint]
    vs_baseline: dict[str, Interval] | None = None

    @model_serializer(mode="wrap")
    def _omit_no_baseline(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict) and data.get("vs_baseline") is None:
            data.pop("vs_baseline", None)
        return data


def simulate_summary(
    trace: pl.DataFrame,
    policy_name: str,
    params: Any,
    workers: int,
    *,
    window_s: float | None = None,
    seed: int = 0,
    wrap: Callable[[Policy], Policy] | None = None,
    controls: Controls | None = None,
) -> RunSummary:
    """Simulate ``policy_name`` with ``params`` over ``trace`` and return its summary.
    ``wrap`` (policy -> policy) lets a caller put a controller around the policy
    (``desched.bench.rl``) without the simulator knowing. ``controls`` and the trace's
    ``priority`` column apply tenant controls (``desched.controls``)."""
    from desched.controls import controlled
    from desched.policies import make_policy
    from desched.runs import summary_of, tasks_frame
    from desched.simulator import simulate

    tasks, gate = controlled(trace, controls)
    policy = make_policy(policy_name, tasks, params)
    if wrap is not None:
        policy = wrap(policy)
    result = simulate(tasks, policy, workers, gate=gate)
    return summary_of(tasks_frame(trace, result), result,
                      params=policy.params.model_dump(), seed=seed, window_s=window_s)


def run_cell(
    trace: str,
    policy: str,
    seed: int,
    workers: int,
    window_s: float | None = None,
    per_tenant: bool = False,
) -> EvalCell:
    """One evaluation cell: the summary of ``policy`` on seed ``seed`` of ``trace`` (specs),
    without the per-tenant table unless ``per_tenant`` (it is large on real logs and not
    aggregated)."""
    tspec = TraceSpec.parse(trace)
    pspec = PolicySpec.parse(policy)
    frame = tspec.materialize(seed, workers)
    summary = simulate_summary(frame, pspec.name, dict(pspec.params), workers,
                               window_s=window_s, seed=seed)
    fields = summary.model_dump(exclude={"decisions_per_s", "engine"})  # RunSpeed: not a result
    if not per_tenant:
        fields.pop("per_tenant")
    return EvalCell(trace=tspec.spec, trace_name=tspec.name, policy_spec=pspec.spec,
                    fingerprint=fingerprint(frame), **fields,
                    **summary.drift().model_dump())


def cells_of(
    traces: Sequence[str], policies: Sequence[str], seeds: Sequence[int]
) -> list[tuple[str, str, int]]:
    """Every (trace, policy, seed) combination, after checking every spec and seed; a trace
    spec's own ``seeds`` replace ``seeds``."""
    if not traces or not policies:
        raise DeschedError("evaluation needs at least one trace and one policy")
    for p in policies:
        PolicySpec.parse(p)
    out = []
    for t in traces:
        tspec = TraceSpec.parse(t)
        own = list(tspec.seeds or seeds)
        if not own:
            raise DeschedError(f"trace {t!r}: no seeds")
        count = tspec.slices()
        if count is not None and max(own) >= count:
            raise DeschedError(past_last_slice(tspec, max(own), count))
        out += [(t, p, s) for p in policies for s in own]
    return out


def slice_notes(traces: Sequence[str], seeds: Sequence[int]) -> list[str]:
    """One line per file trace of an evaluation: how many of its tasks each seed runs (one
    disjoint slice of consecutive tasks) and how many of them the seeds run in all, which
    the evaluation's table does not show."""
    notes = []
    for t in traces:
        tspec = TraceSpec.parse(t)
        rows = tspec.rows()
        if rows is None:
            continue
        count = rows // tspec.slice_tasks
        own = sorted(set(tspec.seeds or seeds))
        run = len(own) * tspec.slice_tasks
        notes.append(
            f"note: trace {t!r}: each seed runs one disjoint slice of {tspec.slice_tasks:,} "
            f"consecutive tasks ({count} slices in its {rows:,}); "
            f"{'seed' if len(own) == 1 else 'seeds'} {', '.join(map(str, own))} "
            f"{'runs' if len(own) == 1 else 'run'} {run:,} of them (slice_tasks=N in the spec "
            "sets the size)")
    return notes


def mean_ci(values: Iterable[float | None], confidence: float = CONFIDENCE) -> Interval:
    """Mean and the two-sided t-interval of the mean over the finite ``values``.

    ``half`` is ``t_{(1+confidence)/2, n-1} * sd / sqrt(n)`` (sample sd, ``ddof=1``); with one
    value the interval is NaN, with none the mean is NaN too.
    """
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    n = int(x.size)
    if n == 0:
        return Interval(mean=math.nan, lo=math.nan, hi=math.nan, half=math.nan, n=0)
    mean = float(x.mean())
    if n == 1:
        return Interval(mean=mean, lo=math.nan, hi=math.nan, half=math.nan, n=1)
    from scipy import stats

    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1) * x.std(ddof=1) / math.sqrt(n))
    return Interval(mean=mean, lo=mean - half, hi=mean + half, half=half, n=n)


def drift_series(cells: Sequence[EvalCell]) -> list[DriftPoint]:
    """Per window index: the mean start (relative to the trace's first submission) and the
    mean with interval of the windowed Jain's index and service lag over the cells (seeds)."""
    longest = max((len(c.windows) for c in cells), default=0)
    out = []
    for w in range(longest):
        rows = [(c.windows[w], c.windows[0].start_s) for c in cells if w < len(c.windows)]
        out.append(DriftPoint(
            window=w,
            start_s=float(np.mean([r.start_s - t0 for r, t0 in rows])),
            jain_slowdown=mean_ci(r.jain_slowdown for r, _ in rows),
            service_lag_s=mean_ci(r.service_lag_s for r, _ in rows),
        ))
    return out


def aggregate(cells: Sequence[EvalCell], baseline: str | None = None) -> list[EvalRow]:
    """One row per (trace, policy spec), in first-seen order, over the seeds of ``cells``.

    A row holds ``metrics`` (name -> interval), ``windows`` (``drift_series``) and the seeds.
    With ``baseline`` (a policy spec among the cells), ``vs_baseline`` holds per metric the
    paired difference ``policy - baseline`` over the seeds both ran, with its interval: a
    difference whose interval excludes 0 is a difference at 95 %.
    """
    groups: dict[tuple[str, str], list[EvalCell]] = {}
    for c in cells:
        groups.setdefault((c.trace, c.policy_spec), []).append(c)
    rows = []
    for (trace, policy), group in groups.items():
        group = sorted(group, key=lambda c: c.seed)
        vs_baseline = None
        if baseline is not None and (trace, baseline) in groups:
            base = {c.seed: c for c in groups[(trace, baseline)]}
            paired = [(c, base[c.seed]) for c in group if c.seed in base]
            vs_baseline = {m: mean_ci(a.metric(m) - b.metric(m) for a, b in paired)
                           for m in METRICS}
        rows.append(EvalRow(
            trace=trace,
            trace_name=group[0].trace_name,
            policy=policy,
            seeds=[c.seed for c in group],
            metrics={m: mean_ci(c.metric(m) for c in group) for m in METRICS},
            windows=drift_series(group),
            vs_baseline=vs_baseline,
        ))
    return rows


TABLE_METRICS: tuple[tuple[str, str], ...] = (
    ("mean_bounded_slowdown", "mean bsld"),
    ("mean_wait_s", "mean wait s"),
    ("p99_response_s", "p99 resp s"),
    ("jain_slowdown", "Jain"),
    ("window_jain_min", "min window Jain"),
    ("max_service_lag_s", "max lag s"),
)


def _fmt(value: float) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.3f}" if abs(value) < 10 else f"{value:,.0f}"


def fmt_ci(ci: Interval) -> str:
    """``mean ± half`` (just the mean when there is no interval)."""
    if not math.isfinite(ci.half):
        return _fmt(ci.mean)
    return f"{_fmt(ci.mean)} ± {_fmt(ci.half)}"


def table_rows(rows: Sequence[EvalRow]) -> list[dict[str, Any]]:
    """Flat records (one per row of ``aggregate``) for a table artifact or a Parquet file:
    ``trace``, ``policy``, ``seeds`` and, per metric, ``<metric>``, ``<metric>_lo``,
    ``<metric>_hi`` (and ``<metric>_diff``, ``_diff_lo``, ``_diff_hi`` against the baseline)."""
    out = []
    for r in rows:
        flat: dict[str, Any] = {"trace": r.trace, "policy": r.policy, "seeds": len(r.seeds)}
        for m in METRICS:
            ci = r.metrics[m]
            flat[m], flat[f"{m}_lo"], flat[f"{m}_hi"] = ci.mean, ci.lo, ci.hi
            if r.vs_baseline is not None:
                d = r.vs_baseline[m]
                flat[f"{m}_diff"], flat[f"{m}_diff_lo"], flat[f"{m}_diff_hi"] = d.mean, d.lo, d.hi
        out.append(flat)
    return out


def markdown_table(rows: Sequence[EvalRow], confidence: float = CONFIDENCE) -> str:
    """Headline metrics per (trace, policy) as ``mean ± half-width`` of the interval."""
    head = ["trace", "policy", "seeds", *(label for _, label in TABLE_METRICS)]
    body = [[r.trace, r.policy, len(r.seeds), *(fmt_ci(r.metrics[m]) for m, _ in TABLE_METRICS)]
            for r in rows]
    return (f"Mean ± half-width of the {confidence:.0%} t-interval over seeds.\n\n"
            + _markdown_table(head, body))


def drift_frame(rows: Sequence[EvalRow]) -> pl.DataFrame:
    """The per-window drift series of every row of ``aggregate``, one row per window."""
    records = []
    for r in rows:
        for w in r.windows:
            jain, lag = w.jain_slowdown, w.service_lag_s
            records.append({
                "trace": r.trace, "policy": r.policy, "window": w.window, "start_s": w.start_s,
                "jain_slowdown_mean": jain.mean, "jain_slowdown_lo": jain.lo,
                "jain_slowdown_hi": jain.hi,
                "service_lag_s_mean": lag.mean, "service_lag_s_lo": lag.lo,
                "service_lag_s_hi": lag.hi,
                "seeds": jain.n,
            })
    return pl.DataFrame(records, infer_schema_length=None)


class Evaluation(Record):
    """``evaluation.json``: the settings of the sweep, when it ran, its rows and its cells
    (with their windows)."""

    settings: dict[str, Any]
    created: str
    rows: list[EvalRow]
    cells: list[EvalCell]


class EvaluationRun(Record):
    """What the ``evaluate-policies`` flow hands back: its folder, the files written there
    (``write_evaluation``: name -> path) and the aggregated rows."""

    out: str
    files: dict[str, str]
    rows: list[EvalRow]


def write_evaluation(
    out: str | Path,
    settings: dict[str, Any],
    rows: Sequence[EvalRow],
    cells: Sequence[EvalCell],
) -> dict[str, Path]:
    """Write ``evaluation.json`` (``Evaluation``), ``table.parquet`` (``table_rows``) and
    ``drift.parquet`` (``drift_frame``) into the folder ``out``."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"json": folder / "evaluation.json", "table": folder / "table.parquet",
             "drift": folder / "drift.parquet"}
    record = Evaluation(settings=settings,
                        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                        rows=list(rows), cells=list(cells))
    paths["json"].write_text(json_text(record.model_dump()) + "\n")
    pl.DataFrame(table_rows(rows), infer_schema_length=None).write_parquet(paths["table"])
    drift_frame(rows).write_parquet(paths["drift"])
    return paths


def read_evaluation(folder: str | Path) -> Evaluation:
    """The ``evaluation.json`` of an evaluation folder."""
    return Evaluation.model_validate(json.loads((Path(folder) / "evaluation.json").read_text()))


def _run_cell_args(args: tuple[str, str, int, int, float | None]) -> EvalCell:
    return run_cell(*args)


def run_cells(
    cells: Sequence[tuple[str, str, int]],
    workers: int,
    window_s: float | None = None,
    jobs: int = 1,
) -> list[EvalCell]:
    """``run_cell`` over ``cells`` in cell order, on ``jobs`` processes (1: in this one).

    The processes are spawned, not forked: they import ``desched`` afresh and inherit no
    threads or state of the caller (a Prefect flow run, say). The Prefect flow
    ``evaluate-policies`` does the same on a task runner."""
    args = [(t, p, s, workers, window_s) for t, p, s in cells]
    if jobs <= 1:
        return [_run_cell_args(a) for a in args]
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
        return list(pool.map(_run_cell_args, args, chunksize=2))
