"""The deployment judge: does a policy keep the clairvoyant's gain, harm no tail and no tenant?

Usage (a stable API; ``desched judge`` is a thin wrapper)::

    from desched.bench import judge as jd

    cases = jd.prepare_cases()            # the six bundled logs + steady, flood; cached under
                                          # data/judge-cache (judge_cases: split, train, predict)
    result = jd.run_judge(cases, ["sjf-predicted", "hrrn-predicted?k=v"], tune=None,
                          progress=print)
    result.verdicts          # one Verdict per (workload, policy): criteria, metrics, tenants
    result.recommendation    # the policy that passes most criteria (never today's, never a bound)
    jd.write_judge(result, Path("out"))   # judge.json (JudgeResult) + judge.md (tables)

    # building blocks, for a tuner or a search:
    outcome = jd.evaluate(case, "name?k=v")         # one simulation (cached in the case)
    verdict = jd.verdict_of(case, "name?k=v")        # its criteria against today and the bound
    # leave-one-log-out: tune(policy_name, training_cases) -> params; the judge calls it once
    # per held-out log with the other logs only, and once with every log for the scenarios.

Criteria on a real log (test part, utilisation 0.9; ``judge_cases`` for the protocol), against
``TODAY`` (``ifs-memoryless``) and the clairvoyant ``ORACLE`` (``sjf-oracle``), both with
default parameters:

- ``gain = (mean_resp_today - mean_resp_policy) / (mean_resp_today - mean_resp_oracle)``
  must be ``>= 0.8`` (undefined, and then passed iff the policy is no slower than today, when
  the oracle does not beat today);
- ``p99 = p99_resp_policy / p99_resp_today <= 1.0``;
- ``delta_jain = J(policy) - J(today) >= 0``, with ``J`` Jain's index over the per-tenant
  mean bounded slowdown ``max(1, response / max(duration, 10 s))`` (every tenant of the test
  part);
- ``worst_tenant = max over tenants with >= 10 tasks of bsld_k(policy) / bsld_k(today) <= 2``.

No harm on a DES scenario: mean response, Jain's index over per-tenant mean slowdown and the
max service lag (``desched.metrics.summarize``: DESIGN.md's two fairness measures) no worse
than today's. A criterion's ``distance`` is how far its value is from its bound (0 when it
passes), in the criterion's own unit.

Parameters: a policy spec's own parameters are kept; a ``duration_scaled`` parameter it does
not set is ``factor * mean task duration of the training part`` on a real log (as the demo
scales them) and its default on a scenario.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from desched.bench.judge_cases import (
    Case,
    Progress,
    default_logs,
    prepare_cases,
    prepare_log,
    prepare_scenario,
)
from desched.bench.roles import clairvoyant
from desched.errors import DeschedError
from desched.policies import REGISTRY, WITHOUT_PREDICTION
from desched.records import Record
from desched.tables import table_lines

__all__ = [
    "Case", "Criterion", "JudgeResult", "Outcome", "Thresholds", "Tune", "Verdict",
    "default_logs", "default_policies", "evaluate", "fixed_defaults", "prepare_cases",
    "prepare_log", "prepare_scenario", "recommend", "resolve", "run_judge", "verdict_of",
    "write_judge",
]

TODAY = WITHOUT_PREDICTION
"""Today's scorer, every criterion's reference (``ifs-memoryless``)."""
ORACLE = next(n for n in REGISTRY if clairvoyant(n))
"""The clairvoyant bound of the gain: the registry's first policy that reads the true
duration (``sjf-oracle``)."""
LOG_CRITERIA: tuple[str, ...] = ("gain", "p99", "delta_jain", "worst_tenant")
SCENARIO_CRITERIA: tuple[str, ...] = ("mean_response", "jain_slowdown", "max_service_lag")

Tune = Callable[[str, Sequence[Case]], Mapping[str, Any]]
"""``tune(policy_name, training_cases) -> params``: the leave-one-log-out hook."""


def fixed_defaults(policy: str, training_cases: Sequence[Case]) -> dict[str, Any]:
    """The default tuner: no tuning, the policy's defaults (and its spec's parameters)."""
    return {}


class Thresholds(Record):
    """The four criteria's bounds and the tenant filter of ``worst_tenant``."""

    gain_min: float = 0.8
    p99_ratio_max: float = 1.0
    delta_jain_min: float = 0.0
    worst_tenant_max: float = 2.0
    min_tenant_tasks: int = 10


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

    @property
    def all_passed(self) -> bool:
        return self.passed == len(self.criteria)


