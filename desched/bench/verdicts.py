"""The deployment judge's building blocks: its records, one simulation, the criteria.

``desched.bench.judge`` (the judge), ``desched.bench.frontier`` (the clairvoyant frontier) and
``desched.bench.rule`` (the recommendation rule) build on this module; ``judge`` re-exports
every name here. The criteria are those of ``judge``'s module docstring (issue 19).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from desched.bench.judge_cases import Case
from desched.bench.roles import clairvoyant
from desched.policies import REGISTRY, WITHOUT_PREDICTION
from desched.records import Record

if TYPE_CHECKING:
    from desched.trace import TaskTable

PROMISES: tuple[str, ...] = ("p99", "delta_jain", "worst_tenant")
"""The promise criteria of a log verdict (a scenario's promises are all its criteria)."""
TODAY = WITHOUT_PREDICTION
"""Today's scorer, every criterion's reference (``ifs-memoryless``)."""
ORACLE = next(n for n in REGISTRY if clairvoyant(n))
"""The clairvoyant bound of the gain: the registry's first policy that reads the true
duration (``sjf-oracle``)."""
LOG_CRITERIA: tuple[str, ...] = ("gain", "frontier_share", *PROMISES)
SCENARIO_CRITERIA: tuple[str, ...] = ("mean_response", "jain_slowdown", "max_service_lag")
SHARE_EPS = 1e-9
"""A frontier gain at most this is "no safe gain": frontier shares are then undefined."""


class Thresholds(Record):
    """The criteria's bounds (issue 19), the tenant filter of ``worst_tenant`` and the rule's
    tie width (``desched.bench.rule``)."""

    frontier_share_min: float = 0.8
    gain_floor: float = 0.1
    p99_ratio_max: float = 1.05
    delta_jain_min: float = -0.02
    worst_tenant_max: float = 2.0
    min_tenant_tasks: int = 10
    share_tie: float = 0.01


class Outcome(Record):
    """The metrics of one policy on one case (one simulation)."""

    policy: str
    params: dict[str, Any]
    mean_response_s: float
    p99_response_s: float
    jain_bsld: float
    jain_slowdown: float
    max_service_lag_s: float
    tenant_bsld: dict[str, float]
    tenant_tasks: dict[str, int]


class Criterion(Record):
    """One criterion: its value, the bound, whether the value must be at least or at most the
    bound, whether it holds, and how far it is from holding (0 when it holds)."""

    value: float | None
    bound: float
    sense: Literal["min", "max"]
    passed: bool
    distance: float


class Verdict(Record):
    """One policy on one workload: its criteria (``LOG_CRITERIA`` on a log,
    ``SCENARIO_CRITERIA`` on a scenario), its outcome beside today's, and per tenant with at
    least ``min_tenant_tasks`` tasks its mean bounded slowdown as a multiple of today's."""

    workload: str
    kind: Literal["log", "scenario"]
    policy: str
    params: dict[str, Any]
    criteria: dict[str, Criterion]
    passed: int
    outcome: Outcome
    today: Outcome
    oracle_mean_response_s: float | None
    worst_tenant_name: str | None
    tenant_ratio: dict[str, float]
    frontier_gain: float | None = None
    """The log's frontier gain (``desched.bench.frontier``); None on a scenario."""

    @property
    def all_passed(self) -> bool:
        return self.passed == len(self.criteria)

    @property
    def promises_kept(self) -> bool:
        """Every promise holds (a log: tail, fairness, no tenant harmed; a scenario: no
        harm)."""
        return all(promise_checks(self))



def promise_checks(v: Verdict) -> list[bool]:
    """Whether each promise of verdict ``v`` holds."""
    if v.kind == "log":
        return [v.criteria[k].passed for k in PROMISES if k in v.criteria]
    return [c.passed for c in v.criteria.values()]


def frontier_share(gain: float | None, frontier_gain: float | None) -> float | None:
    """``gain / frontier_gain``; ``None`` when either is undefined or the frontier is not
    positive."""
    if gain is None or frontier_gain is None or frontier_gain <= SHARE_EPS:
        return None
    return gain / frontier_gain


def resolve(case: Case, spec: str,
            extra: Mapping[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """The policy name and its parameters on ``case``: the spec's, then ``extra`` (a tuner's),
    then unset ``duration_scaled`` keys scaled to the training part's mean duration on a log."""
    from desched.bench.specs import PolicySpec
    from desched.policies import get_policy, parse_params

    parsed = PolicySpec.parse(spec)
    params: dict[str, Any] = dict(parsed.params)
    params.update(extra or {})
    cls = get_policy(parsed.name)
    if case.kind == "log":
        for key, factor in cls.Params.duration_scaled.items():
            params.setdefault(key, round(factor * case.mean_train_duration_s, 1))
    parse_params(parsed.name, {k: str(v) for k, v in params.items()})
    return parsed.name, params


def _tenant_bsld(tenant: np.ndarray, bsld: np.ndarray, names: np.ndarray | None = None
                 ) -> tuple[dict[str, float], dict[str, int]]:
    if names is None:
        names, codes = np.unique(tenant, return_inverse=True)
    else:
        codes = tenant
    sums = np.bincount(codes, weights=bsld, minlength=names.size)
    counts = np.bincount(codes, minlength=names.size)
    return ({str(n): float(s / c) for n, s, c in zip(names, sums, counts, strict=True)},
            {str(n): int(c) for n, c in zip(names, counts, strict=True)})


def outcome_of(policy: str, params: Mapping[str, Any], tenant: np.ndarray, submit_s: np.ndarray,
               duration_s: np.ndarray, start_s: np.ndarray, workers: int,
               names: np.ndarray | None = None) -> Outcome:
    """The judge's metrics of a finished run (per-task arrays aligned by position). With
    ``names`` (the distinct tenant names, sorted), ``tenant`` holds each task's index into
    them, as ``np.unique(..., return_inverse=True)`` gives it (``case_tenants``)."""
    from desched.metrics import RunArrays, jain, summarize

    run = RunArrays(tenant=tenant, submit_s=submit_s, duration_s=duration_s, start_s=start_s,
                    end_s=start_s + duration_s, tenant_names=names)
    summary = summarize(run, workers)
    bsld, tasks = _tenant_bsld(tenant, run.bounded_slowdown, names)
    return Outcome(policy=policy, params=dict(params),
                   mean_response_s=summary.mean_response_s,
                   p99_response_s=summary.p99_response_s,
                   jain_bsld=jain(list(bsld.values())),
                   jain_slowdown=summary.jain_slowdown,
                   max_service_lag_s=summary.max_service_lag_s,
                   tenant_bsld=bsld, tenant_tasks=tasks)


def case_tenants(case: Case) -> tuple[np.ndarray, np.ndarray]:
    """The distinct tenant names of ``case``'s test part, sorted, and each task's index into
    them: sorted once per test part, not once per simulation (every run of a case shares
    them). Kept on the case beside the frame they were read from, so a case given another
    frame sorts again."""
    kept = case.tenants
    if kept is None or kept[0] is not case.frame:
        names, codes = np.unique(case.frame["tenant"].to_numpy(), return_inverse=True)
        kept = case.tenants = (case.frame, names, codes.astype(np.int64).reshape(-1))
    return kept[1], kept[2]


def case_table(case: Case) -> TaskTable:
    """``TaskTable.from_frame(case.frame)``, a copy of its own for each run: the table is
    read off the frame once per test part (kept on the case, as ``case_tenants``)."""
    from desched.trace import TaskTable as Table

    kept = case.table
    if kept is None or kept[0] is not case.frame:
        kept = case.table = (case.frame, Table.from_frame(case.frame))
    table: TaskTable = kept[1]
    return table.copy()


def run_labels(case: Case, policy: Any, tasks: TaskTable) -> Any:
    """The predictions a run of ``policy`` on ``case`` makes as it goes
    (``desched.bench.online.OnlineLabels``, writing into ``tasks``), or None where the policy
    reads none or is clairvoyant, or the case has no model to make them (its frame's own)."""
    from desched.bench.online import LABEL_COLUMNS, OnlineLabels

    read = set(policy.reads) & set(LABEL_COLUMNS)
    if case.online is None or policy.clairvoyant() or not read:
        return None
    return OnlineLabels(case.online, tasks, read)


PREFILLED = "prefilled:"
"""``case.outcomes`` key prefix of a simulation run ahead elsewhere
(``desched.bench.pooled_judge``), under its resolved spec."""


def evaluate(case: Case, spec: str, extra: Mapping[str, Any] | None = None) -> Outcome:
    """Simulate policy ``spec`` (with a tuner's ``extra`` parameters) on ``case``; cached in
    ``case.outcomes`` by resolved spec. A prefilled run (``PREFILLED``) is taken instead of
    simulating, with this call's own parameters: two parameter sets of one resolved spec
    (``a=5.0`` from a spec, ``5.0`` from a tuner) run the same simulation, and the outcome
    keeps those of the first call, as without the prefill."""
    from desched.bench.specs import policy_spec
    from desched.policies import make_policy
    from desched.simulator import simulate

    name, params = resolve(case, spec, extra)
    key = policy_spec(name, params)
    cached = case.outcomes.get(key)
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    ready = case.outcomes.pop(PREFILLED + key, None)
    if ready is not None:
        out = ready.model_copy(update={"params": dict(params)})
        case.outcomes[key] = out
        return out  # type: ignore[no-any-return]
    tasks = case_table(case)
    policy = make_policy(name, tasks, {k: str(v) for k, v in params.items()})
    result = simulate(tasks, policy, case.workers, labels=run_labels(case, policy, tasks))
    frame = case.frame
    names, codes = case_tenants(case)
    out = outcome_of(key, params, codes, frame["submit_s"].to_numpy(),
                     frame["duration_s"].to_numpy(), np.frombuffer(result.start_s), case.workers,
                     names=names)
    case.outcomes[key] = out
    return out


TIE_REL = 1e-9
"""Relative tolerance of a criterion: a value within it of the bound meets it (two runs that
differ only in floating-point summation order are not "worse")."""


def _criterion(value: float | None, bound: float, sense: Literal["min", "max"],
               passed: bool | None = None) -> Criterion:
    if passed is None:
        slack = TIE_REL * max(1.0, abs(bound))
        passed = value is not None and (value >= bound - slack if sense == "min"
                                        else value <= bound + slack)
    if value is None or passed:
        distance = 0.0  # within the tie tolerance counts as met
    else:
        distance = bound - value if sense == "min" else value - bound
    return Criterion(value=value, bound=bound, sense=sense, passed=passed, distance=distance)


def tenant_ratios(policy: Outcome, today: Outcome, min_tasks: int) -> dict[str, float]:
    """Per tenant with at least ``min_tasks`` tasks: its mean bounded slowdown under
    ``policy`` over its value under ``today`` (both are >= 1)."""
    return {k: policy.tenant_bsld[k] / today.tenant_bsld[k]
            for k, n in today.tenant_tasks.items() if n >= min_tasks}


def log_criteria(policy: Outcome, today: Outcome, oracle: Outcome, th: Thresholds,
                 frontier_gain: float | None = None,
                 ) -> tuple[dict[str, Criterion], str | None, dict[str, float]]:
    """The criteria of a log (module docstring), the worst tenant and every ratio.
    ``frontier_gain`` is the log's (``desched.bench.frontier``); without it the share is
    undefined."""
    denominator = today.mean_response_s - oracle.mean_response_s
    no_slower = policy.mean_response_s <= today.mean_response_s
    if denominator > 1e-9 * max(today.mean_response_s, 1.0):
        value = (today.mean_response_s - policy.mean_response_s) / denominator
        floor_applies = frontier_gain is None or frontier_gain >= th.gain_floor
        gain = _criterion(value, th.gain_floor, "min",
                          passed=None if floor_applies else no_slower)
    else:
        value = None
        gain = _criterion(None, th.gain_floor, "min", passed=no_slower)
    share_value = frontier_share(value, frontier_gain)
    share = (_criterion(share_value, th.frontier_share_min, "min") if share_value is not None
             else _criterion(None, th.frontier_share_min, "min", passed=no_slower))
    ratios = tenant_ratios(policy, today, th.min_tenant_tasks)
    worst_name = max(ratios, key=lambda k: (ratios[k], k)) if ratios else None
    worst = ratios[worst_name] if worst_name is not None else 1.0
    criteria = {
        "gain": gain,
        "frontier_share": share,
        "p99": _criterion(policy.p99_response_s / today.p99_response_s, th.p99_ratio_max, "max"),
        "delta_jain": _criterion(policy.jain_bsld - today.jain_bsld, th.delta_jain_min, "min"),
        "worst_tenant": _criterion(worst, th.worst_tenant_max, "max"),
    }
    return criteria, worst_name, ratios


def scenario_criteria(policy: Outcome, today: Outcome) -> dict[str, Criterion]:
    """No harm on a scenario: mean response, Jain (slowdown) and max service lag no worse
    than today's; values are the policy's, bounds today's."""
    return {
        "mean_response": _criterion(policy.mean_response_s, today.mean_response_s, "max"),
        "jain_slowdown": _criterion(policy.jain_slowdown, today.jain_slowdown, "min"),
        "max_service_lag": _criterion(policy.max_service_lag_s, today.max_service_lag_s, "max"),
    }
