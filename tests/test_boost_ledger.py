"""``boost-ledger`` beyond the registry's contract suite: its fast class and naive twin decide
alike with the worker count told or estimated, on poisoned durations too, and save the same
state; the guard does what the rule says on hand-worked cases (owed at half the backlogged
time, the completion record's correction); a lease that expires keeps its charge and gets no
correction, in both twins; the live service keeps the ledger across a restart."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from desched.policies.base import Policy
from desched.policies.boost_lanes import BoostLanes
from desched.policies.boost_ledger import BoostLedger, BoostLedgerNaive
from desched.policies.boost_predicted import BoostParams
from desched.service.records import NewTask
from desched.service.writer import wait
from desched.simulator import simulate
from desched.trace import TaskTable
from desched.workloads import generate
from tests.builders import T, assert_state_round_trips, examples, make_tasks, workloads
from tests.test_duration_withheld import poisoned, with_quantiles
from tests.test_service_scheduler import (
    FakeTime,
    FixedPredictor,
    assert_a_restart_resumes,
    make_scheduler,
    poll,
)


def decisions(policy: Policy, tasks: TaskTable, workers: int) -> list[tuple[float, ...]]:
    d = simulate(tasks, policy, workers, engine="python").decisions
    return list(zip(d.t, d.worker, d.task, d.score, *d.parts, strict=True))


@settings(max_examples=examples(150), deadline=None)
@given(tasks=workloads(), workers=st.integers(1, 4), told=st.booleans())
def test_the_fast_class_gives_the_same_decisions_as_its_naive_twin(
    tasks: TaskTable, workers: int, told: bool
) -> None:
    params = BoostParams(workers=workers) if told else None
    assert (decisions(BoostLedger(tasks, params), tasks, workers)
            == decisions(BoostLedgerNaive(tasks, params), tasks, workers))


@pytest.fixture(scope="module")
def flood() -> TaskTable:
    frame = generate("flood", tasks=1500, tenants=12, workers=4, seed=5, predicted_noise=0.5)
    return TaskTable.from_frame(with_quantiles(frame, 5))


def test_both_twins_decide_the_same_on_poisoned_durations_and_the_guard_acts(
    flood: TaskTable,
) -> None:
    truth = decisions(BoostLedger(flood), flood, 4)
    assert truth
    assert decisions(BoostLedger(poisoned(flood, 1)), flood, 4) == truth
    assert decisions(BoostLedgerNaive(poisoned(flood, 2)), flood, 4) == truth
    assert decisions(BoostLanes(flood), flood, 4) != truth  # the ledger changes the order


@settings(max_examples=examples(60), deadline=None)
@given(tasks=workloads(max_tasks=30), cut=st.integers(1, 29))
def test_both_save_the_same_state_and_a_restored_copy_saves_it_again(
    tasks: TaskTable, cut: int
) -> None:
    assert_state_round_trips(BoostLedger, BoostLedgerNaive, tasks, cut)


def staged(cls: type[Policy]) -> Policy:
    """The hand-worked cases' start: c0 and c1 (tenant c) pushed and taken so that γ is
    estimated, then a0 (old, predicted 1000 s), b0 and b1 (younger, predicted 1 s) pushed at
    3 s, on 4 workers."""
    tasks = make_tasks(T("c", 0.0, 1.0, 1.0), T("c", 0.5, 1.0, 1.0), T("a", 2.0, 10.0, 1000.0),
                       T("b", 3.0, 30.0, 1.0), T("b", 3.0, 1.0, 1.0))
    policy = cls(tasks, BoostParams(workers=4))
    policy.push(0, 0.0)
    policy.push(1, 0.5)
    policy.take(0, 0.5)
    policy.take(1, 0.5)
    for i in (2, 3, 4):
        policy.push(i, 3.0)
    return policy


def hand_run(cls: type[Policy], *, now: float, b0_ran: float | None) -> int:
    """c0, c1 (tenant c) go first so that γ is estimated; then a0 (old, predicted 1000 s)
    and b0, b1 (younger, predicted 1 s) are pushed at 3 s, b0 overtakes a0 at 3 s (a's
    ledger: b0's label mean, 1 s; W = 4 workers), b0's completion record (its real run
    ``b0_ran``) comes at ``now`` where given, and the pop at ``now`` is returned."""
    policy = staged(cls)
    policy.take(3, 3.0)
    if b0_ran is not None:
        policy.complete(3, now, b0_ran)
    return policy.pop(now)


A0, B0, B1 = 2, 3, 4


@pytest.mark.parametrize("cls", [BoostLedger, BoostLedgerNaive])
def test_an_overtaken_tenant_is_owed_once_overtaking_reaches_half_its_backlogged_time(
    cls: type[Policy],
) -> None:
    assert hand_run(BoostLanes, now=3.0, b0_ran=None) == B1  # boost-lanes: b1's boost wins
    assert hand_run(cls, now=3.0, b0_ran=None) == A0  # 1 s / 4 >= 0.5 x 0 s: a is owed
    assert hand_run(cls, now=3.4, b0_ran=None) == A0  # 0.25 >= 0.5 x 0.4
    assert hand_run(cls, now=10.0, b0_ran=None) == B1  # 0.25 < 0.5 x 7: not owed


@pytest.mark.parametrize("cls", [BoostLedger, BoostLedgerNaive])
def test_a_completion_record_corrects_the_charge_of_an_under_estimated_overtaker(
    cls: type[Policy],
) -> None:
    assert hand_run(cls, now=10.0, b0_ran=30.0) == A0  # 30 s / 4 >= 0.5 x 7 s: owed
    assert hand_run(cls, now=10.0, b0_ran=1.0) == B1  # ran as predicted: not owed


def test_an_overtaker_whose_lease_expires_keeps_its_charge_and_gets_no_correction() -> None:
    """b0 overtakes a0 (a's ledger 1 s), its lease expires (pushed again at 4 s, no
    completion record) and a late completion record of 30 s comes at 10 s: a's ledger stays
    1 s, so a is not owed at 10 s (0.25 < 0.5 x 7), in both twins, which save one state."""
    states = []
    for cls in (BoostLedger, BoostLedgerNaive):
        policy = staged(cls)
        policy.take(B0, 3.0)
        policy.push(B0, 4.0)  # the lease expired: b0 is queued again, its charge kept
        policy.complete(B0, 10.0, 30.0)  # a stale record: no correction
        state = policy.state()
        assert state is not None
        assert state["ledger"]["tenants"]["a"][0] == 1.0 and state["ledger"]["charged"] == {}
        assert policy.pop(10.0) == B0  # b0 (older position than b1) by its boost
        states.append(policy.state())
    assert states[0] == states[1]


def test_a_lease_that_expires_while_work_arrives_leaves_fast_and_naive_alike() -> None:
    """The quiet path: b0 overtakes a0 and no completion record ever comes; its lease
    expires (the service pushes it again) at 3.2 s, just as a1 and b2 arrive. a is owed then
    (1 s / 4 workers >= 0.5 x 0.2 s), so a0 goes first; fast and naive pop alike through
    every remaining decision and save the same state, and with nothing queued no tenant's
    backlog period (nor ledger) is left."""
    tasks = make_tasks(T("c", 0.0, 1.0, 1.0), T("c", 0.5, 1.0, 1.0), T("a", 2.0, 10.0, 1000.0),
                       T("b", 3.0, 30.0, 1.0), T("b", 3.0, 1.0, 1.0),
                       T("a", 3.2, 5.0, 5.0), T("b", 3.2, 1.0, 1.0))
    picks, states = [], []
    for cls in (BoostLedger, BoostLedgerNaive):
        policy = cls(tasks, BoostParams(workers=4))
        policy.push(0, 0.0)
        policy.push(1, 0.5)
        policy.take(0, 0.5)
        policy.take(1, 0.5)
        for i in (A0, B0, B1):
            policy.push(i, 3.0)
        policy.take(B0, 3.0)  # b0 overtakes a0: a's ledger 1 s
        for i in (B0, 5, 6):  # b0's lease expired, no completion record; a1 and b2 arrive
            policy.push(i, 3.2)
        assert policy.state()["ledger"]["tenants"]["a"][0] == 1.0  # the charge is kept
        picks.append([policy.pop(3.2 + 0.1 * k) for k in range(5)])
        states.append(policy.state())
        assert len(policy) == 0
    assert picks[0] == picks[1] and picks[0][0] == A0 and sorted(picks[0]) == [2, 3, 4, 5, 6]
    assert states[0] == states[1]
    assert states[0]["ledger"]["tenants"] == {}  # every backlog period over


def test_the_service_keeps_the_ledger_across_a_restart(tmp_path: Path) -> None:
    """A restart takes back every backlogged tenant's ledger, backlog start and period and
    the running overtakers' charges with boost-lanes' state, and the next poll is the one
    the uninterrupted policy would make."""
    now = FakeTime()
    db = tmp_path / "state.db"
    first = make_scheduler(db, now, predictor=FixedPredictor(), policy="boost-ledger")
    for phase, done in ((4, True), (12, False)):  # γ is estimated in the first phase,
        now.t += 1.0  # the second is a burst whose small tasks overtake other tenants'
        for k in range(phase):
            now.t += 1.0 if done else 0.0
            _, _, pending = first.submit("abc"[k % 3],
                                         [NewTask("extract", pages=1 + (5 * k + 3) % 7)])
            wait(pending)
        for _ in range(3):
            grant = poll(first, "w")
            if done:
                wait(first.complete("w", grant.task.task_id, grant.lease_id, 1.0))
    policy = first.policy
    assert isinstance(policy, BoostLedger)
    assert (policy.ledger[policy.backlogged] > 0).any() and policy.charged
    assert_a_restart_resumes(first, db, now, "boost-ledger", later_s=5.0)


@settings(max_examples=examples(60), deadline=None)
@given(tasks=workloads(), cut=st.integers(0, 20), workers=st.integers(0, 3))
def test_the_pop_sequence_of_the_light_copy_is_the_sequence_of_pops_of_a_deep_copy(
    tasks: TaskTable, cut: int, workers: int
) -> None:
    """``pop_sequence`` pops a copy whose containers are copied and entries shared: the
    same tasks as the pops of a deep copy, and the policy is left as it was."""
    order = sorted(range(len(tasks.task_id)), key=tasks.submit_s.__getitem__)
    policy = BoostLedger(tasks, BoostParams(workers=workers))
    for k, i in enumerate(order):
        policy.push(i, tasks.submit_s[i])
        if k < cut and k % 3 == 2:
            j = policy.pop(tasks.submit_s[i])
            if k % 2:
                policy.complete(j, tasks.submit_s[i] + 0.5, tasks.duration_s[j])
    now = tasks.submit_s[order[-1]] + 1.0
    state = policy.state()
    walked = list(policy.pop_sequence(now))
    assert walked == list(Policy.pop_sequence(policy, now)) and len(walked) == len(policy)
    assert policy.state() == state


def test_pop_fitting_takes_the_next_pop_where_it_fits_and_walks_a_copy_where_not() -> None:
    tasks = make_tasks(*(T("abc"[k % 3], float(k // 4), 1.0, predicted_s=1.0 + (7 * k) % 5)
                         for k in range(24)))
    policy, twin = BoostLedger(tasks), BoostLedger(tasks)
    for p in (policy, twin):
        for i in range(24):
            p.push(i, tasks.submit_s[i])
    sequence = list(twin.pop_sequence(6.0))
    assert policy.pop_fitting(6.0, lambda i: True) == (sequence[0], 0)
    assert twin.pop(6.0) == sequence[0] and policy.state() == twin.state()
    sequence = sequence[1:]
    refuse = set(sequence[:2])
    assert policy.pop_fitting(6.0, lambda i: i not in refuse, 1) == (None, 1)
    assert policy.state() == twin.state()
    assert policy.pop_fitting(6.0, lambda i: i not in refuse) == (sequence[2], 2)
    twin.take(sequence[2], 6.0)
    assert policy.state() == twin.state()
