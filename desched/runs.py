"""Run folders and decision logs (DESIGN.md, Files).

A run folder holds ``tasks.parquet`` (the trace plus start, end, worker, wait, response),
``decisions.parquet`` (one row per decision), ``decision-log.parquet`` (the decision log:
decision and completion records in one stream, the format the live service appends and the
ingestion flow reads) and ``summary.json`` (``RunSummary``).

Decision-log records share ``kind`` ("decision" or "completion"), ``seq`` (order in the log),
``t`` (when), ``worker``, ``task_id`` and ``tenant``. Decision records add ``policy``,
``score``, ``queue_len``, ``tenant_backlog``, ``wait_s`` and the policy's components as extra
Float64 columns. Completion records add ``task_type``, ``submit_s``, ``start_s``,
``duration_s`` (real service time), ``status`` ("ok" or "failed"), ``peak_mem_mb`` and the
task's feature columns (``doc_bytes``, ``pages``, ... as in the trace). Columns that do not
apply to a record are null.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from desched.metrics import RunArrays, RunMetrics, TenantMetrics, summarize
from desched.records import Record, json_text
from desched.simulator import SimResult

DECISION_COLUMNS = (
    "seq", "t", "worker", "task_id", "tenant", "policy", "score", "queue_len",
    "tenant_backlog", "wait_s",
)
COMPLETION_COLUMNS = (
    "seq", "t", "worker", "task_id", "tenant", "task_type", "submit_s", "start_s",
    "duration_s", "status", "peak_mem_mb",
)
LOG_KINDS = ("decision", "completion")
RUN_FILES = ("tasks.parquet", "decisions.parquet", "decision-log.parquet", "summary.json")
"""The files ``write_run`` writes in a run folder (the decision log unless left out)."""
# zstd level 1: files within 1% of the default level's size, a quarter less CPU to write
PARQUET_ZSTD_LEVEL = 1


class RunPolicy(Record):
    """Which policy ran, with which parameters, on how many workers, under which seed."""

    policy: str
    params: dict[str, Any]
    workers: int
    seed: int


class RunSpeed(Record):
    """Decisions per second of wall-clock time (None for a run of no measurable length) and
    the engine that ran the simulation: ``"python"`` (the event loop over the policy
    object) or ``"kernel:<policy>"`` (its compiled kernel); None in summaries written
    before it was recorded."""

    decisions_per_s: float | None = None
    engine: str | None = None


class RunSummary(RunMetrics, RunSpeed, RunPolicy):
    """``summary.json``: the policy, its parameters, the seed, the worker count, the
    simulator's speed and every metric of ``desched.metrics.summarize``, in that order."""

    def tenants(self) -> dict[str, TenantMetrics]:
        """``per_tenant``, which a run summary always has."""
        assert self.per_tenant is not None
        return self.per_tenant


RUN_COLUMNS: tuple[str, ...] = ("start_s", "end_s", "worker", "wait_s", "response_s")
"""The columns a run adds to the trace's in ``tasks.parquet``."""


def tasks_frame(trace: pl.DataFrame, result: SimResult) -> pl.DataFrame:
    """The trace's columns plus ``RUN_COLUMNS``. A trace column of one of those names (a
    run's ``tasks.parquet`` simulated again, say) is kept as ``trace_<name>``, not
    replaced."""
    start = np.frombuffer(result.start_s, dtype=np.float64)
    end = np.frombuffer(result.end_s, dtype=np.float64)
    kept: dict[str, str] = {}
    for name in RUN_COLUMNS:
        if name in trace.columns:
            new = f"trace_{name}"
            while new in trace.columns or new in kept.values():
                new = f"trace_{new}"
            kept[name] = new
    if kept:
        trace = trace.rename(kept)
    return trace.with_columns(
        pl.Series("start_s", start),
        pl.Series("end_s", end),
        pl.Series("worker", np.frombuffer(result.worker, dtype=np.int32).astype(np.int64)),
    ).with_columns(
        (pl.col("start_s") - pl.col("submit_s")).alias("wait_s"),
        (pl.col("end_s") - pl.col("submit_s")).alias("response_s"),
    )


