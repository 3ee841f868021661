"""The candidate of scripts/boost_ledger.py (not registered) keeps the registry's contract:
its fast class and naive twin decide alike, it never reads a queued task's ``duration_s``
(the poisoning check of tests/test_duration_withheld.py), its state round-trips, and its
guard does what its docstring says on a hand-worked case."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from desched.policies.base import Policy
from desched.policies.boost_lanes import BoostLanes
from desched.policies.boost_predicted import BoostParams
from desched.simulator import simulate
from desched.trace import TaskTable
from desched.workloads import generate
from scripts.boost_ledger import (
    BoostLedger,
    BoostLedgerNaive,
    BoostLedgerTight,
    BoostLedgerTightNaive,
)
from tests.builders import T, examples, make_tasks, workloads
from tests.test_duration_withheld import poisoned, with_quantiles

PAIRS = [(BoostLedger, BoostLedgerNaive), (BoostLedgerTight, BoostLedgerTightNaive)]


def _decisions(policy: Policy, tasks: TaskTable, workers: int) -> list[tuple[float, ...]]:
    d = simulate(tasks, policy, workers, engine="python").decisions
    return list(zip(d.t, d.worker, d.task, d.score, *d.parts, strict=True))


@pytest.mark.parametrize(("fast", "naive"), PAIRS)
@settings(max_examples=examples(150), deadline=None)
@given(tasks=workloads(), workers=st.integers(1, 4))
def test_the_fast_class_gives_the_same_decisions_as_its_naive_twin(
    fast: type[Policy], naive: type[Policy], tasks: TaskTable, workers: int
) -> None:
    assert _decisions(fast(tasks), tasks, workers) == _decisions(naive(tasks), tasks, workers)


@pytest.fixture(scope="module")
def trace() -> TaskTable:
    frame = generate("flood", tasks=1500, tenants=12, workers=4, seed=5, predicted_noise=0.5)
    return TaskTable.from_frame(with_quantiles(frame, 5))


@pytest.mark.parametrize(("fast", "naive"), PAIRS)
def test_both_decide_the_same_on_poisoned_durations_and_agree_with_each_other(
    fast: type[Policy], naive: type[Policy], trace: TaskTable
) -> None:
    truth = _decisions(fast(trace), trace, 4)
    assert truth
    assert _decisions(fast(poisoned(trace, 1)), trace, 4) == truth
    assert _decisions(naive(poisoned(trace, 2)), trace, 4) == truth


@pytest.mark.parametrize("cls", [BoostLedger, BoostLedgerTight])
@settings(max_examples=examples(60), deadline=None)
@given(tasks=workloads(), workers=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_poisoned_durations_change_no_decision_on_small_random_workloads(
    cls: type[Policy], tasks: TaskTable, workers: int, seed: int
) -> None:
    assert (_decisions(cls(poisoned(tasks, seed)), tasks, workers)
            == _decisions(cls(tasks), tasks, workers))


@pytest.mark.parametrize(("fast", "naive"), PAIRS)
@settings(max_examples=examples(60), deadline=None)
@given(tasks=workloads(max_tasks=30), cut=st.integers(1, 29))
def test_both_save_the_same_state_and_a_restored_copy_saves_it_again(
    fast: type[Policy], naive: type[Policy], tasks: TaskTable, cut: int
) -> None:
    order = sorted(range(len(tasks.task_id)), key=tasks.submit_s.__getitem__)
    policies = [fast(tasks), naive(tasks)]
    for policy in policies:  # the same arrivals, pops and completions for both
        for i in order:
            policy.push(i, tasks.submit_s[i])
        for _ in range(min(cut, len(order))):
            now = tasks.submit_s[order[-1]]
            j = policy.pop(now)
            policy.complete(j, now + 1.0, tasks.duration_s[j])
    state = policies[0].state()
    assert state == policies[1].state()
    assert state is not None
    again = fast(tasks)
    for i in order:
        if i in policies[0].keys:  # type: ignore[attr-defined]
            again.push(i, tasks.submit_s[i])
    again.restore(state)
    assert again.state() == state


def _hand_run(cls: type[Policy], *, now: float, b0_ran: float | None) -> int:
    """c0, c1 (tenant c) go first so that γ is estimated; then a0 (old, predicted 1000 s)
    and b0, b1 (younger, predicted 1 s) are pushed at 3 s, b0 overtakes a0 at 3 s (a's
    ledger: b0's label mean, 1 s; W = 4 workers), b0's completion record (its real run
    ``b0_ran``) comes at ``now`` where given, and the pop at ``now`` is returned."""
    tasks = make_tasks(T("c", 0.0, 1.0, 1.0), T("c", 0.5, 1.0, 1.0), T("a", 2.0, 10.0, 1000.0),
                       T("b", 3.0, 30.0, 1.0), T("b", 3.0, 1.0, 1.0))
    policy = cls(tasks, BoostParams(workers=4))
    policy.push(0, 0.0)
    policy.push(1, 0.5)
    policy.take(0, 0.5)
    policy.take(1, 0.5)
    for i in (2, 3, 4):
        policy.push(i, 3.0)
    policy.take(3, 3.0)
    if b0_ran is not None:
        policy.complete(3, now, b0_ran)
    return policy.pop(now)


A0, B1 = 2, 4


@pytest.mark.parametrize("cls", [BoostLedger, BoostLedgerNaive])
def test_an_overtaken_tenant_is_owed_once_overtaking_reaches_half_its_backlogged_time(
    cls: type[Policy],
) -> None:
    assert _hand_run(BoostLanes, now=3.0, b0_ran=None) == B1  # boost-lanes: b1's boost wins
    assert _hand_run(cls, now=3.0, b0_ran=None) == A0  # 1 s / 4 >= 0.5 x 0 s: a is owed
    assert _hand_run(cls, now=3.4, b0_ran=None) == A0  # 0.25 >= 0.5 x 0.4
    assert _hand_run(cls, now=10.0, b0_ran=None) == B1  # 0.25 < 0.5 x 7: not owed


@pytest.mark.parametrize("cls", [BoostLedger, BoostLedgerNaive])
def test_a_completion_record_corrects_the_charge_of_an_under_estimated_overtaker(
    cls: type[Policy],
) -> None:
    assert _hand_run(cls, now=10.0, b0_ran=30.0) == A0  # 30 s / 4 >= 0.5 x 7 s: owed
    assert _hand_run(cls, now=10.0, b0_ran=1.0) == B1  # ran as predicted: not owed


@pytest.mark.parametrize("cls", [BoostLedgerTight, BoostLedgerTightNaive])
def test_the_tight_variant_is_owed_at_a_twentieth(cls: type[Policy]) -> None:
    assert _hand_run(cls, now=7.0, b0_ran=None) == A0  # 0.25 >= 0.05 x 4
    assert _hand_run(cls, now=9.0, b0_ran=None) == B1  # 0.25 < 0.05 x 6
