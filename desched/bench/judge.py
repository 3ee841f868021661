"""The deployment judge: does a policy keep the clairvoyant's gain, harm no tail and no tenant?

Usage (a stable API; ``desched judge`` is a thin wrapper)::

    from desched.bench import judge as jd

    cases = jd.prepare_cases()            # the six bundled logs + steady, flood; cached under
                                          # data/judge-cache (judge_cases: split, train, predict)
    result = jd.run_judge(cases, ["sjf-predicted", "hrrn-predicted?k=v"], tune=None,
                          progress=print)
    result.verdicts          # one Verdict per (workload, policy): criteria, metrics, tenants
    result.recommendation    # by desched.bench.rule (promises, then frontier share; a floor)
    result.frontiers         # per log: the clairvoyant frontier (desched.bench.frontier)
    jd.write_judge(result, Path("out"))   # judge.json (JudgeResult) + judge.md (tables)

    # building blocks, for a tuner or a search:
    outcome = jd.evaluate(case, "name?k=v")         # one simulation (cached in the case)
    verdict = jd.verdict_of(case, "name?k=v")        # its criteria against today and the bound
    # leave-one-log-out: tune(policy_name, training_cases) -> params; the judge calls it once
    # per held-out log with the other logs only, and once with every log for the scenarios.

Criteria on a real log (test part, utilisation 0.9; ``judge_cases`` for the protocol), against
``TODAY`` (``ifs-memoryless``) and the clairvoyant ``ORACLE`` (``sjf-oracle``), both with
default parameters, and the log's clairvoyant frontier (``desched.bench.frontier``), issue 19:

- ``gain`` (the oracle share) ``= (mean_resp_today - mean_resp_policy) / (mean_resp_today -
  mean_resp_oracle)`` must be ``>= gain_floor`` (0.1) where the frontier reaches the floor
  (undefined, and then passed iff the policy is no slower than today, when the oracle does
  not beat today);
- ``frontier_share = gain / frontier gain >= 0.8`` (undefined where the frontier is 0: then
  passed iff the policy is no slower than today);
- the three promises: ``p99 = p99_resp_policy / p99_resp_today <= 1.05``;
  ``delta_jain = J(policy) - J(today) >= -0.02``, with ``J`` Jain's index over the per-tenant
  mean bounded slowdown ``max(1, response / max(duration, 10 s))`` (every tenant of the test
  part); ``worst_tenant = max over tenants with >= 10 tasks of bsld_k(policy) / bsld_k(today)
  <= 2``.

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
from pydantic import Field

from desched.bench.frontier import Frontier, frontier_of, frontier_share
from desched.bench.holdout import is_held_back
from desched.bench.judge_cases import (
    Case,
    Progress,
    default_logs,
    prepare_cases,
    prepare_log,
    prepare_scenario,
)
from desched.bench.roles import clairvoyant
from desched.bench.rule import PROMISES, Standing
from desched.bench.rule import recommend as rule_recommend
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
LOG_CRITERIA: tuple[str, ...] = ("gain", "frontier_share", *PROMISES)
SCENARIO_CRITERIA: tuple[str, ...] = ("mean_response", "jain_slowdown", "max_service_lag")

Tune = Callable[[str, Sequence[Case]], Mapping[str, Any]]
"""``tune(policy_name, training_cases) -> params``: the leave-one-log-out hook."""


def fixed_defaults(policy: str, training_cases: Sequence[Case]) -> dict[str, Any]:
    """The default tuner: no tuning, the policy's defaults (and its spec's parameters)."""
    return {}


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
        from desched.bench.rule import promise_checks

        return all(promise_checks(self))


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
    tied: list[str] = Field(default_factory=list)
    """Every candidate tied with the recommendation under the rule, itself included."""
    frontiers: list[Frontier] = Field(default_factory=list)
    deployable_frontiers: list[Frontier] = Field(default_factory=list)
    """Per log, the same family on the log's predictions (``frontier_of(clairvoyant=False)``):
    a diagnostic of what prediction error costs, never used to choose anything."""
    standings: list[Standing] = Field(default_factory=list)
    """Every candidate's figures under the rule (``desched.bench.rule``), best first."""

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


def case_frontier(case: Case, th: Thresholds) -> Frontier:
    """The frontier of log ``case`` (``frontier.frontier_of`` over the family), kept in the
    case."""
    key = f"frontier:{th.model_dump_json()}"
    if key not in case.outcomes:
        case.outcomes[key] = frontier_of(case, th)
    return case.outcomes[key]  # type: ignore[no-any-return]


def frontier_gain_of(case: Case, th: Thresholds) -> float | None:
    """The frontier gain of log ``case``; None on a scenario."""
    return case_frontier(case, th).gain if case.kind == "log" else None