def decisions_frame(
    trace: pl.DataFrame, result: SimResult, components: tuple[str, ...]
) -> pl.DataFrame:
    """One row per decision, in decision order."""
    d = result.decisions
    task = np.frombuffer(d.task, dtype=np.int64)
    t = np.frombuffer(d.t, dtype=np.float64)
    submit = trace["submit_s"].to_numpy()[task]
    columns: dict[str, Any] = {
        "seq": np.arange(task.size, dtype=np.int64),
        "t": t,
        "worker": np.frombuffer(d.worker, dtype=np.int32).astype(np.int64),
        "task_id": trace["task_id"].gather(task),
        "tenant": trace["tenant"].gather(task),
        "policy": pl.repeat(result.policy, task.size, dtype=pl.String, eager=True),
        "score": np.frombuffer(d.score, dtype=np.float64),
        "queue_len": np.frombuffer(d.queue_len, dtype=np.int64),
        "tenant_backlog": np.frombuffer(d.tenant_backlog, dtype=np.int64),
        "wait_s": t - submit,
    }
    for name, values in zip(components, d.parts):
        columns[name] = np.frombuffer(values, dtype=np.float64)
    return pl.DataFrame(columns)


def completions_frame(tasks: pl.DataFrame) -> pl.DataFrame:
    """Completion records of a finished run (``tasks`` from ``tasks_frame``), by end time."""
    own = {"task_id", "tenant", "task_type", "submit_s", "duration_s", "start_s", "end_s",
           "worker", "wait_s", "response_s", "predicted_s", "mem_mb"}
    reserved = {*DECISION_COLUMNS, *COMPLETION_COLUMNS, "kind"}
    # a trace column that shares a record column's name (an SWF log's ``status``) is kept
    # under ``trace_<name>``
    features = [
        pl.col(c).alias(f"trace_{c}") if c in reserved else pl.col(c)
        for c in tasks.columns
        if c not in own
    ]
    return (
        tasks.sort(["end_s", "worker"])
        .select(
            pl.col("end_s").alias("t"),
            "worker", "task_id", "tenant", "task_type", "submit_s", "start_s", "duration_s",
            pl.lit("ok").alias("status"),
            (pl.col("mem_mb") if "mem_mb" in tasks.columns else pl.lit(None, pl.Float64))
            .cast(pl.Float64)
            .alias("peak_mem_mb"),
            *features,
        )
    )