class JudgeResult(Record):
    """What ``desched judge`` writes to ``judge.json``."""

    today: str
    oracle: str
    thresholds: Thresholds
    settings: dict[str, Any]
    cases: list[dict[str, Any]]
    policies: list[str]
    verdicts: list[Verdict]
    recommendation: str | None
    recommendation_reason: str

    def verdict(self, workload: str, policy: str) -> Verdict:
        for v in self.verdicts:
            if v.workload == workload and v.policy == policy:
                return v
        raise DeschedError(f"no verdict for {policy!r} on {workload!r}")


def default_policies() -> list[str]:
    """Every registered policy that ranks on ``predicted_s`` (the candidates to deploy)."""
    from desched.bench.roles import predictive_policies

    return predictive_policies()


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


def _tenant_bsld(tenant: np.ndarray, bsld: np.ndarray) -> tuple[dict[str, float], dict[str, int]]:
    names, codes = np.unique(tenant, return_inverse=True)
    sums = np.bincount(codes, weights=bsld, minlength=names.size)
    counts = np.bincount(codes, minlength=names.size)
    return ({str(n): float(s / c) for n, s, c in zip(names, sums, counts, strict=True)},
            {str(n): int(c) for n, c in zip(names, counts, strict=True)})


def outcome_of(policy: str, params: Mapping[str, Any], tenant: np.ndarray, submit_s: np.ndarray,
               duration_s: np.ndarray, start_s: np.ndarray, workers: int) -> Outcome:
    """The judge's metrics of a finished run (per-task arrays aligned by position)."""
    from desched.metrics import RunArrays, jain, summarize

    run = RunArrays(tenant=tenant, submit_s=submit_s, duration_s=duration_s, start_s=start_s,
                    end_s=start_s + duration_s)
    summary = summarize(run, workers)
    bsld, tasks = _tenant_bsld(tenant, run.bounded_slowdown)
    return Outcome(policy=policy, params=dict(params),
                   mean_response_s=summary["mean_response_s"],
                   p99_response_s=summary["p99_response_s"],
                   jain_bsld=jain(list(bsld.values())),
                   jain_slowdown=summary["jain_slowdown"],
                   max_service_lag_s=summary["max_service_lag_s"],
                   tenant_bsld=bsld, tenant_tasks=tasks)


def evaluate(case: Case, spec: str, extra: Mapping[str, Any] | None = None) -> Outcome:
    """Simulate policy ``spec`` (with a tuner's ``extra`` parameters) on ``case``; cached in
    ``case.outcomes`` by resolved spec."""
    from desched.bench.specs import policy_spec
    from desched.policies import make_policy
    from desched.simulator import simulate
    from desched.trace import TaskTable

    name, params = resolve(case, spec, extra)
    key = policy_spec(name, params)
    cached = case.outcomes.get(key)
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    tasks = TaskTable.from_frame(case.frame)
    policy = make_policy(name, tasks, {k: str(v) for k, v in params.items()})
    result = simulate(tasks, policy, case.workers)
    frame = case.frame
    out = outcome_of(key, params, frame["tenant"].to_numpy(), frame["submit_s"].to_numpy(),
                     frame["duration_s"].to_numpy(), np.frombuffer(result.start_s), case.workers)
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


