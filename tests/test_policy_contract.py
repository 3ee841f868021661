"""Contract tests that run over every registered policy by themselves."""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from desched.policies import REGISTRY, make_policy
from desched.policies.base import Policy
from desched.policies.learnable import learnable_keys
from desched.simulator import simulate
from desched.trace import TaskTable
from desched.workloads import generate
from tests.builders import decision_sequence, examples, workloads
from tests.test_policy_state import Driver

POLICIES = sorted(REGISTRY)


@pytest.mark.parametrize("name", POLICIES)
@settings(max_examples=examples(150), deadline=None)
@given(tasks=workloads(), workers=st.integers(1, 4))
def test_fast_policy_gives_the_same_decisions_as_its_naive_twin(name, tasks, workers):
    fast = decision_sequence(tasks, name, workers, naive=False)
    naive = decision_sequence(tasks, name, workers, naive=True)
    assert fast == naive


@pytest.mark.parametrize("name", POLICIES)
@settings(max_examples=examples(60), deadline=None)
@given(tasks=workloads(), workers=st.integers(1, 4))
def test_every_task_runs_exactly_once_and_never_before_its_submission(name, tasks, workers):
    result = simulate(tasks, make_policy(name, tasks), workers)
    assert sorted(result.decisions.task) == list(range(len(tasks)))
    for i in range(len(tasks)):
        assert result.start_s[i] >= tasks.submit_s[i]
        assert result.end_s[i] == result.start_s[i] + tasks.duration_s[i]


@pytest.mark.parametrize("name", POLICIES)
@settings(max_examples=examples(30), deadline=None)
@given(tasks=workloads(), workers=st.integers(1, 4))
def test_a_worker_never_runs_two_tasks_at_once_and_is_never_idle_while_work_waits(
    name, tasks, workers
):
    result = simulate(tasks, make_policy(name, tasks), workers)
    by_worker: dict[int, list[tuple[float, float]]] = {}
    for i in range(len(tasks)):
        by_worker.setdefault(result.worker[i], []).append((result.start_s[i], result.end_s[i]))
    for spans in by_worker.values():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end
    # work conservation: when a task starts later than its submission, every worker was busy
    # at its submission instant or later until it started
    for i in range(len(tasks)):
        if result.start_s[i] > tasks.submit_s[i]:
            t = tasks.submit_s[i]
            busy = sum(
                1 for j in range(len(tasks)) if result.start_s[j] <= t < result.end_s[j]
            )
            assert busy == workers


@pytest.mark.parametrize("name", POLICIES)
@settings(max_examples=examples(20), deadline=None)
@given(tasks=workloads(), workers=st.integers(1, 4))
def test_the_simulation_is_deterministic(name, tasks, workers):
    assert decision_sequence(tasks, name, workers, False) == decision_sequence(
        tasks, name, workers, False
    )


# Memory-aware dispatch: take and pop_fitting ----------------------------------------------

FitOp = int | tuple[str, int, int | None] | tuple[str, int]
"""``Driver``'s ops, plus ``("fit", free, limit)``: a ``pop_fitting`` whose ``fits`` accepts
the tasks that need at most ``free`` memory, ``("take", r)``: a ``take`` of the r-th queued
task (mod their number), ``("remove", r)``: a ``remove`` (cancellation) of it, and
``("requeue", r)``: the r-th running task pushed again (its lease expired, as the service
hands it back). Each pushes instead when the queue (for ``requeue``: the running set) is
empty."""

_limit = st.one_of(st.none(), st.integers(1, 4))
_free = st.integers(0, 3)
fit_ops = st.lists(
    st.one_of(
        st.sampled_from([0, 0, 0, 1, 2]),
        st.sampled_from([0, 0, 0, 1, 2]),
        st.tuples(st.just("fit"), _free, _limit),
        st.tuples(st.just("take"), st.integers(0, 39)),
        st.tuples(st.just("remove"), st.integers(0, 39)),
    ),
    min_size=10,
    max_size=150,
)
requeue_ops = st.lists(
    st.one_of(
        st.sampled_from([0, 0, 0, 1, 2]),
        st.tuples(st.just("fit"), _free, _limit),
        st.tuples(st.just("take"), st.integers(0, 39)),
        st.tuples(st.just("remove"), st.integers(0, 39)),
        st.tuples(st.just("requeue"), st.integers(0, 39)),
    ),
    min_size=10,
    max_size=150,
)
"""``fit_ops`` with hand-backs (``("requeue", r)``): for the tests that hold a fast policy
to its naive twin; a handed-back task is dispatched again, which the accounting tests
below do not allow for."""


