"""The candidates of scripts/fsp_predicted.py keep the registry's contract though they are not
registered: each fast class (heaps) and its naive twin (lists, scans) decide alike, also
with takes, withdrawals and hand-backs; neither reads ``duration_s`` (the poisoning check of
tests/test_duration_withheld.py); the virtual clock and the order are worked by hand."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from desched.policies.base import Policy
from desched.policies.fsp_predicted import FspPredicted, FspPredictedNaive
from desched.simulator import simulate
from desched.trace import TaskTable
from desched.workloads import generate
from scripts.fsp_predicted import FspP90, FspP90Naive
from tests.builders import T, examples, make_tasks
from tests.test_duration_withheld import poisoned, with_quantiles
from tests.test_policy_boost import quantile_workloads
from tests.test_policy_contract import FitDriver, memory_needs, requeue_ops

TWINS = [(FspPredicted, FspPredictedNaive), (FspP90, FspP90Naive)]


def _decisions(policy: Policy, tasks: TaskTable, workers: int) -> list[tuple[float, ...]]:
    d = simulate(tasks, policy, workers, engine="python").decisions
    return list(zip(d.t, d.worker, d.task, d.score, *d.parts, strict=True))


@pytest.mark.parametrize(("fast", "naive"), TWINS)
@settings(max_examples=examples(150), deadline=None)
@given(tasks=quantile_workloads(), workers=st.integers(1, 4),
       params=st.sampled_from([{}, {"workers": 1}, {"workers": 3}]))
def test_the_fast_class_gives_the_same_decisions_as_its_naive_twin(
    fast: type[Policy], naive: type[Policy], tasks: TaskTable, workers: int,
    params: dict[str, int],
) -> None:
    p = fast.Params(**params)
    assert _decisions(fast(tasks, p), tasks, workers) == _decisions(naive(tasks, p), tasks,
                                                                     workers)


@pytest.mark.parametrize(("fast", "naive"), TWINS)
@settings(max_examples=examples(100), deadline=None)
@given(data=st.data(), tasks=quantile_workloads(), run=requeue_ops)
def test_takes_removals_and_hand_backs_decide_as_the_naive_twin(
    fast: type[Policy], naive: type[Policy], data: st.DataObject, tasks: TaskTable,
    run: list[object],
) -> None:
    mem = data.draw(memory_needs(tasks))
    f, n = fast(tasks), naive(tasks)
    d_fast, d_naive = FitDriver(tasks, mem), FitDriver(tasks, mem)
    for op in [*run, *[1] * (2 * len(tasks))]:
        assert d_fast.step(f, op) == d_naive.step(n, op)  # type: ignore[arg-type]
    assert len(f) == len(n) == 0


def test_both_twins_decide_the_same_on_poisoned_durations() -> None:
    frame = generate("flood", tasks=1500, tenants=12, workers=4, seed=5, predicted_noise=0.5)
    tasks = TaskTable.from_frame(with_quantiles(frame, 5))
    for fast, naive in TWINS:
        truth = _decisions(fast(tasks), tasks, 4)
        assert len(truth) == 1500
        assert _decisions(fast(poisoned(tasks, 1)), tasks, 4) == truth
        assert _decisions(naive(poisoned(tasks, 2)), tasks, 4) == truth
    # the two labels differ on this trace, and so do the orders
    assert _decisions(FspPredicted(tasks), tasks, 4) != _decisions(FspP90(tasks), tasks, 4)


@pytest.mark.parametrize("cls", [FspPredicted, FspPredictedNaive])
def test_the_virtual_clock_by_hand(cls: type[FspPredicted]) -> None:
    # One virtual server (workers=1). a: 10 s at 0; b: 2 s at 1; c: 1 s at 4.
    tasks = make_tasks(T("a", 0, 10, 10), T("b", 1, 2, 2), T("c", 4, 1, 1))
    p = cls(tasks, cls.Params(workers=1))
    p.push(0, 0.0)  # V = 0: g_a = 10
    p.push(1, 1.0)  # V = 1 (a alone, rate 1): g_b = 3
    # from 1 s two tasks share one server at 1/2: b's virtual finish 3 is reached at 5 s
    p.push(2, 4.0)  # V = 1 + 3 * 1/2 = 2.5: g_c = 3.5
    assert p.pop(4.0) == 1 and p.score == 3.0
    # three tasks at 1/3 from 4 s: V = 3 (b leaves) at 5.5 s; then two at 1/2: V = 3.5 at 6.5 s
    assert p.pop(7.0) == 2 and p.score == 3.5
    assert p.pop(7.0) == 0 and p.score == 10.0


@pytest.mark.parametrize("cls", [FspPredicted, FspPredictedNaive])
def test_an_old_large_task_precedes_a_new_small_one_once_it_has_aged(
        cls: type[FspPredicted]) -> None:
    # a: 100 s at 0 with one virtual server; b: 5 s at 60 (V = 60: g_b 65 < g_a 100);
    # c: 5 s at 200, when a and b have left the virtual system (V stopped at 100 at 105 s):
    # g_c = 105 > g_a, so a, still queued, goes before c
    tasks = make_tasks(T("a", 0, 100, 100), T("b", 60, 5, 5), T("c", 200, 5, 5))
    p = cls(tasks, cls.Params(workers=1))
    p.push(0, 0.0)
    p.push(1, 60.0)
    p.push(2, 200.0)
    assert [p.pop(200.0) for _ in range(3)] == [1, 0, 2]


@pytest.mark.parametrize("cls", [FspP90, FspP90Naive])
def test_the_pessimistic_label_takes_the_p90_only_where_it_is_at_least_the_prediction(
        cls: type[FspP90]) -> None:
    tasks = make_tasks(T("a", 0, 1, 4), T("b", 0, 1, 5), T("c", 0, 1, 6))
    tasks.predicted_p90_s[:] = [50.0, 3.0, float("nan")]  # a: p90 50; b: crossed; c: none
    p = cls(tasks, cls.Params(workers=1))
    for i in range(3):
        p.push(i, 0.0)
    assert [p.pop(0.0) for _ in range(3)] == [1, 2, 0]


@pytest.mark.parametrize("cls", [FspPredicted, FspPredictedNaive])
def test_a_withdrawn_task_leaves_the_trace_the_policy_declares(cls: type[FspPredicted]) -> None:
    # a: 10 s at 0, b: 10 s at 0, withdrawn at 4; c: 1 s at 8. One virtual server: with b,
    # V = 2 at 4 s (two tasks at 1/2), then 6 at 8 s (a alone): g_c = 7. Without b, V = 8.
    assert cls.withdrawal_leaves_trace
    tasks = make_tasks(T("a", 0, 10, 10), T("b", 0, 10, 10), T("c", 8, 1, 1))
    with_b, without = cls(tasks, cls.Params(workers=1)), cls(tasks, cls.Params(workers=1))
    with_b.push(0, 0.0)
    with_b.push(1, 0.0)
    with_b.remove(1, 4.0)
    with_b.push(2, 8.0)
    without.push(0, 0.0)
    without.push(2, 8.0)
    assert with_b.pop(8.0) == without.pop(8.0) == 2
    assert (with_b.score, without.score) == (7.0, 9.0)


def _saved(policy: Policy) -> dict[str, object]:
    state = policy.state()
    assert state is not None
    return json.loads(json.dumps(state, allow_nan=False))  # type: ignore[no-any-return]


@pytest.mark.parametrize("cls", [FspPredicted, FspPredictedNaive])
def test_a_task_queued_after_the_saved_state_can_be_withdrawn_after_a_restart(
        cls: type[FspPredicted]) -> None:
    # the service saves its state every few seconds: b arrived after the save; a restart
    # pushes a and b, restores the older state, and then b is cancelled (a QA repro: b's
    # finish had no entry in the virtual system, and remove raised)
    tasks = make_tasks(T("a", 0, 1, 5.0), T("b", 1, 1, 3.0))
    p = cls(tasks)
    p.push(0, 0.0)
    saved = _saved(p)
    q = cls(tasks)
    q.push(0, 2.0)
    q.push(1, 2.0)
    q.restore(saved)
    state = q.state()
    assert state is not None and state["joined"] == 2 and len(state["virtual"]) == 2
    q.remove(1, 2.0)
    assert len(q) == 1 and q.pop(2.0) == 0


@pytest.mark.parametrize("cls", [FspPredicted, FspPredictedNaive])
def test_a_task_saved_as_running_and_queued_at_the_restart_counts_as_queued(
        cls: type[FspPredicted]) -> None:
    # a leased task whose lease expired between the save and the restart is pushed as queued:
    # counted running too, its next dispatch would raise the worker count for good
    tasks = make_tasks(T("a", 0, 1, 1.0), T("b", 0, 1, 1.0), T("c", 0, 1, 1.0))
    p = cls(tasks)
    for i in range(3):
        p.push(i, 0.0)
    p.take(0, 0.5)
    saved = _saved(p)
    assert saved["running"] == ["t0"]
    q = cls(tasks)
    for i in range(3):
        q.push(i, 1.0)
    q.restore(saved)
    state = q.state()
    assert state is not None and state["running"] == []
    q.pop(1.0)
    state = q.state()
    assert state is not None and state["workers_seen"] == 1


@pytest.mark.parametrize(("fast", "naive"), TWINS)
@settings(max_examples=examples(100), deadline=None)
@given(data=st.data(), tasks=quantile_workloads(), run=requeue_ops,
       skip=st.sets(st.integers(0, 3), max_size=2))
def test_the_lazy_pop_sequence_is_the_copy_and_pop_reference(
    fast: type[Policy], naive: type[Policy], data: st.DataObject, tasks: TaskTable,
    run: list[object], skip: set[int],
) -> None:
    # the fast class walks its heap; the base class pops a deep copy (the reference)
    mem = data.draw(memory_needs(tasks))
    f, d = fast(tasks), FitDriver(tasks, mem)
    for op in run:
        d.step(f, op)  # type: ignore[arg-type]
        assert list(f.pop_sequence(d.now, skip)) == list(Policy.pop_sequence(f, d.now, skip))


@pytest.mark.parametrize("cls", [FspPredicted, FspPredictedNaive])
def test_finished_and_withdrawn_tasks_are_forgotten(cls: type[FspPredicted]) -> None:
    tasks = make_tasks(*[T("ab"[i % 2], i, 1 + i % 3, 1 + i % 4) for i in range(30)])
    p = cls(tasks)
    simulate(tasks, p, 3, engine="python")
    assert not (p.finish if isinstance(p, FspPredicted) else p.g)  # type: ignore[attr-defined]