def log_criteria(policy: Outcome, today: Outcome, oracle: Outcome,
                 th: Thresholds) -> tuple[dict[str, Criterion], str | None, dict[str, float]]:
    """The four criteria of a log (module docstring), the worst tenant and every ratio."""
    denominator = today.mean_response_s - oracle.mean_response_s
    if denominator > 1e-9 * max(today.mean_response_s, 1.0):
        gain = _criterion((today.mean_response_s - policy.mean_response_s) / denominator,
                          th.gain_min, "min")
    else:
        gain = _criterion(None, th.gain_min, "min",
                          passed=policy.mean_response_s <= today.mean_response_s)
    ratios = tenant_ratios(policy, today, th.min_tenant_tasks)
    worst_name = max(ratios, key=lambda k: (ratios[k], k)) if ratios else None
    worst = ratios[worst_name] if worst_name is not None else 1.0
    criteria = {
        "gain": gain,
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


def verdict_of(case: Case, spec: str, extra: Mapping[str, Any] | None = None,
               thresholds: Thresholds | None = None) -> Verdict:
    """Policy ``spec`` on ``case`` against today (and the oracle on a log)."""
    th = thresholds or Thresholds()
    outcome = evaluate(case, spec, extra)
    today = evaluate(case, TODAY)
    oracle_mean: float | None = None
    if case.kind == "log":
        oracle = evaluate(case, ORACLE)
        oracle_mean = oracle.mean_response_s
        criteria, worst_name, ratios = log_criteria(outcome, today, oracle, th)
    else:
        criteria = scenario_criteria(outcome, today)
        ratios = tenant_ratios(outcome, today, th.min_tenant_tasks)
        worst_name = max(ratios, key=lambda k: (ratios[k], k)) if ratios else None
    return Verdict(workload=case.name, kind=case.kind, policy=spec, params=outcome.params,
                   criteria=criteria, passed=sum(c.passed for c in criteria.values()),
                   outcome=outcome, today=today, oracle_mean_response_s=oracle_mean,
                   worst_tenant_name=worst_name, tenant_ratio=ratios)


def recommend(verdicts: Sequence[Verdict], candidates: Sequence[str]) -> tuple[str | None, str]:
    """The candidate that harms no tenant on the most real logs (the worst-tenant criterion:
    "unfair to no one" comes first, an operator cannot trade a starved tenant for a faster
    mean), then the one passing the most criteria over every workload; ties go to the
    smaller sum of log-criterion distances (gain, p99 ratio, Jain, worst-tenant ratio), then
    to the higher mean gain. Returns the name (``None`` without a candidate) and the reason."""
    rows = []
    for spec in candidates:
        name = spec.partition("?")[0]
        if name == TODAY or clairvoyant(name):
            continue
        mine = [v for v in verdicts if v.policy == spec]
        if not mine:
            continue
        passed = sum(v.passed for v in mine)
        protected = sum(v.criteria["worst_tenant"].passed for v in mine
                        if v.kind == "log" and "worst_tenant" in v.criteria)
        total = sum(len(v.criteria) for v in mine)
        distance = sum(c.distance for v in mine if v.kind == "log" for c in v.criteria.values())
        gains = [v.criteria["gain"].value for v in mine
                 if v.kind == "log" and v.criteria["gain"].value is not None]
        mean_gain = float(np.mean(gains)) if gains else -math.inf
        rows.append((-protected, -passed, distance, -mean_gain, spec, passed, total, protected))
    if not rows:
        return None, "no candidate policy was judged"
    rows.sort()
    _, _, distance, neg_gain, spec, passed, total, protected = rows[0]
    logs = sum(1 for v in verdicts if v.policy == spec and v.kind == "log")
    everything = "every criterion on every workload" if passed == total else (
        f"{passed} of {total} criteria over all workloads")
    return spec, (f"{spec} keeps every tenant within the worst-tenant bound on {protected} of "
                  f"{logs} logs (the most of any candidate) and passes {everything}; total "
                  f"distance to the log criteria {distance:.3g}, mean gain {-neg_gain:.3f}")


def run_judge(
    cases: Sequence[Case],
    policies: Sequence[str] | None = None,
    *,
    tune: Tune | None = None,
    thresholds: Thresholds | None = None,
    progress: Progress | None = None,
) -> JudgeResult:
    """Judge every policy spec on every case; today's and the oracle's rows are included.

    With ``tune``, a policy's parameters on a held-out log come from ``tune(name, the other
    log cases)`` and on a scenario from ``tune(name, every log case)``; without it, the
    spec's parameters and the defaults (``fixed_defaults``)."""
    if not cases:
        raise DeschedError("no workload to judge")
    th = thresholds or Thresholds()
    tune = tune or fixed_defaults
    candidates = list(dict.fromkeys(policies if policies is not None else default_policies()))
    order = list(dict.fromkeys([TODAY, ORACLE, *candidates]))
    for spec in order:
        resolve(cases[0], spec)  # refuse a bad spec before any simulation
    logs = [c for c in cases if c.kind == "log"]
    verdicts: list[Verdict] = []
    for case in cases:
        training = [c for c in logs if c is not case]
        for spec in order:
            if case.kind == "scenario" and spec == ORACLE:
                continue
            if progress:
                progress(f"{case.name}: {spec}")
            name = spec.partition("?")[0]
            extra = dict(tune(name, training)) if spec not in (TODAY, ORACLE) else {}
            verdicts.append(verdict_of(case, spec, extra, th))
    recommendation, reason = recommend(verdicts, candidates)
    return JudgeResult(
        today=TODAY, oracle=ORACLE, thresholds=th,
        settings={"tune": getattr(tune, "__name__", repr(tune))},
        cases=[c.info() for c in cases], policies=order, verdicts=verdicts,
        recommendation=recommendation, recommendation_reason=reason)


def _fmt(value: float | None, digits: int = 2) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:.{digits}f}"


def _cell(c: Criterion, digits: int = 2, suffix: str = "") -> str:
    mark = "" if c.passed else " ✗"
    return f"{_fmt(c.value, digits)}{suffix}{mark}"


