"""The recommendation rule (desched.bench.rule) on hand-made result tables."""

from __future__ import annotations

from desched.bench import judge as jd
from desched.bench.rule import recommend, standing

TH = jd.Thresholds()


def crit(value: float | None, passed: bool) -> jd.Criterion:
    return jd.Criterion(value=value, bound=0.0, sense="min", passed=passed,
                        distance=0.0 if passed else 1.0)


def log_row(policy: str, log: str, *, share: float | None, gain: float = 0.5,
            promises: tuple[bool, bool, bool] = (True, True, True),
            frontier: float | None = 0.6) -> jd.Verdict:
    """One verdict of ``policy`` on ``log``: its oracle share ``gain``, frontier ``share``
    and whether each promise (p99, Jain, worst tenant) holds."""
    out = jd.Outcome(policy=policy, params={}, mean_response_s=1.0, p99_response_s=1.0,
                     jain_bsld=1.0, jain_slowdown=1.0, max_service_lag_s=0.0,
                     tenant_bsld={}, tenant_tasks={})
    criteria = {"gain": crit(gain, gain >= TH.gain_floor),
                "frontier_share": crit(share, share is not None and share >= 0.8),
                "p99": crit(1.0, promises[0]), "delta_jain": crit(0.0, promises[1]),
                "worst_tenant": crit(1.0, promises[2])}
    return jd.Verdict(workload=log, kind="log", policy=policy, params={}, criteria=criteria,
                      passed=sum(c.passed for c in criteria.values()), outcome=out, today=out,
                      oracle_mean_response_s=0.5, worst_tenant_name=None, tenant_ratio={},
                      frontier_gain=frontier)


def scenario_row(policy: str, name: str, harmless: bool) -> jd.Verdict:
    out = jd.Outcome(policy=policy, params={}, mean_response_s=1.0, p99_response_s=1.0,
                     jain_bsld=1.0, jain_slowdown=1.0, max_service_lag_s=0.0,
                     tenant_bsld={}, tenant_tasks={})
    criteria = {"mean_response": crit(1.0, True), "jain_slowdown": crit(1.0, harmless),
                "max_service_lag": crit(0.0, True)}
    return jd.Verdict(workload=name, kind="scenario", policy=policy, params={},
                      criteria=criteria, passed=sum(c.passed for c in criteria.values()),
                      outcome=out, today=out, oracle_mean_response_s=None,
                      worst_tenant_name=None, tenant_ratio={})


CANDIDATES = ["sjf-predicted", "hrrn-predicted", "guarded-sjf"]


def test_promises_come_before_the_frontier_share() -> None:
    table = [
        log_row("sjf-predicted", "a", share=1.2, promises=(False, True, True)),
        log_row("sjf-predicted", "b", share=1.1),
        log_row("guarded-sjf", "a", share=0.5),
        log_row("guarded-sjf", "b", share=0.45),
    ]
    name, group, reason, rows = recommend(table, CANDIDATES, TH)
    assert name == "guarded-sjf" and group == ["guarded-sjf"]
    assert "2 of 2 workloads" in reason and "TIE" not in reason
    assert [r.spec for r in rows] == ["guarded-sjf", "sjf-predicted"]


def test_with_the_same_promises_the_smallest_frontier_share_decides() -> None:
    table = [
        log_row("sjf-predicted", "a", share=0.95), log_row("sjf-predicted", "b", share=0.70),
        log_row("guarded-sjf", "a", share=0.85), log_row("guarded-sjf", "b", share=0.82),
    ]
    assert recommend(table, CANDIDATES, TH)[0] == "guarded-sjf"  # 0.82 > 0.70, mean lower


def test_a_no_harm_failure_on_a_scenario_counts_as_a_broken_promise() -> None:
    table = [
        log_row("sjf-predicted", "a", share=0.9), scenario_row("sjf-predicted", "flood", False),
        log_row("guarded-sjf", "a", share=0.6), scenario_row("guarded-sjf", "flood", True),
    ]
    assert recommend(table, CANDIDATES, TH)[0] == "guarded-sjf"