def merge_order(decision_t: npt.NDArray[np.float64],
                completion_t: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    """Row order of decisions followed by completions (as concatenated) sorted by time,
    completions first within an instant, each stream keeping its own order: one stable sort
    by time, which takes linear time when both streams are in time order (as a run's are).
    """
    nd, nc = decision_t.size, completion_t.size
    # completions placed first: a stable sort by time alone then breaks ties by kind and
    # position; numpy's stable sort merges the two runs of an ordered log in linear time
    by_time = np.argsort(np.concatenate((completion_t, decision_t)), kind="stable")
    return np.where(by_time >= nc, by_time - nc, by_time + nd).astype(np.int64)


def decision_log_frame(decisions: pl.DataFrame, completions: pl.DataFrame) -> pl.DataFrame:
    """Decisions and completions merged in time order (completions first within an instant,
    as the simulator applies them), numbered by ``seq``."""
    merged = pl.concat(
        [
            decisions.drop("seq").with_columns(pl.lit("decision").alias("kind")),
            completions.with_columns(pl.lit("completion").alias("kind")),
        ],
        how="diagonal_relaxed",
    )
    merged = merged[merge_order(decisions["t"].to_numpy(), completions["t"].to_numpy())]
    merged = merged.with_row_index("seq").with_columns(pl.col("seq").cast(pl.Int64))
    first = ["kind", "seq", "t", "worker", "task_id", "tenant"]
    return merged.select(first + [c for c in merged.columns if c not in first])


def completion_order(result: SimResult) -> npt.NDArray[np.int64]:
    """Task positions in the order the completion records of the decision log list them: by
    end time, then worker (``completions_frame``'s order); one worker's completions at one
    instant, which only a duration below the resolution of its start time can give, in the
    order it started them. One worker's tasks, in decision order, end in time order, so a
    stable sort of the tasks grouped by worker merges ``workers`` sorted runs: O(n log W)."""
    d = result.decisions
    task = np.frombuffer(d.task, dtype=np.int64) if len(d.task) else np.zeros(0, np.int64)
    worker = np.frombuffer(d.worker, dtype=np.int32) if len(d.worker) else np.zeros(0, np.int32)
    if result.workers <= 1 << 16:
        worker = worker.astype(np.uint16)  # a radix sort
    by_worker = task[np.argsort(worker, kind="stable")]
    end = np.frombuffer(result.end_s, dtype=np.float64) if len(result.end_s) else np.zeros(0)
    return np.asarray(by_worker[np.argsort(end[by_worker], kind="stable")], dtype=np.int64)


def _where_index(valid: npt.NDArray[np.bool_], index: npt.NDArray[np.int64]) -> pl.Series:
    """``index`` where ``valid``, null elsewhere: gathering by it gives nulls there."""
    return pl.select(
        pl.when(pl.Series(valid)).then(pl.Series(index, dtype=pl.get_index_type()))
    ).to_series()


def decision_log_from_arrays(
    tasks: pl.DataFrame, decisions: pl.DataFrame, result: SimResult,
    completed: npt.NDArray[np.int64],
    event_times: tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]] | None = None,
) -> pl.DataFrame:
    """``decision_log_frame(decisions, completions_frame(tasks))``, the same frame, built
    without concatenating and reordering the two record frames: the shared columns by one
    numpy gather each, every other column by one gather with a null where the record is
    of the other kind. ``completed`` is ``completion_order(result)``. Where a trace column
    and a decision column share a name the two record kinds mix in one column, which the
    reference builds (its supertype). ``event_times``: the decisions' and the completions'
    times (in ``completed`` order) to order the records by, where the frames' own are the
    simulated ones shifted (``write_run``'s ``origin``) and rounding may have merged two
    instants."""
    own = {"task_id", "tenant", "task_type", "submit_s", "duration_s", "start_s", "end_s",
           "worker", "wait_s", "response_s", "predicted_s", "mem_mb"}
    reserved = {*DECISION_COLUMNS, *COMPLETION_COLUMNS, "kind"}
    shared = ["t", "worker", "task_id", "tenant"]
    decision_only = [c for c in decisions.columns if c not in {"seq", *shared}]
    features = {(f"trace_{c}" if c in reserved else c): c for c in tasks.columns
                if c not in own}
    completion_only = ["task_type", "submit_s", "start_s", "duration_s", "status",
                       "peak_mem_mb", *features]
    if set(decision_only) & set(completion_only):
        return decision_log_frame(decisions, completions_frame(tasks))
    d = result.decisions
    nd = len(d.task)
    d_t = decisions["t"].to_numpy()
    c_t = tasks["end_s"].to_numpy()[completed]
    order = merge_order(*(event_times or (d_t, c_t)))
    is_decision = order < nd
    row_task = np.concatenate((decisions_tasks(result), completed))[order]
    worker = np.concatenate((decisions["worker"].to_numpy(),
                             tasks["worker"].to_numpy()[completed]))[order]
    first = pl.DataFrame({
        "kind": pl.Series(["completion", "decision"]).gather(
            pl.Series(is_decision.astype(np.uint32))),
        "seq": np.arange(order.size, dtype=np.int64),
        "t": np.concatenate((d_t, c_t))[order],
        "worker": worker,
    })
    named = tasks.select("task_id", "tenant")[row_task]
    as_decision = decisions.select(decision_only).select(
        pl.all().gather(_where_index(is_decision, order)))
    mem = (pl.col("mem_mb").cast(pl.Float64) if "mem_mb" in tasks.columns
           else pl.lit(None, pl.Float64))
    as_completion = tasks.select(
        "task_type", "submit_s", "start_s", "duration_s",
        pl.lit("ok").alias("status"), mem.alias("peak_mem_mb"),
        *(pl.col(c).alias(name) for name, c in features.items()),
    ).select(pl.all().gather(_where_index(~is_decision, completed[np.maximum(order - nd, 0)])))
    return pl.concat([first, named, as_decision, as_completion], how="horizontal")


def decisions_tasks(result: SimResult) -> npt.NDArray[np.int64]:
    """The task position of every decision, in decision order."""
    task = result.decisions.task
    return np.frombuffer(task, dtype=np.int64) if len(task) else np.zeros(0, np.int64)


