"""The candidate of scripts/turns_predicted.py keeps the registry's contract though it is not
registered: the fast class (heaps) and its naive twin (lists, scans) decide alike, also with
takes, withdrawals and hand-backs; neither reads ``duration_s``; with every label equal it is
first come, first served; the turns and the guard are worked by hand."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from desched.policies import make_policy
from desched.policies.base import Policy
from desched.simulator import simulate
from desched.trace import TaskTable
from desched.workloads import generate
from scripts.turns_predicted import TurnsPredicted, TurnsPredictedNaive
from tests.builders import T, examples, make_tasks
from tests.test_duration_withheld import poisoned, with_quantiles
from tests.test_policy_boost import quantile_workloads
from tests.test_policy_contract import FitDriver, memory_needs, requeue_ops

CLASSES = [TurnsPredicted, TurnsPredictedNaive]


def _decisions(policy: Policy, tasks: TaskTable, workers: int) -> list[tuple[float, ...]]:
    d = simulate(tasks, policy, workers, engine="python").decisions
    return list(zip(d.t, d.worker, d.task, d.score, *d.parts, strict=True))


@settings(max_examples=examples(200), deadline=None)
@given(tasks=quantile_workloads(), workers=st.integers(1, 4), guard=st.sampled_from([0, 1, 3]))
def test_the_fast_class_gives_the_same_decisions_as_its_naive_twin(
    tasks: TaskTable, workers: int, guard: int,
) -> None:
    p = TurnsPredicted.Params(guard=guard)
    assert _decisions(TurnsPredicted(tasks, p), tasks, workers) == _decisions(
        TurnsPredictedNaive(tasks, p), tasks, workers)


@settings(max_examples=examples(150), deadline=None)
@given(data=st.data(), tasks=quantile_workloads(), run=requeue_ops,
       guard=st.sampled_from([0, 1, 3]))
def test_takes_removals_and_hand_backs_decide_as_the_naive_twin(
    data: st.DataObject, tasks: TaskTable, run: list[object], guard: int,
) -> None:
    mem = data.draw(memory_needs(tasks))
    p = TurnsPredicted.Params(guard=guard)
    f, n = TurnsPredicted(tasks, p), TurnsPredictedNaive(tasks, p)
    d_fast, d_naive = FitDriver(tasks, mem), FitDriver(tasks, mem)
    for op in [*run, *[1] * (2 * len(tasks))]:
        assert d_fast.step(f, op) == d_naive.step(n, op)  # type: ignore[arg-type]
    assert len(f) == len(n) == 0


@settings(max_examples=examples(100), deadline=None)
@given(tasks=quantile_workloads(), workers=st.integers(1, 4), guard=st.sampled_from([0, 2]))
def test_with_every_label_equal_it_is_first_come_first_served(
    tasks: TaskTable, workers: int, guard: int,
) -> None:
    tasks.predicted_s[:] = [7.0] * len(tasks.predicted_s)
    fifo = simulate(tasks, make_policy("fifo", tasks), workers, engine="python")
    for cls in CLASSES:
        run = simulate(tasks, cls(tasks, cls.Params(guard=guard)), workers, engine="python")
        assert list(run.decisions.task) == list(fifo.decisions.task)


def test_both_classes_decide_the_same_on_poisoned_durations() -> None:
    frame = generate("flood", tasks=1200, tenants=12, workers=4, seed=5, predicted_noise=0.5)
    tasks = TaskTable.from_frame(with_quantiles(frame, 5))
    for cls in CLASSES:
        for guard in (0, 16):
            p = cls.Params(guard=guard)
            truth = _decisions(cls(tasks, p), tasks, 4)
            assert len(truth) == 1200
            assert _decisions(cls(poisoned(tasks, 1), p), tasks, 4) == truth
    # the guard changes the order on this trace, and the order is not first-come
    fifo = _decisions(make_policy("fifo", tasks), tasks, 4)
    unguarded = _decisions(TurnsPredicted(tasks), tasks, 4)
    assert unguarded != _decisions(TurnsPredicted(tasks, TurnsPredicted.Params(guard=1)),
                                   tasks, 4)
    assert [d[2] for d in unguarded] != [d[2] for d in fifo]


@pytest.mark.parametrize("cls", CLASSES)
def test_a_tenant_keeps_its_first_come_turns_and_runs_its_shortest_task_in_them(
        cls: type[Policy]) -> None:
    # a0 at 0 (label 9), b0 at 0.5 (label 1), a1 at 1 (label 1). First come: a0, b0, a1.
    # Here a holds the turns of its two latest tickets, the first at 0: a goes first and
    # runs a1; then a's turn is 1, after b's 0.5: b0; then a0.
    tasks = make_tasks(T("a", 0, 1, 9), T("b", 0.5, 1, 1), T("a", 1, 1, 1))
    p = cls(tasks)
    for i in range(3):
        p.push(i, 2.0)
    assert p.pop(2.0) == 2 and p.score == 2.0 and p.parts == (1.0,)
    assert p.pop(2.0) == 1 and p.score == 1.5
    assert p.pop(2.0) == 0 and p.score == 1.0 and p.parts == (9.0,)


@pytest.mark.parametrize("cls", CLASSES)
def test_the_guard_sends_a_task_passed_by_enough_of_its_tenant_mates(cls: type[Policy]) -> None:
    # one tenant, all at 0: a (label 9), b (1), c (2). No guard: b, c, a. Guard 1: after b's
    # dispatch a and c are late (one dispatch since their push), the first of them goes: a.
    tasks = make_tasks(T("x", 0, 1, 9), T("x", 0, 1, 1), T("x", 0, 1, 2))
    orders = []
    for guard in (0, 1):
        p = cls(tasks, cls.Params(guard=guard))
        for i in range(3):
            p.push(i, 0.0)
        orders.append([p.pop(0.0) for _ in range(3)])
    assert orders == [[1, 2, 0], [1, 0, 2]]


@pytest.mark.parametrize("cls", CLASSES)
def test_a_withdrawn_task_leaves_no_trace(cls: type[Policy]) -> None:
    # a0 at 0 (label 5), a1 at 1 (label 1), b0 at 0.5 (label 1): a1 withdrawn. Without it a's
    # turn is a0's ticket at 0 and a0 goes first, as if a1 had never been pushed.
    tasks = make_tasks(T("a", 0, 1, 5), T("a", 1, 1, 1), T("b", 0.5, 1, 1))
    p = cls(tasks)
    for i in (0, 2, 1):
        p.push(i, 1.0)
    p.remove(1, 1.0)
    assert [p.pop(1.0) for _ in range(2)] == [0, 2]


@pytest.mark.parametrize("cls", CLASSES)
def test_a_task_handed_back_keeps_its_one_ticket(cls: type[Policy]) -> None:
    # a0 at 0 (label 5), a1 at 1 (label 1), b0 at 2 (label 1). a's first turn runs a1; a1 is
    # handed back: a holds two turns again, from 0, runs a1 in the first and a0 in the
    # second (its ticket at 1, before b0's at 2), as first come would run both before b0.
    tasks = make_tasks(T("a", 0, 1, 5), T("a", 1, 1, 1), T("b", 2, 1, 1))
    p = cls(tasks)
    for i in range(3):
        p.push(i, 3.0)
    assert p.pop(3.0) == 1
    p.push(1, 4.0)
    assert [p.pop(4.0) for _ in range(3)] == [1, 0, 2]
