"""Hand-worked cases for sjf-oracle, sjf-predicted, hrrn-predicted and ifs-predicted, and the
kinetic tournament tree of hrrn-predicted against a brute-force maximum."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from desched.errors import DeschedError
from desched.policies import make_policy
from desched.simulator import SimResult, simulate
from desched.structures.kinetic import KineticTournament, response_ratio
from tests.builders import T, make_tasks


def run(name: str, *tasks: T, workers: int = 1) -> SimResult:
    table = make_tasks(*tasks)
    return simulate(table, make_policy(name, table), workers)


def start_order(result: SimResult) -> list[int]:
    return list(result.decisions.task)


# A blocker (t0) holds the only worker until t=5; then t1 and t2 wait side by side.
# t1 is predicted short but is truly long; t2 is predicted long but is truly short.
MISPREDICTED = (
    T("x", 0, 5, predicted_s=5.0),
    T("a", 1, 4, predicted_s=1.0),
    T("b", 1, 2, predicted_s=8.0),
)


def test_sjf_oracle_runs_the_truly_shortest_task_first_even_when_predictions_disagree():
    result = run("sjf-oracle", *MISPREDICTED)
    assert start_order(result) == [0, 2, 1]
    assert result.start_s[2] == 5.0
    assert result.start_s[1] == 7.0
    assert list(result.decisions.score) == [5.0, 2.0, 4.0]


def test_sjf_oracle_needs_no_predictions():
    result = run("sjf-oracle", T("a", 0, 3), T("b", 0, 1), T("c", 0, 2))
    assert start_order(result) == [1, 2, 0]
    assert list(result.end_s) == [6.0, 1.0, 3.0]


def test_sjf_predicted_follows_the_predictions_even_when_they_are_wrong():
    result = run("sjf-predicted", *MISPREDICTED)
    assert start_order(result) == [0, 1, 2]
    assert result.start_s[1] == 5.0
    assert result.start_s[2] == 9.0
    assert list(result.decisions.score) == [5.0, 1.0, 8.0]


def test_sjf_breaks_equal_predictions_by_submission_then_position():
    result = run(
        "sjf-predicted",
        T("x", 0, 10, predicted_s=10.0),
        T("a", 2, 1, predicted_s=3.0),
        T("b", 1, 1, predicted_s=3.0),
        T("c", 1, 1, predicted_s=3.0),
    )
    assert start_order(result) == [0, 2, 3, 1]


def hrrn_case(blocker_s: float) -> SimResult:
    """A blocker holds the worker until ``blocker_s``; a long task L (p=10) waits since 0,
    a short task S (p=1) arrives at 9.

    Ratios: L = (t + 10) / 10 = 1 + t/10, S = (t - 9 + 1) / 1 = t - 8. They cross where
    1 + t/10 = t - 8, i.e. t = 10 (both ratios 2). Before 10 the long, old task wins; after
    10 the short one does; at 10 they tie and L wins by its earlier submission.
    """
    return run(
        "hrrn-predicted",
        T("x", 0, blocker_s, predicted_s=1.0),
        T("long", 0, 10, predicted_s=10.0),
        T("short", 9, 1, predicted_s=1.0),
    )


def test_hrrn_lets_a_long_task_that_waited_long_overtake_a_short_fresh_one():
    result = hrrn_case(9.5)
    assert start_order(result) == [0, 1, 2]
    assert result.start_s[1] == 9.5
    assert result.decisions.score[1] == pytest.approx(1.95)
    assert result.start_s[2] == 19.5


def test_hrrn_breaks_the_tie_at_the_crossing_to_the_earlier_submission():
    result = hrrn_case(10.0)
    assert start_order(result) == [0, 1, 2]
    assert result.decisions.score[1] == 2.0


def test_hrrn_runs_the_short_task_first_once_past_the_crossing():
    result = hrrn_case(10.5)
    assert start_order(result) == [0, 2, 1]
    assert result.start_s[2] == 10.5
    assert result.decisions.score[1] == pytest.approx(2.5)
    assert result.start_s[1] == 11.5


def test_hrrn_logs_the_winners_prediction_as_its_score_component():
    result = hrrn_case(9.5)
    assert list(result.decisions.parts[0]) == [1.0, 10.0, 1.0]


def test_ifs_predicted_prefers_the_tenant_with_the_shorter_task_at_equal_backlog():
    # p_max = 4: a scores 0.1 * 1 + 0.9 * (1 - 1/4) = 0.775, b scores 0.1 * 1 + 0 = 0.1
    result = run(
        "ifs-predicted",
        T("b", 0, 1, predicted_s=4.0),
        T("a", 0, 1, predicted_s=1.0),
    )
    assert start_order(result) == [1, 0]
    assert result.decisions.score[0] == pytest.approx(0.775)
    norm_backlog, norm_short = result.decisions.parts
    assert list(norm_backlog) == [1.0, 1.0]
    assert list(norm_short) == [0.75, 0.0]


def ifs_backlog_case(p_a: float) -> SimResult:
    """Tenant a: one task predicted ``p_a``; tenant b: ten tasks predicted 4 (= p_max)."""
    return run(
        "ifs-predicted",
        *[T("b", 0, 1, predicted_s=4.0) for _ in range(10)],
        T("a", 0, 1, predicted_s=p_a),
    )


def test_ifs_predicted_lets_a_large_backlog_beat_a_slightly_shorter_task():
    # a: 0.1 * 1/10 + 0.9 * (1 - 3.8/4) = 0.055; b: 0.1 * 10/10 + 0.9 * 0 = 0.1
    result = ifs_backlog_case(3.8)
    assert result.decisions.task[0] == 0
    assert result.decisions.score[0] == pytest.approx(0.1)


def test_ifs_predicted_lets_a_much_shorter_task_beat_a_large_backlog():
    # a: 0.1 * 1/10 + 0.9 * (1 - 2/4) = 0.46; b: 0.1
    result = ifs_backlog_case(2.0)
    assert result.decisions.task[0] == 10
    assert result.decisions.score[0] == pytest.approx(0.46)


def test_ifs_predicted_takes_a_tenants_shortest_task_first():
    result = run(
        "ifs-predicted",
        T("a", 0, 1, predicted_s=3.0),
        T("a", 0, 1, predicted_s=2.0),
        T("a", 0, 1, predicted_s=2.0),
        T("a", 0, 1, predicted_s=5.0),
    )
    assert start_order(result) == [1, 2, 0, 3]


def test_ifs_predicted_picks_like_its_naive_twin_when_rounding_ties_different_predictions():
    # 1 - p / p_max rounds to 1.0 for both tiny predictions, so t1 and t2 tie at the top and
    # t2 (earlier submission, larger prediction) must win as in the naive scan
    table = make_tasks(
        T("x", 0, 5, predicted_s=1.0),
        T("a", 2, 1, predicted_s=1e-20),
        T("a", 1, 1, predicted_s=2e-20),
        T("a", 1, 1, predicted_s=1.0),
    )
    fast = simulate(table, make_policy("ifs-predicted", table), 1)
    naive = simulate(table, make_policy("ifs-predicted", table, naive=True), 1)
    assert start_order(fast) == start_order(naive) == [0, 2, 1, 3]
    assert list(fast.decisions.score) == list(naive.decisions.score)


def test_ifs_predicted_with_zero_shortness_weight_is_backlog_then_submission_order():
    table = make_tasks(
        T("a", 0, 10, predicted_s=1.0),
        T("a", 2, 1, predicted_s=1.0),
        T("a", 1, 1, predicted_s=3.0),
        T("b", 0.5, 1, predicted_s=2.0),
    )
    params = {"w_short": "0"}
    fast = simulate(table, make_policy("ifs-predicted", table, params), 1)
    naive = simulate(table, make_policy("ifs-predicted", table, params, naive=True), 1)
    assert start_order(fast) == start_order(naive) == [0, 2, 3, 1]


@pytest.mark.parametrize("name", ["sjf-predicted", "hrrn-predicted", "ifs-predicted"])
def test_a_policy_that_reads_predictions_is_refused_on_a_trace_without_them(name):
    table = make_tasks(T("a", 0, 1), T("b", 0, 2))
    with pytest.raises(DeschedError, match=rf"policy '{name}' ranks on 'predicted_s'"):
        make_policy(name, table)


def test_ifs_predicted_refuses_an_unknown_parameter_by_name():
    table = make_tasks(T("a", 0, 1, predicted_s=1.0))
    with pytest.raises(DeschedError, match="w_wait"):
        make_policy("ifs-predicted", table, {"w_wait": "0.5"})


def brute_force_best(live: dict[int, tuple[float, float]], now: float) -> tuple[int, float]:
    item = max(live, key=lambda j: (response_ratio(now, *live[j]), -live[j][0], -j))
    return item, response_ratio(now, *live[item])


def crossing(a: tuple[float, float], b: tuple[float, float]) -> float | None:
    """Exact time where two ratio lines meet, rounded to a float; None if parallel."""
    s1, p1, s2, p2 = (Fraction(x) for x in (*a, *b))
    if p1 == p2:
        return None
    return float((s1 * p2 - s2 * p1) / (p2 - p1))


# Predictions one ulp apart, tiny, huge and awkward fractions make crossings that float
# rounding blurs; submissions at large magnitudes lose the low bits of the wait.
_base_preds = [1.0, 2.0, 3.0, 10.0, 7.0 / 3.0, 0.1, 1e-3, 1e4]
_preds = st.sampled_from(
    _base_preds
    + [math.nextafter(p, math.inf) for p in _base_preds]
    + [math.nextafter(p, 0.0) for p in _base_preds]
) | st.floats(1e-3, 1e4)
_offsets = st.sampled_from([0.0, 5e-324, 1e-12, 0.5, 1.0, 3.0, 100.0, -0.5]) | st.floats(0, 1e3)
_steps = st.sampled_from([0.0, 1e-12, 0.1, 0.5, 1.0, 7.0, 1e3]) | st.floats(0, 50)


@settings(max_examples=400, deadline=None)
@given(data=st.data(), start=st.sampled_from([0.0, 3.0, 1e6 + 0.25, 2.0**40]))
def test_the_kinetic_tournament_agrees_with_a_brute_force_maximum_at_every_query(data, start):
    tree = KineticTournament(capacity=2)
    live: dict[int, tuple[float, float]] = {}
    now = start
    next_item = 0
    for _ in range(data.draw(st.integers(1, 80), label="operations")):
        op = data.draw(
            st.sampled_from(["insert", "insert", "insert", "delete", "wait", "creep", "cross"])
        )
        if op == "insert":
            entry = (now - data.draw(_offsets), data.draw(_preds))
            tree.insert(next_item, *entry)
            live[next_item] = entry
            next_item += 1
        elif op == "delete" and live:
            item = data.draw(st.sampled_from(sorted(live)))
            tree.delete(item)
            del live[item]
        elif op == "wait":
            now += data.draw(_steps)
        elif op == "creep":
            for _ in range(data.draw(st.integers(1, 4))):
                now = math.nextafter(now, math.inf)
        elif op == "cross" and len(live) >= 2:
            a, b = data.draw(st.lists(st.sampled_from(sorted(live)), min_size=2, max_size=2))
            t = crossing(live[a], live[b])
            if t is not None:
                ulps = data.draw(st.integers(-4, 4))
                for _ in range(abs(ulps)):
                    t = math.nextafter(t, math.copysign(math.inf, ulps))
                now = max(now, t)
        assert len(tree) == len(live)
        if live:
            assert tree.best(now) == brute_force_best(live, now)


def test_the_kinetic_tournament_follows_a_chain_of_crossings_in_simulated_time():
    tree = KineticTournament()
    for item, (s, p) in enumerate([(0.0, 4.0), (0.0, 2.0), (0.0, 1.0), (10.0, 0.5)]):
        tree.insert(item, s, p)
    # at t=10 the ratios are 3.5, 6, 11 and 1; item 2 runs as t + 1 and item 3 as 2t - 19,
    # so they meet at t = 20 (both 21, item 2 keeps it by its earlier submission)
    assert tree.best(10.0) == (2, 11.0)
    assert tree.best(20.0) == (2, 21.0)
    assert tree.best(math.nextafter(20.0, math.inf))[0] == 3
    tree.delete(3)
    assert tree.best(30.0) == (2, 31.0)


def test_ifs_predicted_keeps_its_heap_of_predictions_bounded_when_a_task_is_skipped_on_every_poll():
    # Memory-aware dispatch pushes refused candidates back. a's short task (the first
    # candidate of every poll) never fits; its stale entries never reach the top of the
    # max-heap (b's 10 s tasks stay queued), so only a rebuild drops them.
    table = make_tasks(T("a", 0, 1, predicted_s=1.0), *[T("b", 0, 1, predicted_s=10.0)] * 600)
    policy = make_policy("ifs-predicted", table)
    for i in range(6):
        policy.push(i, 0.0)
    for i in range(6, len(table)):
        assert policy.pop_fitting(1.0, lambda j: j != 0) == (i - 5, 1)
        policy.push(i, 1.0)
    assert len(policy.neg_pred) <= 2 * len(policy) + 64  # type: ignore[attr-defined]
    assert [policy.pop(2.0) for _ in range(len(policy))] == [0, *range(596, 601)]
