"""``report.json`` as typed records: every figure the report states, by question.

A measured value that can be missing (an undefined ratio, an interval over one seed, Jain's
index of nothing) is ``None`` here and ``null`` in the JSON; NaN never reaches a record.
"""

from __future__ import annotations

from typing import Any

from pydantic import SerializerFunctionWrapHandler, field_validator, model_serializer

from desched.bench.report.inputs import Ingestion, WorkloadInfo
from desched.bench.report.numbers import clean_json
from desched.records import Record

Num = float | None
"""A measured value, None where it is undefined."""


class ReportRecord(Record):
    """A record of ``report.json``: NaN and infinities become None on the way in."""

    @field_validator("*", mode="before")
    @classmethod
    def _finite(cls, value: Any) -> Any:
        return clean_json(value) if isinstance(value, (float, dict, list, tuple)) else value


class CI(ReportRecord):
    """Mean and 95 % t-interval of the mean over ``n`` values."""

    mean: Num
    lo: Num
    hi: Num
    half: Num
    n: int


class SeedCI(ReportRecord):
    """Mean, half-width and bounds over seeds (``n`` absent for a paired difference)."""

    mean: Num
    half: Num
    lo: Num
    hi: Num
    n: int | None = None

    @model_serializer(mode="wrap")
    def _omit_no_n(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict) and data.get("n") is None:
            data.pop("n", None)
        return data


class Headline(ReportRecord):
    """The figures a policy row of the report shows, from one run."""

    mean_response_s: Num
    p99_response_s: Num
    mean_wait_s: Num
    mean_bounded_slowdown: Num
    jain_slowdown: Num
    window_jain_min: Num
    window_jain_mean: Num
    max_service_lag_s: Num
    window_lag_mean_s: Num
    jain_windows: int | None = None
    """How many windows the windowed Jain's figures rest on (None: not recorded)."""
    lag_windows: int | None = None
    """How many windows (two tenants or more backlogged throughout) the mean lag rests on."""
    small_tenants_mean_wait_s: Num
    utilization: Num


class Q3Row(Headline):
    """A policy row of Q3, with its change against the baseline on the same held-out part."""

    d_mean_response_pct: Num
    d_p99_response_pct: Num
    d_jain: Num


class Gaps(ReportRecord):
    """Share of the way from the baseline to the reference that the candidate closes, in %,
    per fairness measure (None where there is no gap: ``desched.bench.report.build``)."""

    max_service_lag: Num
    small_tenants_mean_wait: Num
    window_lag_mean: Num


class Costs(ReportRecord):
    """Relative change of response time, in %: the candidate against the baseline
    ("memoryless") and against the reference ("vtc"), and the reference against the
    baseline."""

    mean_response_vs_memoryless: Num
    mean_response_vs_vtc: Num
    vtc_mean_response_vs_memoryless: Num
    p99_response_vs_memoryless: Num


class Q1Workload(ReportRecord):
    """Q1 on one workload: its small tenants, every Q1 policy's row, the gap the candidate
    closes and what it costs."""

    small_tenants: list[str]
    small_tenants_n: int
    tenants_n: int
    policies: dict[str, Headline]
    gap_closed_pct: Gaps
    cost_pct: Costs


class SeedsPolicy(ReportRecord):
    """One policy of one workload over seeds."""

    mean_response_s: SeedCI
    p99_response_s: SeedCI
    jain_slowdown: SeedCI
    window_jain_min: SeedCI
    max_service_lag_s: SeedCI
    window_lag_mean_s: SeedCI
    mean_bounded_slowdown: SeedCI
    d_mean_response_s: SeedCI | None = None

    @model_serializer(mode="wrap")
    def _omit_no_baseline(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict) and data.get("d_mean_response_s") is None:
            data.pop("d_mean_response_s", None)
        return data


