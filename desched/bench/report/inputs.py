"""What the report is built from: the records the demo's steps hand over (``desched.bench.demo``).

The report reads only these, never the steps' files or a policy's name: which policy plays
which part comes from ``desched.bench.roles``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import SerializerFunctionWrapHandler, model_serializer

from desched.models.cards import DurationCard
from desched.records import Record
from desched.runs import RunSummary


class WorkloadInfo(Record):
    """One workload of the demo as the report describes it: where it comes from (a
    scenario's ``seed``; an SWF log's job counts and, for a time slice, its first job), its
    size, the worker count chosen for it and its offered load, and the ``duration_scaled``
    parameters (``desched.policies.base.PolicyParams``) set for it, per policy. A dump
    leaves out what does not apply to its kind."""

    kind: Literal["scenario", "swf"]
    source: str
    seed: int | None = None
    swf_jobs_in_file: int | None = None
    swf_jobs_kept: int | None = None
    swf_jobs_dropped: int | None = None
    slice_first_job: int | None = None
    tasks: int
    tenants: int
    task_types: int
    span_h: float
    mean_duration_s: float
    workers: int
    offered_load: float
    target_load: float
    scaled_params: dict[str, dict[str, float]]

    @model_serializer(mode="wrap")
    def _omit_absent(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            for key in ("seed", "swf_jobs_in_file", "swf_jobs_kept", "swf_jobs_dropped",
                        "slice_first_job"):
                if data.get(key) is None:
                    data.pop(key, None)
        return data


class Ingestion(Record):
    """What the ingestion of the baseline's decision logs into DuckDB did."""

    files_seen: int
    files_read: int
    decisions_loaded: int
    completions_loaded: int
    rows_quarantined: int
    quarantined_by_rule: dict[str, int]
    gx_rows_checked: int
    warehouse_rows: dict[str, int]


class Q1Runs(Record):
    """Q1's runs of one workload: per policy, its run folder and its summary."""

    workload: str
    dirs: dict[str, str]
    summaries: dict[str, RunSummary]


class Latency(Record):
    """Per-prediction latency in microseconds over ``n`` predictions."""

    p50: float
    p99: float
    mean: float
    n: float


class PredictorResult(Record):
    """Q3's duration model for one workload: trained on the first ``train_frac`` of the
    trace, registered, scored on the rest against its baselines (``heldout``: name ->
    ``desched.models.training.score``), its latency, and the held-out trace it wrote with
    ``predicted_s``. ``card`` is the registry's card of the version (the report reads only
    the figures copied out of it)."""

    workload: str
    version: str
    registry: str
    objective: str
    objectives_compared: Any
    train_rows: int
    heldout_rows: int
    cut_s: float
    train_frac: float
    card_test: dict[str, Any]
    heldout: dict[str, dict[str, float | None]]
    quantiles: Any
    training_time_s: float
    compile_time_s: float | None
    latency_us: Latency
    booster_latency_us: Latency
    heldout_trace: str
    workers: int
    card: DurationCard | None = None


class HeldoutRun(Record):
    """One candidate on a held-out trace: the registered policy, its parameters, the run."""

    policy: str
    params: dict[str, Any]
    summary: RunSummary


class HeldoutRuns(Record):
    """Every candidate (a label per policy, and per learned weights card) on the held-out
    part of one workload, and each tenant's mean task duration there."""

    workload: str
    workers: int
    tasks: int
    runs: dict[str, HeldoutRun]
    tenant_durations: dict[str, float]


class Roles(Record):
    """The parts named in settings: today's scorer (``baseline``), and for Q1 the fair
    scheduler whose gap is measured (``reference``) and the one counter (``candidate``),
    both of Q1's family (``desched.bench.roles.q1_family``)."""

    baseline: str
    reference: str
    candidate: str
