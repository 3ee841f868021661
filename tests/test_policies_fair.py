"""Hand-worked cases for the fair policies: round-robin, vtc, fair-sjf and ifs-counter."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from desched.policies import make_policy
from desched.policies.base import Policy
from desched.simulator import SimResult, simulate
from desched.trace import TaskTable
from tests.builders import T, decision_sequence, make_tasks, workloads


def run(
    tasks: TaskTable, name: str, workers: int = 1, params: dict[str, str] | None = None
) -> SimResult:
    return simulate(tasks, make_policy(name, tasks, params), workers)


def served(result: SimResult) -> list[int]:
    """Task positions in decision order."""
    return list(result.decisions.task)


def test_round_robin_alternates_between_two_backlogged_tenants():
    tasks = make_tasks(*[T("a", 0, 1)] * 3, *[T("b", 0, 1)] * 3)
    result = run(tasks, "round-robin")
    assert served(result) == [0, 3, 1, 4, 2, 5]
    assert list(result.start_s) == [0, 2, 4, 1, 3, 5]


def test_round_robin_serves_a_tenant_s_oldest_task_first():
    tasks = make_tasks(T("a", 1, 1), T("a", 0.5, 1), T("b", 0, 2))
    # b runs 0-2 and leaves the ring; at 2 a has t1 (0.5) and t0 (1) queued: oldest first
    assert served(run(tasks, "round-robin")) == [2, 1, 0]


def test_round_robin_drops_a_tenant_whose_queue_empties_and_it_rejoins_at_the_back():
    tasks = make_tasks(T("a", 0, 1), T("b", 0, 1), T("b", 0, 1), T("c", 0, 1), T("a", 1.5, 1))
    # ring a,b,c; a empties at 0 and leaves; b served at 1 goes behind c; a rejoins at 1.5
    # behind b; c empties at 2 and leaves: c, b, a
    assert served(run(tasks, "round-robin")) == [0, 1, 3, 2, 4]


def test_vtc_serves_the_least_charged_tenant_and_charges_predictions_at_dispatch():
    tasks = make_tasks(*[T("a", 0, 2, predicted_s=2)] * 3, *[T("b", 0, 1, predicted_s=1)] * 3)
    result = run(tasks, "vtc")
    # counters (a, b): (0,0) tie -> a's older head; (2,0) b; (2,1) b; (2,2) tie -> a; (4,2) b;
    # b is empty, so a
    assert served(result) == [0, 3, 4, 1, 5, 2]
    assert list(result.decisions.score) == [0, 0, 1, 2, 2, 4]


def test_vtc_lifts_a_returning_tenant_so_that_it_does_not_monopolise_the_worker():
    tasks = make_tasks(*[T("a", 0, 1, predicted_s=1)] * 6, *[T("b", 3.5, 1, predicted_s=1)] * 3)
    result = run(tasks, "vtc")
    # a reaches 4 by t=4; b arrives at 3.5 and is lifted from 0 to 4, so the two alternate
    # instead of b taking the next three turns
    assert served(result) == [0, 1, 2, 3, 4, 6, 5, 7, 8]
    assert [result.start_s[i] for i in (6, 7, 8)] == [5, 7, 8]


def test_vtc_lifts_a_tenant_that_arrives_at_an_empty_queue_to_the_last_tenant_that_left():
    tasks = make_tasks(
        T("a", 0, 5, predicted_s=5),
        T("b", 1, 1, predicted_s=1),
        T("a", 2, 1, predicted_s=1),
        T("b", 3, 1, predicted_s=1),
    )
    # a is charged 5 at t=0 and its queue empties; b arrives at 1 to an empty queue and is
    # lifted to a's 5 (Algorithm 2, "the last client left Q"); a returns at 2 at 5 as well.
    # At t=5 the tie goes to b's older head, then a (5 < 6), then b. Without the lift b
    # would stay at 0 and run both its tasks before a's.
    assert served(run(tasks, "vtc")) == [0, 1, 2, 3]


def test_vtc_charges_the_real_duration_on_completion_when_a_task_has_no_prediction():
    tasks = make_tasks(*[T("a", 0, 4)] * 3, *[T("b", 0, 1)] * 3)
    result = run(tasks, "vtc")
    # a's first task is charged 4 when it completes at 4; b then runs its three 1-second
    # tasks (counters 0, 1, 2, each charged on completion) before a runs again
    assert served(result) == [0, 3, 4, 5, 1, 2]
    assert list(result.decisions.score) == [0, 0, 1, 2, 4, 8]


def test_vtc_without_predictions_leaves_a_counter_unchanged_until_the_completion_arrives():
    tasks = make_tasks(*[T("a", 0, 4)] * 2, *[T("b", 0, 1)] * 2)
    # both workers poll at 0 while every counter is 0: a's older tasks win both
    result = run(tasks, "vtc", workers=2)
    assert served(result)[:2] == [0, 1]


def test_fair_sjf_takes_the_shortest_predicted_task_within_a_tenant():
    tasks = make_tasks(
        T("a", 0, 5, predicted_s=5), T("a", 0, 1, predicted_s=1), T("a", 0, 3, predicted_s=3)
    )
    assert served(run(tasks, "fair-sjf")) == [1, 2, 0]


def test_fair_sjf_alternates_tenants_by_counter_and_breaks_ties_on_the_shorter_best_task():
    tasks = make_tasks(
        T("a", 0, 3, predicted_s=3),
        T("a", 0, 1, predicted_s=1),
        T("b", 0, 2, predicted_s=2),
        T("b", 0, 2, predicted_s=2),
    )
    # (0,0) tie: a's best (1) beats b's best (2) -> t1, a=1; b=0 -> t2, b=2; a=1 -> t0, a=4;
    # b -> t3
    result = run(tasks, "fair-sjf")
    assert served(result) == [1, 2, 0, 3]
    assert list(result.decisions.score) == [0, 0, 1, 2]


def test_fair_sjf_keeps_a_tenant_s_short_tasks_from_jumping_another_tenant_s_turn():
    tasks = make_tasks(T("a", 0, 4, predicted_s=4), *[T("b", 0, 1, predicted_s=1)] * 6)
    # (0,0) tie: b's best (1) beats a's (4) -> t1, b=1; a=0 -> t0, a=4; then b up to 4.
    # Plain shortest-first would run all six of b's tasks before a's.
    assert served(run(tasks, "fair-sjf")) == [1, 0, 2, 3, 4, 5, 6]


def test_ifs_counter_with_zero_service_weight_decides_as_ifs_memoryless():
    tasks = make_tasks(
        T("a", 0, 3), T("a", 0, 1), T("b", 1, 2), T("c", 1.5, 1), T("a", 2, 2), T("b", 2, 1)
    )
    counter = run(tasks, "ifs-counter", workers=2, params={"w_service": "0"}).decisions
    memoryless = run(tasks, "ifs-memoryless", workers=2).decisions
    assert list(counter.task) == list(memoryless.task)
    assert list(counter.score) == list(memoryless.score)
    assert list(counter.parts[0]) == list(memoryless.parts[0])
    assert list(counter.parts[1]) == list(memoryless.parts[1])


@settings(max_examples=60, deadline=None)
@given(tasks=workloads(), workers=st.integers(1, 4))
def test_ifs_counter_with_zero_service_weight_decides_as_ifs_memoryless_on_any_workload(
    tasks, workers
):
    counter = run(tasks, "ifs-counter", workers, {"w_service": "0"}).decisions
    memoryless = run(tasks, "ifs-memoryless", workers).decisions
    assert list(counter.task) == list(memoryless.task)
    assert list(counter.score) == list(memoryless.score)


def test_ifs_counter_prefers_a_tenant_that_received_no_service_over_one_that_just_did():
    tasks = make_tasks(T("a", 0, 10), T("a", 2, 1), T("b", 6, 1))
    # at t=10 a has 10 s of service, b none; backlogs 1 and 1; waits 8 and 4; w_service 2:
    # a: 0.1 + 0.9 * 1 - 2.0 * 1 = -1; b: 0.1 + 0.9 * 0.5 - 0 = 0.55
    result = run(tasks, "ifs-counter")
    assert served(result) == [0, 2, 1]
    d = result.decisions
    assert [d.parts[1][j] for j in range(3)] == [0.0, 0.5, 1.0]
    assert d.score[1] == pytest.approx(0.55)
    assert served(run(tasks, "ifs-memoryless")) == [0, 1, 2]


def test_ifs_counter_halves_a_tenant_s_service_after_one_half_life():
    tasks = make_tasks(T("a", 0, 8))
    policy = make_policy("ifs-counter", tasks)
    policy.complete(0, 100.0, 8.0)
    assert policy.decayed_service_s(0, 100.0) == 8.0
    assert policy.decayed_service_s(0, 1000.0) == 4.0
    assert policy.decayed_service_s(0, 1900.0) == 2.0
    policy.complete(0, 1000.0, 4.0)
    assert policy.decayed_service_s(0, 1000.0) == 8.0
    assert policy.decayed_service_s(0, 1900.0) == 4.0


def test_ifs_counter_weighs_old_service_half_after_one_half_life_in_a_decision():
    tasks = make_tasks(T("a", 0, 4), T("b", 12, 2), T("a", 14, 1), T("b", 14, 1))
    # a got 4 s ending at 4, b 2 s ending at 14; with a 10 s half-life both count 2 at t=14:
    # equal norm_service, the tie goes to a's t2 (position). Undecayed, a would count 4 and
    # b's t3 would win.
    result = run(tasks, "ifs-counter", params={"half_life_s": "10"})
    assert served(result) == [0, 1, 2, 3]
    d = result.decisions
    assert [d.parts[2][j] for j in range(3)] == [0.0, 0.0, 1.0]
    undecayed = run(tasks, "ifs-counter", params={"half_life_s": "1e12"})
    assert served(undecayed) == [0, 1, 3, 2]


def _without_some_predictions(tasks: TaskTable, keep: list[bool]) -> TaskTable:
    predicted = [p if keep[j % len(keep)] else math.nan for j, p in enumerate(tasks.predicted_s)]
    return replace(tasks, predicted_s=predicted, tenant_index={})


@pytest.mark.parametrize("name", ["round-robin", "vtc", "ifs-counter"])
@settings(max_examples=100, deadline=None)
@given(
    tasks=workloads(),
    keep=st.lists(st.booleans(), min_size=1, max_size=5),
    workers=st.integers(1, 4),
)
def test_fast_policy_equals_its_naive_twin_when_some_tasks_lack_a_prediction(
    name, tasks, keep, workers
):
    tasks = _without_some_predictions(tasks, keep)
    fast = decision_sequence(tasks, name, workers, naive=False)
    naive = decision_sequence(tasks, name, workers, naive=True)
    assert fast == naive


# Memory-aware dispatch: a task skipped because it does not fit moves no per-tenant state.


def _pushed(name: str, tasks: TaskTable, now: float) -> Policy:
    policy = make_policy(name, tasks)
    for i in range(len(tasks)):
        policy.push(i, now)
    return policy


def test_a_round_robin_tenant_whose_big_task_is_skipped_keeps_its_turn():
    tasks = make_tasks(T("big", 0, 1), T("big", 0, 1), T("a", 1, 1), T("b", 2, 1))
    policy = _pushed("round-robin", tasks, 2.0)
    # Ring: big, a, b. A small worker cannot take big's tasks: a is served and big keeps the
    # front (popping its task and pushing it back would have sent big behind b).
    assert policy.pop_fitting(3.0, lambda j: j not in (0, 1)) == (2, 1)
    assert policy.score == 2.0  # a's wait
    assert policy.state() == {"ring": ["big", "b"]}
    assert [policy.pop(4.0) for _ in range(3)] == [0, 3, 1]


def test_a_vtc_tenant_whose_big_task_is_skipped_is_not_charged():
    tasks = make_tasks(T("big", 0, 8, 8), T("a", 0, 1, 1), T("a", 0, 1, 1))
    policy = _pushed("vtc", tasks, 0.0)
    # Counters tie at 0; big's task is older by position, so it is the first candidate.
    assert policy.pop_fitting(1.0, lambda j: j != 0, limit=4) == (1, 1)
    assert policy.score == 0.0  # a's counter before the charge
    assert policy.state() == {"counter": {"a": 1.0}, "last_left": None}
    # big, never charged (it would be at 8), is served first by a worker it fits.
    assert [policy.pop(2.0) for _ in range(2)] == [0, 2]


def test_vtc_pop_fitting_follows_the_pop_sequence_with_its_charges():
    # Pop sequence: a0 (tie at 0, earlier position), charging a 5 s; then b0 (b at 0 < a at
    # 5); then a1. With a0 refused the winner is b0, not a1: the refused candidate's charge
    # orders the sequence, and is never applied.
    tasks = make_tasks(T("a", 0, 5, 5), T("a", 0, 5, 5), T("b", 1, 1, 1))
    policy = _pushed("vtc", tasks, 1.0)
    assert policy.pop_fitting(2.0, lambda j: j != 0) == (2, 1)
    assert policy.state() == {"counter": {"b": 1.0}, "last_left": "b"}
    assert [policy.pop(3.0) for _ in range(2)] == [0, 1]


def test_a_poll_that_fits_nothing_moves_no_state():
    tasks = make_tasks(T("a", 0, 5, 5), T("b", 0, 5, 5))
    for name in ("round-robin", "vtc", "fair-sjf"):
        policy = _pushed(name, tasks, 0.0)
        before = policy.state()
        assert policy.pop_fitting(1.0, lambda j: False) == (None, 2)
        assert policy.pop_fitting(1.0, lambda j: False, limit=1) == (None, 1)
        assert policy.state() == before and math.isnan(policy.score)
        assert [policy.pop(2.0) for _ in range(2)] == [0, 1]
