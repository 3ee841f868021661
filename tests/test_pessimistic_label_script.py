"""The candidates of scripts/pessimistic_label.py keep the registry's contract though they are
not registered: each fast class and its naive twin decide alike on workloads with p90
predictions (finite and above, finite and below the point prediction, missing), and each
ranks as its parent would on a table carrying the pessimistic label."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from desched.policies.base import Policy
from desched.policies.boost_predicted import BoostPredicted
from desched.policies.guarded_sjf import GuardedSjf
from desched.simulator import simulate
from desched.trace import TaskTable
from scripts.pessimistic_label import (
    BoostPredictedP90,
    BoostPredictedP90Naive,
    GuardedSjfP90,
    GuardedSjfP90Naive,
    pessimistic,
)
from tests.builders import T, examples, make_tasks, workloads


@st.composite
def with_p90(draw: st.DrawFn) -> TaskTable:
    """A random workload whose tasks each have a p50 (or none) and a p90 above, below or
    equal to the point prediction, or none."""
    tasks = draw(workloads())
    n = len(tasks.task_id)
    factors = st.sampled_from([math.nan, math.inf, 0.5, 1.0, 2.0, 8.0])
    tasks.predicted_p90_s[:] = [p * draw(factors) for p in tasks.predicted_s]
    if draw(st.booleans()):
        tasks.predicted_p50_s[:] = [p * draw(st.sampled_from([math.nan, 0.5, 1.0]))
                                    for p in tasks.predicted_s]
    assert len(tasks.predicted_p90_s) == n
    return tasks


def _decisions(policy: Policy, tasks: TaskTable, workers: int) -> list[tuple[float, ...]]:
    d = simulate(tasks, policy, workers, engine="python").decisions
    return list(zip(d.t, d.worker, d.task, d.score, *d.parts))


@settings(max_examples=examples(150), deadline=None)
@given(tasks=with_p90(), workers=st.integers(1, 4))
def test_guarded_sjf_p90_gives_the_same_decisions_as_its_naive_twin(
    tasks: TaskTable, workers: int
) -> None:
    assert (_decisions(GuardedSjfP90(tasks), tasks, workers)
            == _decisions(GuardedSjfP90Naive(tasks), tasks, workers))


@settings(max_examples=examples(150), deadline=None)
@given(tasks=with_p90(), workers=st.integers(1, 4))
def test_boost_predicted_p90_gives_the_same_decisions_as_its_naive_twin(
    tasks: TaskTable, workers: int
) -> None:
    assert (_decisions(BoostPredictedP90(tasks), tasks, workers)
            == _decisions(BoostPredictedP90Naive(tasks), tasks, workers))


@settings(max_examples=examples(100), deadline=None)
@given(tasks=with_p90(), workers=st.integers(1, 4))
def test_each_decides_as_its_parent_on_a_table_with_the_label_written_into_it(
    tasks: TaskTable, workers: int
) -> None:
    written = TaskTable(
        task_id=tasks.task_id, tenant=tasks.tenant, tenant_names=tasks.tenant_names,
        submit_s=tasks.submit_s, duration_s=tasks.duration_s,
        predicted_s=[q if q >= p and abs(q) < math.inf else p
                     for p, q in zip(tasks.predicted_s, tasks.predicted_p90_s)],
        predicted_p50_s=tasks.predicted_p50_s, predicted_p90_s=tasks.predicted_p90_s)
    assert (_decisions(GuardedSjfP90(tasks), tasks, workers)
            == _decisions(GuardedSjf(written), written, workers))
    assert (_decisions(BoostPredictedP90(tasks), tasks, workers)
            == _decisions(BoostPredicted(written), written, workers))


def test_the_label_is_the_p90_only_where_it_is_finite_and_not_below_the_prediction() -> None:
    assert pessimistic(2.0, 5.0) == 5.0
    assert pessimistic(2.0, 2.0) == 2.0
    assert pessimistic(2.0, 1.0) == 2.0
    assert pessimistic(2.0, math.nan) == 2.0
    assert pessimistic(2.0, math.inf) == 2.0


def test_the_table_given_keeps_its_point_predictions() -> None:
    tasks = make_tasks(T("a", 0.0, 1.0, predicted_s=1.0), T("b", 0.0, 1.0, predicted_s=2.0))
    tasks.predicted_p90_s[:] = [3.0, 1.0]
    policy = GuardedSjfP90(tasks)
    assert policy.tasks.predicted_s == [3.0, 2.0]
    assert tasks.predicted_s == [1.0, 2.0]
