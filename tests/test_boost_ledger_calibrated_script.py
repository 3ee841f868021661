"""The candidates of scripts/boost_ledger_calibrated.py keep the registry's contract though
they are not registered: each fast class and its naive twin decide alike, their state
round-trips, and no decision reads ``duration_s``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from desched.policies.boost_ledger import BoostLedger
from desched.simulator import simulate
from desched.trace import TaskTable
from scripts.boost_ledger_calibrated import VARIANTS, Windows
from tests.builders import T, assert_state_round_trips, examples, make_tasks, workloads
from tests.test_boost_ledger import decisions, flood
from tests.test_duration_withheld import poisoned

__all__ = ["flood"]

pytestmark = pytest.mark.slow


def _decisions(cls: type, tasks: TaskTable, workers: int) -> list[tuple[float, ...]]:
    d = simulate(tasks, cls(tasks), workers, engine="python").decisions
    return list(zip(d.t, d.worker, d.task, d.score, *d.parts))


@pytest.mark.parametrize("cls", VARIANTS, ids=lambda c: c.name)
@settings(max_examples=examples(150), deadline=None)
@given(tasks=workloads(), workers=st.integers(1, 4))
def test_the_fast_class_gives_the_same_decisions_as_its_naive_twin(
    cls: type, tasks: TaskTable, workers: int
) -> None:
    assert _decisions(cls, tasks, workers) == _decisions(cls.naive, tasks, workers)


@pytest.mark.parametrize("cls", VARIANTS, ids=lambda c: c.name)
@settings(max_examples=examples(60), deadline=None)
@given(tasks=workloads(max_tasks=30), cut=st.integers(1, 29))
def test_both_save_the_same_state_and_a_restored_copy_saves_it_again(
    cls: type, tasks: TaskTable, cut: int
) -> None:
    assert_state_round_trips(cls, cls.naive, tasks, cut, complete_every=1)


@pytest.mark.parametrize("cls", VARIANTS, ids=lambda c: c.name)
def test_both_twins_decide_the_same_on_poisoned_durations(cls: type, flood: TaskTable) -> None:
    truth = decisions(cls(flood), flood, 4)
    assert truth and truth != decisions(BoostLedger(flood), flood, 4)  # the calibration acts
    assert decisions(cls(poisoned(flood, 1)), flood, 4) == truth
    assert decisions(cls.naive(poisoned(flood, 2)), flood, 4) == truth


def test_the_factor_follows_the_mean_log_ratio_of_the_last_sixteen_tasks() -> None:
    tasks = make_tasks(*[T("a", float(k), 100.0, predicted_s=10.0) for k in range(20)])
    down, both = Windows(tasks, down_only=True), Windows(tasks, down_only=False)
    for w in (down, both):
        assert w.factor(0) == 1.0
        w.observe(0, 40.0)   # ln 4: ran four times longer than predicted
    assert down.factor(0) == 1.0 and both.factor(0) == pytest.approx(4.0)
    for w in (down, both):
        for _ in range(16):  # sixteen tasks at a quarter of the prediction push ln 4 out
            w.observe(0, 2.5)
    assert down.factor(0) == pytest.approx(0.25) == both.factor(0)