def markdown(result: JudgeResult) -> str:
    """``judge.md``: the criteria per log and policy, the no-harm table, the ranges, the
    recommendation. ✗ marks a failed criterion."""
    th = result.thresholds
    lines = [
        f"# Which policy to deploy: the judge against `{result.today}`",
        "",
        (f"Criteria per real log: gain ≥ {th.gain_min}, p99 ratio ≤ {th.p99_ratio_max}×, "
        f"Δ Jain ≥ {th.delta_jain_min}, worst tenant (≥ {th.min_tenant_tasks} tasks) ≤ "
        f"{th.worst_tenant_max}×. ✗ marks a failed criterion."),
        "",
    ]
    lines += table_lines(
        ["log", "policy", "gain", "p99 vs today", "Δ Jain", "worst tenant", "passed"],
        [[v.workload, v.policy, _cell(v.criteria["gain"]), _cell(v.criteria["p99"], 2, "×"),
          _cell(v.criteria["delta_jain"], 3),
          _cell(v.criteria["worst_tenant"], 2, "×")
          + ("" if v.worst_tenant_name is None else f" ({v.worst_tenant_name})"),
          f"{v.passed}/{len(v.criteria)}"]
         for v in result.verdicts if v.kind == "log" and v.policy != result.today])
    scen = [v for v in result.verdicts if v.kind == "scenario" and v.policy != result.today]
    if scen:
        lines += ["", "No harm on the DES scenarios (values: the policy's, then today's):", ""]
        lines += table_lines(
            ["scenario", "policy", "mean response s", "Jain (slowdown)", "max service lag s",
             "passed"],
            [[v.workload, v.policy,
              (f"{_cell(v.criteria['mean_response'], 1)} / "
              f"{_fmt(v.criteria['mean_response'].bound, 1)}"),
              (f"{_cell(v.criteria['jain_slowdown'], 3)} / "
              f"{_fmt(v.criteria['jain_slowdown'].bound, 3)}"),
              (f"{_cell(v.criteria['max_service_lag'], 0)} / "
              f"{_fmt(v.criteria['max_service_lag'].bound, 0)}"),
              f"{v.passed}/{len(v.criteria)}"] for v in scen])
    lines += ["", "Range over the logs:", ""]
    ranges: list[list[str]] = []
    for spec in result.policies:
        if spec == result.today:
            continue
        mine = [v for v in result.verdicts if v.policy == spec and v.kind == "log"]
        if not mine:
            continue

        def span(key: str, digits: int, mine: list[Verdict] = mine) -> str:
            vals = [x for v in mine if (x := v.criteria[key].value) is not None]
            if not vals:
                return "n/a"
            return f"{_fmt(min(vals), digits)} to {_fmt(max(vals), digits)}"

        ranges.append([spec, span("gain", 2), span("p99", 2), span("delta_jain", 3),
                       span("worst_tenant", 2), f"{sum(v.all_passed for v in mine)}/{len(mine)}"])
    lines += table_lines(["policy", "gain", "p99 vs today", "Δ Jain", "worst tenant",
                          "logs passing all four"], ranges)
    lines += ["", (f"Recommendation: **{result.recommendation or 'none'}**: "
              f"{result.recommendation_reason}."), ""]
    rec = [v for v in result.verdicts if v.policy == result.recommendation and v.kind == "log"]
    if rec and not all(v.all_passed for v in rec):
        lines += [(f"Distance of {result.recommendation} to each criterion (0: met; gain and "
                  "Δ Jain short of their bound, p99 and worst-tenant ratios over it):"), ""]
        lines += table_lines(
            ["log", "gain", "p99", "Δ Jain", "worst tenant"],
            [[v.workload, *(_fmt(v.criteria[k].distance, 3) for k in LOG_CRITERIA)]
             for v in rec])
        lines.append("")
    return "\n".join(lines)


def write_judge(result: JudgeResult, out: Path) -> tuple[Path, Path]:
    """Write ``judge.json`` and ``judge.md`` into ``out``; returns both paths."""
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / "judge.json", out / "judge.md"
    json_path.write_text(json.dumps(result.model_dump(mode="json"), indent=1, allow_nan=True))
    md_path.write_text(markdown(result))
    return json_path, md_path


def read_judge(path: str | Path) -> JudgeResult:
    """A ``judge.json`` (or the folder holding it) back as a ``JudgeResult``."""
    path = Path(path)
    if path.is_dir():
        path = path / "judge.json"
    try:
        return JudgeResult.model_validate(json.loads(path.read_text()))
    except (OSError, ValueError) as exc:
        raise DeschedError(f"{path}: not a readable judge.json ({type(exc).__name__})") from None
