"""The candidate of scripts/nudge_predicted.py keeps the registry's contract though it is not
registered: its fast class (static keys in a heap) and its naive twin (a list with the
papers' walk-back insertion) decide alike; a small task passes only large tasks of the last
``m`` arrivals; a handed-back task regains its place."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from desched.simulator import simulate
from desched.trace import TaskTable
from scripts.nudge_predicted import NudgePredicted, NudgePredictedNaive
from tests.builders import T, examples, make_tasks, workloads


def _decisions(tasks: TaskTable, naive: bool, workers: int, m: int) -> list[tuple[float, ...]]:
    cls = NudgePredictedNaive if naive else NudgePredicted
    policy = cls(tasks, cls.Params(m=m))
    d = simulate(tasks, policy, workers, engine="python").decisions
    return list(zip(d.t, d.worker, d.task, d.score, *d.parts))


@settings(max_examples=examples(200), deadline=None)
@given(tasks=workloads(), workers=st.integers(1, 4), m=st.sampled_from([0, 1, 2, 3, 16]))
def test_the_fast_class_gives_the_same_decisions_as_its_naive_twin(
    tasks: TaskTable, workers: int, m: int
) -> None:
    assert _decisions(tasks, False, workers, m) == _decisions(tasks, True, workers, m)


@settings(max_examples=examples(100), deadline=None)
@given(tasks=workloads(max_tasks=25), m=st.sampled_from([0, 2, 5]),
       pops=st.lists(st.integers(0, 24), max_size=8))
def test_a_handed_back_task_regains_its_place_in_both(
    tasks: TaskTable, m: int, pops: list[int]
) -> None:
    order = sorted(range(len(tasks.task_id)), key=tasks.submit_s.__getitem__)
    sequences = []
    for cls in (NudgePredicted, NudgePredictedNaive):
        policy = cls(tasks, cls.Params(m=m))
        for i in order:
            policy.push(i, 0.0)
        taken = [policy.pop(0.0) for _ in range(min(len(pops), len(order)))]
        for i in reversed(taken):
            policy.push(i, 0.0)
        sequences.append([policy.pop(0.0) for _ in range(len(policy))])
    assert sequences[0] == sequences[1]
    assert sorted(sequences[0]) == sorted(order)


def _queued_order(cls: type, predicted: list[float], m: int) -> list[str]:
    tasks = make_tasks(*(T(tenant="a", submit_s=float(k), duration_s=1.0, predicted_s=p)
                         for k, p in enumerate(predicted)))
    policy = cls(tasks, cls.Params(m=m))
    for i in range(len(predicted)):
        policy.push(i, float(i))
    return [tasks.task_id[policy.pop(9.0)] for _ in range(len(predicted))]


def test_a_small_task_passes_only_the_large_tasks_of_the_last_m_arrivals() -> None:
    # thresholds (lower medians of the earlier predictions): t0 none (large), t1 10 (10 is
    # not below: large), t2 10 (small), t3 10 (large), t4 10 (small)
    predicted = [10.0, 10.0, 1.0, 10.0, 1.0]
    for cls in (NudgePredicted, NudgePredictedNaive):
        assert _queued_order(cls, predicted, m=0) == ["t0", "t1", "t2", "t3", "t4"]
        # m=1: t2 passes t1 but not t0 (two arrivals back); t4 passes t3 only
        assert _queued_order(cls, predicted, m=1) == ["t0", "t2", "t1", "t4", "t3"]
        # m=10: both small tasks pass every large one, and keep their own order
        assert _queued_order(cls, predicted, m=10) == ["t2", "t4", "t0", "t1", "t3"]