def write_run(
    out_dir: str | Path,
    trace: pl.DataFrame,
    result: SimResult,
    *,
    components: tuple[str, ...],
    params: dict[str, Any],
    seed: int,
    window_s: float | None = None,
    decision_log: bool = True,
    origin: float = 0.0,
    submit_s: pl.Series | None = None,
    tenants: tuple[pl.Series, npt.NDArray[np.int64]] | None = None,
) -> RunSummary:
    """Write the run folder and return its summary (also written as ``summary.json``);
    ``decision_log=False`` leaves out ``decision-log.parquet`` (a bench run that does not
    ingest it). ``origin``: ``trace`` and ``result`` are the user's trace shifted to start at
    0 (its ``submit_s`` minus ``origin``, ``run_policy``), where a short duration keeps its
    precision however late the trace's clock starts; the metrics are computed there (waits,
    responses, slowdowns, ``summary.json``'s figures), and the files carry the trace's own
    clock: ``submit_s`` (the trace's column, given) and every other instant plus
    ``origin``. ``tenants``: the tenant names and each task's code into them, where the
    caller has them (``desched.controls.KernelInputs``). Every column is built from arrays (numpy, polars), none row by row. The
    Parquet files are written on a second thread (polars releases the GIL) while this one
    builds the decision log and computes the metrics; ``summary.json`` is written last, once
    every file is, and a failed write raises here."""
    from concurrent.futures import ThreadPoolExecutor

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tasks = tasks_frame(trace, result)
    decisions = decisions_frame(trace, result, components)
    completed = completion_order(result)
    tasks_out, decisions_out, event_times = tasks, decisions, None
    if origin:
        assert submit_s is not None
        tasks_out = tasks.with_columns(submit_s, pl.col("start_s") + origin,
                                       pl.col("end_s") + origin)
        decisions_out = decisions.with_columns(pl.col("t") + origin)
        event_times = (decisions["t"].to_numpy(), tasks["end_s"].to_numpy()[completed])
    log = out / "decision-log.parquet"
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="desched-write") as writer:
        written = [
            writer.submit(frame.write_parquet, out / name, compression_level=PARQUET_ZSTD_LEVEL)
            for name, frame in (("tasks.parquet", tasks_out),
                                ("decisions.parquet", decisions_out))
        ]
        if decision_log:
            written.append(writer.submit(
                decision_log_from_arrays(tasks_out, decisions_out, result, completed,
                                         event_times).write_parquet,
                log, compression_level=PARQUET_ZSTD_LEVEL))
        elif log.exists():
            log.unlink()  # a stale log of an earlier run in this folder
        summary = summary_of(tasks, result, params=params, seed=seed, window_s=window_s,
                             completed=completed, tenants=tenants)
        if origin:
            summary = summary.model_copy(update={"windows": [
                w.model_copy(update={"start_s": w.start_s + origin, "end_s": w.end_s + origin})
                for w in summary.windows]})
        for write in written:
            write.result()
    (out / "summary.json").write_text(json_text(summary.model_dump(), indent=2) + "\n")
    return summary


def read_summary(run_dir: str | Path) -> RunSummary:
    """The ``summary.json`` of a run folder."""
    return RunSummary.model_validate(json.loads(Path(run_dir, "summary.json").read_text()))


def summary_of(
    tasks: pl.DataFrame,
    result: SimResult,
    *,
    params: dict[str, Any],
    seed: int,
    window_s: float | None = None,
    completed: npt.NDArray[np.int64] | None = None,
    tenants: tuple[pl.Series, npt.NDArray[np.int64]] | None = None,
) -> RunSummary:
    """``summary.json``'s content (``RunSummary``). ``completed`` (``completion_order``, if
    the caller has it) and the decision order spare the metrics two sorts; ``tenants``
    (names, and each task's code into them, in any order of the names) a pass over the
    tasks' names."""
    if tenants is None:
        tenant = tasks["tenant"]
        names = tenant.unique().sort()
        codes = tenant.replace_strict(  # a hash lookup per row, far cheaper than a sort
            names, pl.int_range(names.len(), eager=True), return_dtype=pl.Int64
        ).to_numpy()
    else:
        # the same sorted names and codes: each code mapped to its name's rank
        given, by_code = tenants
        by_name = given.arg_sort().to_numpy()
        rank = np.empty(by_name.size, dtype=np.int64)
        rank[by_name] = np.arange(by_name.size, dtype=np.int64)
        names, codes = given.sort(), rank[np.asarray(by_code, dtype=np.int64)]
    run = RunArrays(
        tenant=codes,
        tenant_names=names.to_numpy(),
        submit_s=tasks["submit_s"].to_numpy(),
        duration_s=tasks["duration_s"].to_numpy(),
        start_s=tasks["start_s"].to_numpy(),
        end_s=tasks["end_s"].to_numpy(),
        start_order=decisions_tasks(result),
        end_order=completion_order(result) if completed is None else completed,
    )
    metrics = summarize(run, result.workers, window_s)
    return RunSummary(
        policy=result.policy,
        params=params,
        workers=result.workers,
        seed=seed,
        decisions_per_s=(len(result.decisions.task) / result.wall_s) if result.wall_s else None,
        engine=result.engine,
        **dict(metrics),
    )