def verdict_of(case: Case, spec: str, extra: Mapping[str, Any] | None = None,
               thresholds: Thresholds | None = None, *, frontier: bool = True) -> Verdict:
    """Policy ``spec`` on ``case`` against today (and, on a log, the oracle and the frontier:
    ``frontier=False`` leaves the share undefined and saves the family's simulations)."""
    th = thresholds or Thresholds()
    outcome = evaluate(case, spec, extra)
    today = evaluate(case, TODAY)
    oracle_mean: float | None = None
    frontier_gain: float | None = None
    if case.kind == "log":
        oracle = evaluate(case, ORACLE)
        oracle_mean = oracle.mean_response_s
        frontier_gain = frontier_gain_of(case, th) if frontier else None
        criteria, worst_name, ratios = log_criteria(outcome, today, oracle, th, frontier_gain)
    else:
        criteria = scenario_criteria(outcome, today)
        ratios = tenant_ratios(outcome, today, th.min_tenant_tasks)
        worst_name = max(ratios, key=lambda k: (ratios[k], k)) if ratios else None
    return Verdict(workload=case.name, kind=case.kind, policy=spec, params=outcome.params,
                   criteria=criteria, passed=sum(c.passed for c in criteria.values()),
                   outcome=outcome, today=today, oracle_mean_response_s=oracle_mean,
                   worst_tenant_name=worst_name, tenant_ratio=ratios,
                   frontier_gain=frontier_gain)


def recommend(verdicts: Sequence[Verdict], candidates: Sequence[str],
              thresholds: Thresholds | None = None) -> tuple[str | None, str]:
    """The rule of ``desched.bench.rule`` (promises first, then the smallest frontier share,
    a gain floor, ties reported): the recommendation (``None`` without one) and the reason."""
    name, _, reason, _ = rule_recommend(verdicts, candidates, thresholds or Thresholds())
    return name, reason


def tuning_pool(cases: Sequence[Case]) -> list[Case]:
    """The log cases a tuner may see: never a held-back log (``desched.bench.holdout``)."""
    return [c for c in cases if c.kind == "log" and not is_held_back(c.name)]


def run_judge(
    cases: Sequence[Case],
    policies: Sequence[str] | None = None,
    *,
    tune: Tune | None = None,
    thresholds: Thresholds | None = None,
    progress: Progress | None = None,
    training_logs: Sequence[Case] | None = None,
) -> JudgeResult:
    """Judge every policy spec on every case; today's and the oracle's rows are included, and
    each log's frontier (``desched.bench.frontier``).

    With ``tune``, a policy's parameters on a log come from ``tune(name, training)`` with
    ``training`` the other logs of ``training_logs`` (default: the run's logs) and on a
    scenario with all of them; held-back logs are never in ``training``
    (``tuning_pool``). Without ``tune``, the spec's parameters and the defaults
    (``fixed_defaults``)."""
    if not cases:
        raise DeschedError("no workload to judge")
    th = thresholds or Thresholds()
    tune = tune or fixed_defaults
    candidates = list(dict.fromkeys(policies if policies is not None else default_policies()))
    order = list(dict.fromkeys([TODAY, ORACLE, *candidates]))
    for spec in order:
        resolve(cases[0], spec)  # refuse a bad spec before any simulation
    pool = tuning_pool(cases if training_logs is None else training_logs)
    verdicts: list[Verdict] = []
    frontiers: list[Frontier] = []
    deployable: list[Frontier] = []
    for case in cases:
        training = [c for c in pool if c is not case and c.name != case.name]
        if case.kind == "log":
            if progress:
                progress(f"{case.name}: the clairvoyant frontier")
            frontiers.append(case_frontier(case, th))
            deployable.append(frontier_of(case, th, clairvoyant=False))
        for spec in order:
            if case.kind == "scenario" and spec == ORACLE:
                continue
            if progress:
                progress(f"{case.name}: {spec}")
            name = spec.partition("?")[0]
            extra = dict(tune(name, training)) if spec not in (TODAY, ORACLE) else {}
            verdicts.append(verdict_of(case, spec, extra, th))
    recommendation, group, reason, standings = rule_recommend(verdicts, candidates, th)
    return JudgeResult(
        today=TODAY, oracle=ORACLE, thresholds=th,
        settings={"tune": getattr(tune, "__name__", repr(tune)),
                  "tuning_logs": [c.name for c in pool]},
        cases=[c.info() for c in cases], policies=order, verdicts=verdicts,
        recommendation=recommendation, recommendation_reason=reason, tied=group,
        frontiers=frontiers, deployable_frontiers=deployable, standings=standings)


def _fmt(value: float | None, digits: int = 2) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:.{digits}f}"


def _cell(c: Criterion, digits: int = 2, suffix: str = "") -> str:
    mark = "" if c.passed else " ✗"
    return f"{_fmt(c.value, digits)}{suffix}{mark}"


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}×"