def test_shares_within_the_tie_width_are_reported_as_a_tie() -> None:
    table = [
        log_row("sjf-predicted", "a", share=0.900), log_row("sjf-predicted", "b", share=0.85),
        log_row("hrrn-predicted", "a", share=0.950), log_row("hrrn-predicted", "b", share=0.845),
        log_row("guarded-sjf", "a", share=0.9), log_row("guarded-sjf", "b", share=0.70),
    ]
    name, group, reason, _ = recommend(table, CANDIDATES, TH)
    # smallest shares 0.85 and 0.845 are within 0.01: a tie, named by the higher mean share
    assert set(group) == {"sjf-predicted", "hrrn-predicted"}
    assert name == "hrrn-predicted"
    assert "TIE with sjf-predicted" in reason


def test_a_policy_below_the_gain_floor_is_never_recommended() -> None:
    table = [
        # keeps every promise and the best share on b, but gains 0.05 of the oracle on a
        log_row("guarded-sjf", "a", share=0.1, gain=0.05), log_row("guarded-sjf", "b", share=1.0),
        log_row("sjf-predicted", "a", share=0.5, promises=(False, True, True)),
        log_row("sjf-predicted", "b", share=0.5),
    ]
    name, _, _, rows = recommend(table, CANDIDATES, TH)
    assert name == "sjf-predicted"
    assert rows[-1].spec == "guarded-sjf" and rows[-1].below_floor == ["a"]


def test_the_floor_is_not_applied_where_the_frontier_itself_is_below_it() -> None:
    row = log_row("guarded-sjf", "a", share=1.0, gain=0.05, frontier=0.05)
    assert standing("guarded-sjf", [row], TH).eligible
    assert recommend([row], CANDIDATES, TH)[0] == "guarded-sjf"


def test_no_recommendation_when_every_candidate_is_below_the_floor() -> None:
    table = [log_row("guarded-sjf", "a", share=0.1, gain=0.02),
             log_row("sjf-predicted", "a", share=0.1, gain=0.01)]
    name, group, reason, _ = recommend(table, CANDIDATES, TH)
    assert name is None and group == [] and "less than 0.1" in reason


def test_today_and_clairvoyant_policies_are_never_candidates() -> None:
    table = [log_row("sjf-oracle", "a", share=1.5), log_row("ifs-memoryless", "a", share=0.0),
             log_row("guarded-sjf", "a", share=0.3)]
    assert recommend(table, ["sjf-oracle", "ifs-memoryless", "guarded-sjf"], TH)[0] == \
        "guarded-sjf"


def test_a_policy_that_gains_on_no_log_is_never_recommended() -> None:
    # no clairvoyant policy gains the floor on either log, so the floor does not apply; a
    # candidate that keeps every promise by gaining nothing is still not named
    table = [log_row("guarded-sjf", "a", share=None, gain=0.0, frontier=0.0),
             log_row("guarded-sjf", "b", share=None, gain=-0.01, frontier=0.0),
             log_row("sjf-predicted", "a", share=None, gain=0.0, frontier=0.0),
             log_row("sjf-predicted", "b", share=None, gain=0.02, frontier=0.03,
                     promises=(False, True, True))]
    name, _, _, rows = recommend(table, CANDIDATES, TH)
    assert name == "sjf-predicted"  # it gains on b; the promises cost it nothing here
    assert [r.spec for r in rows if not r.eligible] == ["guarded-sjf"]
    name, group, reason, _ = recommend(table[:3], CANDIDATES, TH)
    assert name is None and group == []
    assert reason == "no candidate beats today's mean response on any judged log: keep " \
        "today's scorer"


def test_where_no_candidate_keeps_every_promise_anywhere_the_reason_says_so() -> None:
    """A recommendation that keeps every promise on no workload says that no candidate does
    and that it keeps the most promises (an outside QA pass: "keeps every promise on 0 of 1
    workloads" read as a contradiction of the recommendation)."""
    table = [log_row("guarded-sjf", "a", share=0.5, promises=(True, False, True)),
             log_row("sjf-predicted", "a", share=0.9, promises=(False, False, True))]
    name, _, reason, _ = recommend(table, CANDIDATES, TH)
    assert name == "guarded-sjf"
    assert reason.startswith("guarded-sjf keeps every promise on none of the 1 workloads, as "
                             "no candidate does, and the most promises (2 of 3 promises)")
    assert "0 of 1" not in reason
