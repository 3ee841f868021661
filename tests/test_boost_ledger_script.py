"""The tight variant of scripts/boost_ledger.py (``ALPHA = 1/20``, not registered) keeps the
registry's contract as ``boost-ledger`` does (tests/test_boost_ledger.py): its fast class and
naive twin decide alike, it never reads a queued task's ``duration_s`` (the poisoning check
of tests/test_duration_withheld.py), its state round-trips, and its guard is owed at a
twentieth on the hand-worked case; the script's classes are the registered ones."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from desched.policies import REGISTRY
from desched.policies.base import Policy
from desched.trace import TaskTable
from scripts.boost_ledger import (
    VARIANTS,
    BoostLedger,
    BoostLedgerNaive,
    BoostLedgerTight,
    BoostLedgerTightNaive,
)
from tests.builders import examples, workloads
from tests.test_boost_ledger import A0, B1, decisions, flood, hand_run
from tests.test_duration_withheld import poisoned

__all__ = ["flood"]


def test_the_script_runs_the_registered_boost_ledger_and_registers_no_tight_variant() -> None:
    assert REGISTRY["boost-ledger"] is BoostLedger and BoostLedger.naive is BoostLedgerNaive
    assert VARIANTS == (BoostLedger, BoostLedgerTight) and "boost-ledger-tight" not in REGISTRY
    assert (BoostLedger.ALPHA, BoostLedgerTight.ALPHA) == (0.5, 1.0 / 20.0)
    assert BoostLedgerTight.naive is BoostLedgerTightNaive


@settings(max_examples=examples(150), deadline=None)
@given(tasks=workloads(), workers=st.integers(1, 4))
def test_the_tight_fast_class_gives_the_same_decisions_as_its_naive_twin(
    tasks: TaskTable, workers: int
) -> None:
    assert (decisions(BoostLedgerTight(tasks), tasks, workers)
            == decisions(BoostLedgerTightNaive(tasks), tasks, workers))


def test_both_tight_twins_decide_the_same_on_poisoned_durations(flood: TaskTable) -> None:
    truth = decisions(BoostLedgerTight(flood), flood, 4)
    assert truth
    assert decisions(BoostLedgerTight(poisoned(flood, 1)), flood, 4) == truth
    assert decisions(BoostLedgerTightNaive(poisoned(flood, 2)), flood, 4) == truth


@settings(max_examples=examples(60), deadline=None)
@given(tasks=workloads(), workers=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_poisoned_durations_change_no_tight_decision_on_small_random_workloads(
    tasks: TaskTable, workers: int, seed: int
) -> None:
    assert (decisions(BoostLedgerTight(poisoned(tasks, seed)), tasks, workers)
            == decisions(BoostLedgerTight(tasks), tasks, workers))


@settings(max_examples=examples(60), deadline=None)
@given(tasks=workloads(max_tasks=30), cut=st.integers(1, 29))
def test_both_tight_twins_save_the_same_state_and_a_restored_copy_saves_it_again(
    tasks: TaskTable, cut: int
) -> None:
    order = sorted(range(len(tasks.task_id)), key=tasks.submit_s.__getitem__)
    policies: list[Policy] = [BoostLedgerTight(tasks), BoostLedgerTightNaive(tasks)]
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
    again = BoostLedgerTight(tasks)
    for i in order:
        if i in policies[0].keys:  # type: ignore[attr-defined]
            again.push(i, tasks.submit_s[i])
    again.restore(state)
    assert again.state() == state


@pytest.mark.parametrize("cls", [BoostLedgerTight, BoostLedgerTightNaive])
def test_the_tight_variant_is_owed_at_a_twentieth(cls: type[Policy]) -> None:
    assert hand_run(cls, now=7.0, b0_ran=None) == A0  # 0.25 >= 0.05 x 4
    assert hand_run(cls, now=9.0, b0_ran=None) == B1  # 0.25 < 0.05 x 6