def markdown(result: JudgeResult) -> str:
    """``judge.md``: the frontier per log, the criteria per log and policy, the no-harm
    table, the ranges, the rule's standings, the recommendation. ✗ marks a failed
    criterion."""
    th = result.thresholds
    lines = [
        f"# Which policy to deploy: the judge against `{result.today}`",
        "",
        (f"The three promises per real log: p99 response ≤ {th.p99_ratio_max}× today's, "
         f"Δ Jain ≥ {th.delta_jain_min}, every tenant with ≥ {th.min_tenant_tasks} tasks ≤ "
         f"{th.worst_tenant_max}× its mean bounded slowdown under today's. Oracle share: the "
         f"gain over `{result.oracle}`'s (floor {th.gain_floor}); frontier share: the gain "
         "over the frontier's, the largest gain of a clairvoyant policy of the family "
         "keeping the three promises (target ≥ "
         f"{th.frontier_share_min}). ✗ marks a failed criterion."),
        "",
    ]
    if result.frontiers:
        lines += [("The clairvoyant frontier per log (`desched.bench.frontier`); the last two "
                   "columns run the same family on the log's predictions, at its best point "
                   "for that very log (a diagnostic of prediction error, not a candidate):"),
                  ""]
        rows = []
        deployable = {f.workload: f for f in result.deployable_frontiers}
        for f in result.frontiers:
            best = next((p for p in f.points if p.spec == f.best), None)
            d = deployable.get(f.workload)
            cut = (f.today_mean_response_s - f.oracle_mean_response_s) / f.today_mean_response_s
            rows.append([f.workload, _fmt(f.today_mean_response_s, 0),
                         f"{_fmt(100 * cut, 1)} %", _fmt(f.gain, 2), f.best or "none",
                         _x(best.p99_ratio) if best else "-",
                         _fmt(best.delta_jain, 3) if best else "-",
                         _x(best.worst_tenant) if best else "-",
                         f"{sum(p.kept for p in f.points)}/{len(f.points)}",
                         _fmt(d.gain) if d else "-", (d.best or "none") if d else "-"])
        lines += table_lines(["log", "today's mean response s", "oracle's cut of it",
                              "frontier gain", "frontier point", "its p99", "its Δ Jain",
                              "its worst tenant", "points keeping the promises",
                              "on predictions: best gain", "at"], rows)
        lines.append("")
    lines += table_lines(
        ["log", "policy", "oracle share", "frontier share", "p99 vs today", "Δ Jain",
         "worst tenant", "promises", "passed"],
        [[v.workload, v.policy, _cell(v.criteria["gain"]), _cell(v.criteria["frontier_share"]),
          _cell(v.criteria["p99"], 2, "×"), _cell(v.criteria["delta_jain"], 3),
          _cell(v.criteria["worst_tenant"], 2, "×")
          + ("" if v.worst_tenant_name is None else f" ({v.worst_tenant_name})"),
          f"{sum(v.criteria[k].passed for k in PROMISES)}/{len(PROMISES)}",
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

        ranges.append([spec, span("gain", 2), span("frontier_share", 2), span("p99", 2),
                       span("delta_jain", 3), span("worst_tenant", 2),
                       f"{sum(v.promises_kept for v in mine)}/{len(mine)}",
                       f"{sum(v.all_passed for v in mine)}/{len(mine)}"])
    lines += table_lines(["policy", "oracle share", "frontier share", "p99 vs today",
                          "Δ Jain", "worst tenant", "logs keeping the promises",
                          "logs meeting all"], ranges)
    if result.standings:
        lines += ["", ("The rule (`desched.bench.rule`): gain floor, then workloads with "
                       "every promise kept, promises kept, smallest frontier share; ties "
                       f"within {th.share_tie}:"), ""]
        lines += table_lines(
            ["policy", "workloads keeping every promise", "promises kept",
             "smallest frontier share", "mean frontier share", "below the gain floor on"],
            [[s.spec, f"{s.all_kept}/{s.workloads}", f"{s.promises_kept}/{s.promises}",
              _fmt(s.min_share), _fmt(s.mean_share), ", ".join(s.below_floor) or "-"]
             for s in result.standings])
    lines += ["", (f"Recommendation: **{result.recommendation or 'none'}**: "
              f"{result.recommendation_reason}."), ""]
    rec = [v for v in result.verdicts if v.policy == result.recommendation and v.kind == "log"]
    if rec and not all(v.all_passed for v in rec):
        lines += [(f"Distance of {result.recommendation} to each criterion (0: met; shares "
                  "and Δ Jain short of their bound, p99 and worst-tenant ratios over it):"), ""]
        lines += table_lines(
            ["log", "oracle share", "frontier share", "p99", "Δ Jain", "worst tenant"],
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