class SeedsWorkload(ReportRecord):
    """Q1's evaluation over seeds of one workload, and the lag gap from the means."""

    spec: str
    seeds: list[int]
    policies: dict[str, SeedsPolicy]
    gap_closed_pct: dict[str, Num] | None = None
    cost_pct: dict[str, Num] | None = None

    @model_serializer(mode="wrap")
    def _omit_no_gap(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            for key in ("gap_closed_pct", "cost_pct"):
                if data.get(key) is None:
                    data.pop(key, None)
        return data


class Q1Section(ReportRecord):
    """Q1: memoryless scoring against per-tenant service counters. ``baseline`` is today's
    scorer, ``reference`` the fair scheduler whose gap is measured, ``candidate`` the one
    counter; ``policies`` the whole family (``desched.bench.roles.q1_family``)."""

    baseline: str
    reference: str
    candidate: str
    policies: list[str]
    workloads: dict[str, Q1Workload]
    over_seeds: dict[str, SeedsWorkload]


class ObjectiveInfo(ReportRecord):
    text: str
    fairness_weight: float


class ReferenceInfo(ReportRecord):
    policy: str
    weights: dict[str, float]


class Brief(ReportRecord):
    """One candidate's held-out verdict, as the report shows it."""

    seeds: int
    J: CI
    d_bsld_pct: CI
    d_jain: CI
    d_max_lag_s: CI
    verdict: str


class CurveStep(ReportRecord):
    step: int
    value: float
    best: float


class Q2Learner(ReportRecord):
    """Q2 for one learner, from its weights card."""

    policy: str
    weights: dict[str, float]
    train_objective: float
    learner_seconds: float
    steps: int
    first_value: Num
    best_value: Num
    curve: list[CurveStep]
    heldout: dict[str, dict[str, Brief]]
    overall: dict[str, Brief]
    train_traces: int
    heldout_traces: int


class Q2Section(ReportRecord):
    objective: ObjectiveInfo
    reference: ReferenceInfo
    learners: dict[str, Q2Learner]


class LatencyInfo(ReportRecord):
    p50: float
    p99: float
    mean: float
    n: float


class PredictorInfo(ReportRecord):
    """Q3's duration model on one workload against its baselines."""

    version: str
    objective: str
    train_rows: int
    heldout_rows: int
    train_frac_pct: float
    heldout: dict[str, dict[str, Num]]
    card_test: dict[str, Any]
    best_baseline: str
    mae_vs_best_baseline_pct: Num
    latency_us: LatencyInfo
    booster_latency_us: LatencyInfo
    training_time_s: float
    compile_time_s: Num


class TenantRatio(ReportRecord):
    tenant: str
    slowdown_ratio: float
    mean_duration_s: float


class TenantEffects(ReportRecord):
    """How a policy changes each tenant's mean slowdown against the baseline, split by the
    tenant's mean task duration (short: at or below the median over tenants)."""

    median_tenant_duration_s: float
    short_tenants: int
    long_tenants: int
    short_better: int
    short_worse: int
    long_better: int
    long_worse: int
    short_median_ratio: Num
    long_median_ratio: Num
    most_helped: list[TenantRatio]
    most_hurt: list[TenantRatio]


class Q3Workload(ReportRecord):
    """Q3 on one workload: the predictor, every candidate on the held-out part, and the
    tenants each predicted-duration policy helps or hurts."""

    predictor: PredictorInfo
    workers: int
    tasks: int
    policies: dict[str, Q3Row]
    tenants: dict[str, TenantEffects]


class Q3Section(ReportRecord):
    """Q3: predicted duration. ``focus`` are the policies that rank on ``predicted_s``,
    ``bounds`` the clairvoyant ones (``desched.bench.roles``)."""

    baseline: str
    focus: list[str]
    bounds: list[str]
    workloads: dict[str, Q3Workload]


class ParetoPoint(ReportRecord):
    """One (workload, candidate) of Q3's held-out runs, and whether it is on either front
    among the policies one can run (a clairvoyant bound never is)."""

    workload: str
    policy: str
    mean_response_s: Num
    jain_slowdown: Num
    max_service_lag_s: Num
    clairvoyant: bool
    pareto_jain: bool
    pareto_lag: bool


class Pareto(ReportRecord):
    points: list[ParetoPoint]


class Timing(ReportRecord):
    """Seconds per step and in the flow (``total_s``), and ``process_s``: from the command's
    start (the interpreter's, Prefect's local server's start-up included) to the report
    assembled, what a user waits; None where the process's start time is not known."""

    steps: dict[str, float]
    total_s: float
    load_average: list[float]
    cpus: int
    process_s: float | None = None


class DeployRow(ReportRecord):
    """One policy on one real log of the deployment judge: its criteria (oracle share, frontier
    share, p99 ratio, Δ Jain, worst-tenant ratio), which failed, and every tenant's ratio (the
    plot)."""

    workload: str
    policy: str
    gain: Num
    p99_ratio: Num
    delta_jain: Num
    worst_tenant: Num
    worst_tenant_name: str | None
    frontier_share: Num = None
    """The gain over the log's clairvoyant frontier gain (``desched.bench.frontier``)."""
    passed: int
    criteria: int
    failed: list[str]
    mean_response_s: Num
    today_mean_response_s: Num
    tenant_ratio: dict[str, float]


class DeployHarmRow(ReportRecord):
    """One policy on one DES scenario: the no-harm check against today's scorer."""

    workload: str
    policy: str
    mean_response_s: Num
    today_mean_response_s: Num
    jain_slowdown: Num
    today_jain_slowdown: Num
    max_service_lag_s: Num
    today_max_service_lag_s: Num
    passed: int
    criteria: int
    failed: list[str]


class DeploySection(ReportRecord):
    """"Which policy to deploy" (``desched.bench.report.deploy``): the judge's criteria per
    workload and policy, its recommendation and the service's deployed default."""

    source: str
    today: str
    oracle: str
    thresholds: dict[str, float]
    load: Num
    logs: list[str]
    scenarios: list[str]
    policies: list[str]
    rows: list[DeployRow]
    harm: list[DeployHarmRow]
    recommendation: str | None
    recommendation_passed: int
    recommendation_criteria: int
    reason: str
    deployed_default: str
    all_pass: list[str]


class Plots(ReportRecord):
    """The PNG files next to ``report.md``."""

    q1: dict[str, str]
    q2: str
    q3: str
    pareto: str
    deploy: str | None = None


class Report(ReportRecord):
    """``report.json``: every figure of every question (``desched.bench.report.build`` for
    the definitions, also written into ``definitions``)."""

    schema_version: int = 1
    run: str
    mode: str
    created: str
    confidence_pct: int
    definitions: dict[str, Any]
    settings: dict[str, Any]
    workloads: dict[str, WorkloadInfo]
    ingestion: Ingestion
    q1: Q1Section
    q2: Q2Section
    q3: Q3Section
    pareto: Pareto
    deploy: DeploySection | None = None
    timing: Timing
    commands: dict[str, str]
    plots: Plots

    def to_json(self) -> dict[str, Any]:
        """The JSON object of ``report.json`` (the key ``schema`` holds ``schema_version``)."""
        data = self.model_dump()
        return {"schema": data.pop("schema_version"), **data}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Report:
        """The record of a ``report.json`` object."""
        data = dict(data)
        return cls.model_validate({"schema_version": data.pop("schema", 1), **data})
