"""The rejected candidate of scripts/boost_conditional.py keeps the registry's contract though
it is not registered: its fast class and naive twin decide alike (completions included, which
move its boosts), its state round-trips, and its label buckets are the octaves of the label
median."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from desched.simulator import simulate
from desched.trace import TaskTable
from scripts.boost_conditional import (
    BoostConditional,
    BoostConditionalNaive,
    ConditionalEstimator,
    bucket,
    naive_octave,
)
from tests.builders import T, assert_state_round_trips, examples, make_tasks, workloads


def _decisions(tasks: TaskTable, naive: bool, workers: int, scale: float
               ) -> list[tuple[float, ...]]:
    cls = BoostConditionalNaive if naive else BoostConditional
    policy = cls(tasks, cls.Params(scale=scale, window=8))
    d = simulate(tasks, policy, workers, engine="python").decisions
    return list(zip(d.t, d.worker, d.task, d.score, *d.parts))


@settings(max_examples=examples(150), deadline=None)
@given(tasks=workloads(), workers=st.integers(1, 4), scale=st.sampled_from([1.0, 10.0]))
def test_the_fast_class_gives_the_same_decisions_as_its_naive_twin(
    tasks: TaskTable, workers: int, scale: float
) -> None:
    assert _decisions(tasks, False, workers, scale) == _decisions(tasks, True, workers, scale)


@settings(max_examples=examples(60), deadline=None)
@given(tasks=workloads(max_tasks=30), cut=st.integers(1, 29))
def test_both_save_the_same_state_and_a_restored_copy_saves_it_again(
    tasks: TaskTable, cut: int
) -> None:
    assert_state_round_trips(BoostConditional, BoostConditionalNaive, tasks, cut,
                             complete_every=1)


@given(m=st.floats(0.0, 1e9), theta=st.sampled_from([0.0, 1.0, 7.5]))
def test_the_bucket_is_the_octave_of_the_label_median(m: float, theta: float) -> None:
    assert bucket(m, theta) == naive_octave(m, theta)
    median = m + theta * math.log(2.0)
    if median >= 1.0:
        assert 2.0 ** bucket(m, theta) <= median < 2.0 ** (bucket(m, theta) + 1)


def test_a_label_whose_bucket_hid_a_long_task_loses_its_boost() -> None:
    # six tasks labelled 10 s by the model, one every 11 s on one worker (load near 1, so a
    # small γ); the third to complete ran 5,000 s
    tasks = make_tasks(*(T("a", 11.0 * i, 10.0, predicted_s=10.0) for i in range(6)))
    est = ConditionalEstimator(tasks, BoostConditional.Params(window=4, workers=1))
    for i in range(4):
        est.dispatched(i)
    est.observe(0, 10.0)
    est.observe(1, 12.0)  # the 2nd completion: γ from the true sizes
    assert est.gamma is not None
    before = est.boost(*est.label(4))
    est.observe(2, 5000.0)  # the same bucket now holds a long task
    assert before > 1000.0  # seconds: the label is trusted
    assert est.boost(*est.label(4)) < before * 1e-6