@st.composite
def memory_needs(draw: st.DrawFn, tasks: TaskTable) -> list[int]:
    """Memory each task needs, 0 to 3 units; a poll states 0 to 3 free."""
    return [draw(st.integers(0, 3)) for _ in range(len(tasks))]


class FitDriver(Driver):
    """``Driver`` that also dispatches with ``pop_fitting`` and ``take``."""

    def __init__(self, tasks: TaskTable, mem: list[int]) -> None:
        super().__init__(tasks)
        self.mem = mem
        self.requeued: list[int] = []
        """Every task handed back, once per hand-back: each is dispatched once more."""

    def fits(self, free: int) -> Callable[[int], bool]:
        return lambda j: self.mem[j] <= free

    def step(self, policy: Policy, op: FitOp) -> tuple[object, ...] | None:
        if isinstance(op, tuple) and op[0] == "requeue":
            if not self.running:
                return super().step(policy, 0)
            i = self.running.pop(op[1] % len(self.running))
            self.now += 0.25
            policy.push(i, self.now)
            self.queued.add(i)
            self.requeued.append(i)
            return ("requeued", i)
        if isinstance(op, int) or not self.queued:
            return super().step(policy, 0 if isinstance(op, tuple) else op)
        if op[0] == "remove":
            return self.withdraw(policy, op[1])
        self.now += 0.25
        if op[0] == "take":
            i = sorted(self.queued)[op[1] % len(self.queued)]
            policy.take(i, self.now)
            self.dispatched(i)
            return ("take", i, policy.score, *policy.parts)
        _, free, limit = op
        queued = len(self.queued)
        winner, skipped = policy.pop_fitting(self.now, self.fits(free), limit)
        if winner is None:
            assert len(policy) == queued
            assert skipped == (queued if limit is None else min(queued, limit))
            return ("none", skipped)
        assert winner in self.queued and self.mem[winner] <= free
        assert len(policy) == queued - 1
        self.dispatched(winner)
        return ("fit", winner, skipped, policy.score, *policy.parts)

    def dispatched(self, i: int) -> None:
        self.queued.remove(i)
        self.running.append(i)
        self.started.append(i)


def copies(policy: Policy, driver: FitDriver) -> tuple[Policy, FitDriver]:
    """An independent copy of a policy and its driver (the task table shared)."""
    return copy.deepcopy((policy, driver), {id(policy.tasks): policy.tasks})


