"""The rejected candidate of scripts/boost_calibrated.py keeps the registry's contract though it
is not registered: its fast class and naive twin decide alike, and its state round-trips."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from desched.simulator import simulate
from desched.trace import TaskTable
from scripts.boost_calibrated import BoostCalibrated, BoostCalibratedNaive
from tests.builders import assert_state_round_trips, examples, workloads


def _decisions(tasks: TaskTable, naive: bool, workers: int) -> list[tuple[float, ...]]:
    policy = (BoostCalibratedNaive if naive else BoostCalibrated)(tasks)
    d = simulate(tasks, policy, workers, engine="python").decisions
    return list(zip(d.t, d.worker, d.task, d.score, *d.parts))


@settings(max_examples=examples(150), deadline=None)
@given(tasks=workloads(), workers=st.integers(1, 4))
def test_the_fast_class_gives_the_same_decisions_as_its_naive_twin(
    tasks: TaskTable, workers: int
) -> None:
    assert _decisions(tasks, False, workers) == _decisions(tasks, True, workers)


@settings(max_examples=examples(60), deadline=None)
@given(tasks=workloads(max_tasks=30), cut=st.integers(1, 29))
def test_both_save_the_same_state_and_a_restored_copy_saves_it_again(
    tasks: TaskTable, cut: int
) -> None:
    assert_state_round_trips(BoostCalibrated, BoostCalibratedNaive, tasks, cut, complete_every=1)
