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
from typing import Any

from pydantic import Field

from desched.bench.frontier import Frontier, frontier_of
from desched.bench.holdout import is_held_back
from desched.bench.judge_cases import (
    Case,
    CaseInfo,
    Progress,
    cap_note,
    default_logs,
    dropped_note,
    load_note,
    prepare_cases,
    prepare_log,
    prepare_scenario,
    shape_note,
)
from desched.bench.rule import Standing
from desched.bench.rule import recommend as rule_recommend
from desched.bench.verdicts import (
    LOG_CRITERIA,
    ORACLE,
    PROMISES,
    SCENARIO_CRITERIA,
    TIE_REL,
    TODAY,
    Criterion,
    Outcome,
    Thresholds,
    Verdict,
    evaluate,
    log_criteria,
    outcome_of,
    resolve,
    scenario_criteria,
    tenant_ratios,
)
from desched.errors import DeschedError
from desched.records import Record, json_text
from desched.tables import table_lines

__all__ = [
    "LOG_CRITERIA", "ORACLE", "SCENARIO_CRITERIA", "TIE_REL", "TODAY", "Case", "CaseInfo",
    "Criterion", "JudgeResult", "Outcome", "Thresholds", "Tune", "Verdict", "default_logs",
    "default_policies", "evaluate", "fixed_defaults", "log_criteria", "outcome_of",
    "prepare_cases", "prepare_log", "prepare_scenario", "recommend", "resolve", "run_judge",
    "scenario_criteria", "tenant_ratios", "verdict_of", "write_judge",
]

Tune = Callable[[str, Sequence[Case]], Mapping[str, float]]
"""``tune(policy_name, training_cases) -> params``: the leave-one-log-out hook. The params are
a policy's parameter values by name (validated by its ``Params``), over its spec's own."""


def fixed_defaults(policy: str, training_cases: Sequence[Case]) -> dict[str, float]:
    """The default tuner: no tuning, the policy's defaults (and its spec's parameters)."""
    return {}


class JudgeResult(Record):
    """What ``desched judge`` writes to ``judge.json``."""

    today: str
    oracle: str
    thresholds: Thresholds
    settings: dict[str, Any]
    cases: list[CaseInfo]
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
    deployable: bool = False,
) -> JudgeResult:
    """Judge every policy spec on every case; today's and the oracle's rows are included, and
    each log's frontier (``desched.bench.frontier``) and, with ``deployable``, the same
    family run on the log's predictions (``deployable_frontiers``: a diagnostic of prediction
    error that no verdict, standing or recommendation reads, asked for because it is most of
    a rerun's simulations; ``desched judge --frontier-on-predictions``).

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
    on_predictions: list[Frontier] = []
    for case in cases:
        training = [c for c in pool if c is not case and c.name != case.name]
        if case.kind == "log":
            if progress:
                progress(f"{case.name}: the clairvoyant frontier")
            frontiers.append(case_frontier(case, th))
            if deployable:
                on_predictions.append(frontier_of(case, th, clairvoyant=False))
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
        frontiers=frontiers, deployable_frontiers=on_predictions, standings=standings)


def _fmt(value: float | None, digits: int = 2) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:.{digits}f}"


def _cell(c: Criterion, digits: int = 2, suffix: str = "") -> str:
    mark = "" if c.passed else " ✗"
    return f"{_fmt(c.value, digits)}{suffix}{mark}"


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}×"


def vacuous_notes(result: JudgeResult) -> list[str]:
    """Per log whose fairness promises hold whatever a policy does, a line that says so: one
    tenant in its test part (a log without user ids is all ``unknown``), or none with the
    tasks the worst-tenant promise counts (its ratio then reads 1.00x)."""
    notes = []
    for case in result.cases:
        if case.kind != "log":
            continue
        if case.tenants == 1:
            notes.append(f"{case.name}: one tenant in the test part (one user, or a log "
                         "without user ids, whose jobs are all 'unknown'): Δ Jain and the "
                         "worst tenant hold whatever a policy does")
            continue
        today = [v for v in result.verdicts if v.workload == case.name
                 and v.policy == result.today]
        if today and not today[0].tenant_ratio:
            notes.append(f"{case.name}: no tenant has {result.thresholds.min_tenant_tasks} "
                         "test tasks or more, so the worst-tenant promise holds whatever a "
                         "policy does (it reads 1.00×)")
    return notes


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
    dropped = [note for c in result.cases if (note := dropped_note(c))]
    if dropped:
        lines += [("Jobs the SWF import dropped, by reason (`desched import-swf` lists "
                   "them): " + "; ".join(dropped) + "."), ""]
    for note in (n for c in result.cases if (n := load_note(c) or cap_note(c))):
        lines += [f"{note}.", ""]
    for note in (n for c in result.cases if (n := shape_note(c))):
        lines += [f"{note}.", ""]
    for note in vacuous_notes(result):
        lines += [f"{note}.", ""]
    if result.frontiers:
        deployable = {f.workload: f for f in result.deployable_frontiers}
        lines += [("The clairvoyant frontier per log (`desched.bench.frontier`)"
                   + ("; the last two columns run the same family on the log's predictions, "
                      "at its best point for that very log (a diagnostic of prediction error, "
                      "not a candidate):" if deployable else
                      " (`--frontier-on-predictions` adds the same family run on each log's "
                      "predictions, a diagnostic of prediction error):")),
                  ""]
        rows = []
        for f in result.frontiers:
            best = next((p for p in f.points if p.spec == f.best), None)
            d = deployable.get(f.workload)
            cut = (f.today_mean_response_s - f.oracle_mean_response_s) / f.today_mean_response_s
            held = " (held back)" if is_held_back(f.workload) else ""
            rows.append([f.workload + held, _fmt(f.today_mean_response_s, 0),
                         f"{_fmt(100 * cut, 1)} %", _fmt(f.gain, 2), f.best or "none",
                         _x(best.p99_ratio) if best else "-",
                         _fmt(best.delta_jain, 3) if best else "-",
                         _x(best.worst_tenant) if best else "-",
                         f"{sum(p.kept for p in f.points)}/{len(f.points)}",
                         *(([_fmt(d.gain), d.best or "none"] if d else ["-", "-"])
                           if deployable else [])])
        lines += table_lines(["log", "today's mean response s", "oracle's cut of it",
                              "frontier gain", "frontier point", "its p99", "its Δ Jain",
                              "its worst tenant", "points keeping the promises",
                              *(["on predictions: best gain", "at"] if deployable else [])],
                             rows)
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
    json_path.write_text(json_text(result.model_dump(mode="json")))
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