def same_float(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


@pytest.mark.parametrize("name", POLICIES)
@settings(max_examples=examples(80), deadline=None)
@given(data=st.data(), tasks=workloads(), run=requeue_ops)
def test_take_and_pop_fitting_of_a_fast_policy_match_its_naive_twin(name, data, tasks, run):
    # Winners, skip counts, scores and parts, state, and every later decision.
    mem = data.draw(memory_needs(tasks))
    fast, naive = make_policy(name, tasks), make_policy(name, tasks, naive=True)
    d_fast, d_naive = FitDriver(tasks, mem), FitDriver(tasks, mem)
    for op in [*run, *[1] * (2 * len(tasks))]:
        assert d_fast.step(fast, op) == d_naive.step(naive, op)
        assert fast.state() == naive.state()
    assert len(fast) == len(naive) == 0


@pytest.mark.parametrize("name", POLICIES)
@settings(max_examples=examples(80), deadline=None)
@given(
    data=st.data(), tasks=workloads(), before=fit_ops, free=_free, limit=_limit,
    after=fit_ops, naive=st.booleans(),
)
def test_pop_fitting_takes_the_first_fitting_task_of_the_pop_sequence_and_leaves_no_trace(
    name, data, tasks, before, free, limit, after, naive
):
    # The winner is the first task of the pop sequence (run on a copy) that fits, within
    # the limit; afterwards the policy is what a take of that winner gives: same score and
    # parts, same state, same decisions from then on. When nothing fits nothing changes.
    driver = FitDriver(tasks, data.draw(memory_needs(tasks)))
    policy = make_policy(name, tasks, naive=naive)
    for op in before:
        driver.step(policy, op)
    now = driver.now = driver.now + 0.25
    fits = driver.fits(free)
    trial, _ = copies(policy, driver)
    sequence = [trial.pop(now) for _ in range(len(trial))]
    refused = len(list(itertools.takewhile(lambda j: not fits(j), sequence)))
    if limit is not None and refused >= limit:
        expected = (None, limit)
    elif refused == len(sequence):
        expected = (None, refused)
    else:
        expected = (sequence[refused], refused)

    twin, twin_driver = copies(policy, driver)
    assert policy.pop_fitting(now, fits, limit) == expected
    winner = expected[0]
    if winner is not None:
        twin.take(winner, now)
        driver.dispatched(winner)
        twin_driver.dispatched(winner)
    assert same_float(policy.score, twin.score) and policy.parts == twin.parts
    assert policy.state() == twin.state() and len(policy) == len(twin)
    for op in [*after, *[1] * (2 * len(tasks))]:
        assert driver.step(policy, op) == twin_driver.step(twin, op)


@pytest.mark.parametrize("name", POLICIES)
@settings(max_examples=examples(60), deadline=None)
@given(data=st.data(), tasks=workloads(), before=fit_ops, after=fit_ops, naive=st.booleans())
def test_pop_is_pop_fitting_that_accepts_everything_and_take_of_its_winner(
    name, data, tasks, before, after, naive
):
    driver = FitDriver(tasks, data.draw(memory_needs(tasks)))
    policy = make_policy(name, tasks, naive=naive)
    for op in before:
        driver.step(policy, op)
    if not driver.queued:
        return
    now = driver.now = driver.now + 0.25
    runs = [copies(policy, driver) for _ in range(3)]
    (p_pop, d_pop), (p_fit, d_fit), (p_take, d_take) = runs
    i = p_pop.pop(now)
    assert p_fit.pop_fitting(now, lambda j: True) == (i, 0)
    p_take.take(i, now)
    for p, d in runs:
        assert (p.score, p.parts, p.state()) == (p_pop.score, p_pop.parts, p_pop.state())
        d.dispatched(i)
    for op in [*after, *[1] * (2 * len(tasks))]:
        out = d_pop.step(p_pop, op)
        assert d_fit.step(p_fit, op) == out
        assert d_take.step(p_take, op) == out


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(st.integers(-20, 20), min_size=1, max_size=120).flatmap(
        lambda xs: st.tuples(st.just(xs), st.integers(0, len(xs) - 1))
    )
)
def test_heap_delete_keeps_a_heap_of_the_other_entries(case):
    # Reference: delete the entry from the list and heapify again, O(n).
    import heapq

    from desched.structures.heaps import heap_delete

    values, j = case
    heap = [(x, n) for n, x in enumerate(values)]
    heapq.heapify(heap)
    reference = heap[:j] + heap[j + 1 :]
    heapq.heapify(reference)
    heap_delete(heap, j)
    assert all(not heap[c] < heap[(c - 1) // 2] for c in range(1, len(heap)))
    assert sorted(heap) == sorted(reference)
    assert [heapq.heappop(heap) for _ in range(len(heap))] == sorted(reference)


LEARNABLE = sorted(n for n, cls in REGISTRY.items() if learnable_keys(cls.Params))


@pytest.mark.parametrize("name", POLICIES)
@settings(max_examples=examples(20), deadline=None)
@given(tasks=workloads(), workers=st.integers(1, 3))
def test_a_policy_declares_per_tenant_state_exactly_when_it_keeps_some(name, tasks, workers):
    policy = make_policy(name, tasks)
    simulate(tasks, policy, workers, engine="python")  # the policy object itself runs
    declared = bool(REGISTRY[name].tenant_state)
    assert (policy.state() is not None) == declared
    assert REGISTRY[name].naive.tenant_state == REGISTRY[name].tenant_state


@pytest.mark.parametrize("name", LEARNABLE)
def test_a_learnable_policy_searches_its_own_parameters_and_its_defaults_lie_inside(name):
    params = REGISTRY[name].Params
    space = params.search
    assert set(space.keys) <= set(params.model_fields) and "weights" in params.model_fields
    defaults = params.learnable_defaults()
    for dim in space.dimensions:
        assert dim.low <= dim.coordinate(defaults) <= dim.high
        assert dim.grid and all(dim.low <= x <= dim.high for x in dim.grid)
    for point in [*space.start_points(defaults), *map(space.coordinates, space.grid())]:
        params(**space.params(point))  # every point of the space is a valid setting
    assert space.params(space.coordinates(defaults)) == pytest.approx(defaults)


@pytest.mark.parametrize("name", LEARNABLE)
def test_a_learnable_policy_reads_its_parameters_at_every_decision(name):
    # the REINFORCE agent swaps a policy's parameters between windows of simulated time:
    # held on one grid setting from the start, the policy decides as if built with it
    from desched.bench.rl import WindowControlled

    frame = generate("flood", tasks=300, tenants=4, workers=2, seed=3, predicted_noise=0.5)
    tasks = TaskTable.from_frame(frame)
    grid = REGISTRY[name].Params.search.grid()
    for k in {0, len(grid) - 1}:
        wrapped = WindowControlled(make_policy(name, tasks), lambda obs, k=k: k, grid,
                                   workers=2, window_s=40.0)
        controlled = list(simulate(tasks, wrapped, 2).decisions.task)
        assert controlled == list(simulate(tasks, make_policy(name, tasks, grid[k]), 2)
                                  .decisions.task)
        assert len(wrapped.trajectory) > 2


# Cancellation: remove ---------------------------------------------------------------------


@pytest.mark.parametrize("name", POLICIES)
@settings(max_examples=examples(60), deadline=None)
@given(data=st.data(), tasks=workloads(), run=fit_ops, naive=st.booleans())
def test_a_removed_task_is_never_dispatched_and_no_task_is_lost(name, data, tasks, run, naive):
    driver = FitDriver(tasks, data.draw(memory_needs(tasks)))
    policy = make_policy(name, tasks, naive=naive)
    for op in [*run, *[1] * (2 * len(tasks))]:
        driver.step(policy, op)
        assert len(policy) == len(driver.queued)
    assert len(policy) == 0
    dispatched = driver.started
    assert not set(dispatched) & set(driver.removed)
    assert len(set(dispatched)) == len(dispatched)
    assert sorted(dispatched + driver.removed) == sorted(driver.order)


TRACELESS_WITHDRAWAL = [n for n in POLICIES if not REGISTRY[n].withdrawal_leaves_trace]
"""Every policy but those that declare why a withdrawn task leaves a trace (``fsp-predicted``:
its virtual system shared its servers with the task while it was queued;
tests/test_fsp_predicted_script.py shows it does)."""


@pytest.mark.parametrize("name", TRACELESS_WITHDRAWAL)
@settings(max_examples=examples(60), deadline=None)
@given(data=st.data(), tasks=workloads(), run=st.lists(st.integers(0, 2), max_size=120))
def test_a_task_withdrawn_at_once_leaves_no_trace_while_its_tenant_stays_queued(
    name, data, tasks, run
):
    # Withdrawing charges nothing: a policy that had a task pushed and removed at once, while
    # its tenant had other tasks queued, decides from then on as one that never had it.
    # (A push to a tenant with nothing queued may move state: VTC lifts its counter.)
    with_it, without = make_policy(name, tasks), make_policy(name, tasks)
    d_with, d_without = FitDriver(tasks, [0] * len(tasks)), FitDriver(tasks, [0] * len(tasks))
    tenant = tasks.tenant
    for op in [*run, *[1] * (2 * len(tasks))]:
        nxt = d_with.order[d_with.next] if d_with.next < len(d_with.order) else None
        backlogged = nxt is not None and any(tenant[j] == tenant[nxt] for j in d_with.queued)
        pushing = op == 0 or (op == 1 and not d_with.queued) or (op == 2 and not d_with.running)
        if nxt is not None and pushing and backlogged and data.draw(st.booleans()):
            d_with.step(with_it, 0)
            d_with.withdraw(with_it, sorted(d_with.queued).index(nxt))
            d_without.next += 1
            d_without.now = d_with.now
            continue
        assert d_with.step(with_it, op) == d_without.step(without, op)
        assert with_it.state() == without.state() and len(with_it) == len(without)
