"""``guarded-sjf``'s own properties: its two limits, its guard and its starvation bound.

The registry's contract tests (fast = naive, pop_fitting, take, remove, state) run over it
too; these check the rule itself against an independent model of the work clock.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from desched.policies import make_policy
from desched.policies.guarded_sjf import units
from desched.simulator import simulate
from desched.trace import TaskTable
from tests.builders import T, examples, make_tasks, workloads
from tests.test_policy_contract import requeue_ops


def order(tasks: TaskTable, name: str, params: dict[str, str] | None, workers: int) -> list[int]:
    result = simulate(tasks, make_policy(name, tasks, params), workers)
    return list(result.decisions.task)


@settings(max_examples=80, deadline=None)
@given(tasks=workloads(), workers=st.integers(1, 3))
def test_beta_one_without_slack_is_first_come_first_served(tasks, workers):
    # deadline = clock + work queued ahead = all work pushed before the task: a task is due
    # exactly when everything ahead of it has gone, so the guard always serves the oldest
    got = order(tasks, "guarded-sjf", {"beta": "1", "a": "0"}, workers)
    assert got == order(tasks, "fifo", None, workers)


@settings(max_examples=80, deadline=None)
@given(tasks=workloads(), workers=st.integers(1, 3))
def test_a_guard_that_never_fires_is_shortest_predicted_first(tasks, workers):
    # slack of 1e6 mean tasks (the bound, MAX_WEIGHT): no deadline is reached, so every
    # decision is SJF's
    got = order(tasks, "guarded-sjf", {"beta": "1", "a": "1e6"}, workers)
    assert got == order(tasks, "sjf-predicted", None, workers)


class ClockModel:
    """The rule of the module docstring, kept from outside the policy: the clock, and each
    queued task's deadline from the work queued ahead of it when it was pushed."""

    def __init__(self, tasks: TaskTable, beta: float, a: float) -> None:
        self.tasks, self.beta, self.a = tasks, beta, a
        self.clock = 0
        self.queued: dict[int, float] = {}
        self.pushed: list[int] = []
        self.ahead: dict[int, int] = {}
        self.clock_at_push: dict[int, int] = {}
        self.mean_at_push: dict[int, float] = {}

    def u(self, i: int) -> int:
        return units(self.tasks.predicted_s[i])

    def push(self, i: int) -> None:
        self.pushed.append(i)
        q = sum(self.u(j) for j in self.queued)
        mean = sum(self.u(j) for j in self.pushed) / len(self.pushed)
        self.ahead[i], self.clock_at_push[i], self.mean_at_push[i] = q, self.clock, mean
        self.queued[i] = self.clock + self.beta * q + self.a * mean

    def expected(self) -> int:
        s = self.tasks.submit_s
        due = [i for i, d in self.queued.items() if d <= self.clock]
        if due:
            return min(due, key=lambda i: (self.queued[i], s[i], i))
        return min(self.queued, key=lambda i: (self.tasks.predicted_s[i], s[i], i))

    def dispatch(self, i: int) -> float:
        late = (self.clock - self.queued.pop(i)) / 1000
        self.clock += self.u(i)
        return late


@settings(max_examples=100, deadline=None)
@given(tasks=workloads(), beta=st.sampled_from([1.0, 1.25, 1.5, 2.0, 4.0]),
       a=st.sampled_from([0.0, 0.5, 2.0]), ops=st.lists(st.booleans(), max_size=80))
def test_the_due_task_with_the_earliest_deadline_goes_first_else_the_shortest(
    tasks, beta, a, ops
):
    policy = make_policy("guarded-sjf", tasks, {"beta": str(beta), "a": str(a)})
    model = ClockModel(tasks, beta, a)
    arrivals = sorted(range(len(tasks)), key=lambda i: (tasks.submit_s[i], i))
    now = 0.0
    for pop in [*ops, *[True] * (2 * len(tasks))]:
        if (not pop or not model.queued) and arrivals:
            i = arrivals.pop(0)
            now = max(now, tasks.submit_s[i])
            policy.push(i, now)
            model.push(i)
        elif model.queued:
            want = model.expected()
            assert policy.pop(now) == want
            late = model.dispatch(want)
            assert policy.score == late
            assert policy.parts == (tasks.predicted_s[want], late)
    assert len(policy) == 0 and not model.queued


@settings(max_examples=100, deadline=None)
@given(tasks=workloads(max_tasks=60), workers=st.integers(1, 3),
       beta=st.sampled_from([1.0, 1.1, 1.5, 2.0, 3.0]), a=st.sampled_from([0.0, 1.0, 5.0]))
def test_no_task_is_overtaken_by_more_later_work_than_its_guard_allows(tasks, workers, beta, a):
    # Starvation bound: the predicted work of later-submitted tasks dispatched before task i
    # is at most (2 beta - 1) Q_i + 2 a m_i + 2 u_max (Q_i: work queued ahead of i when it
    # arrived, m_i: the mean prediction then, u_max: the largest task), whatever the
    # predictions. Before i is due, at most beta Q_i + a m_i (+ one task) is dispatched;
    # after, only due tasks with earlier deadlines, pushed before the pushed work passed
    # i's deadline.
    policy = make_policy("guarded-sjf", tasks, {"beta": str(beta), "a": str(a)})
    result = simulate(tasks, policy, workers)
    model = ClockModel(tasks, beta, a)
    arrival = sorted(range(len(tasks)), key=lambda i: (tasks.submit_s[i], i))
    rank = {i: r for r, i in enumerate(arrival)}
    start = result.start_s
    decided = list(result.decisions.task)
    # replay pushes and pops in the simulator's event order to get Q_i and m_i
    events = sorted([(tasks.submit_s[i], 0, rank[i], i) for i in arrival]
                    + [(start[i], 1, n, i) for n, i in enumerate(decided)])
    for _, kind, _, i in events:
        if kind == 0:
            model.push(i)
        else:
            model.dispatch(i)
    u_max = max(units(p) for p in tasks.predicted_s)
    position = {i: n for n, i in enumerate(decided)}
    for i in range(len(tasks)):
        overtaking = sum(model.u(j) for j in range(len(tasks))
                         if rank[j] > rank[i] and position[j] < position[i])
        bound = ((2 * beta - 1) * model.ahead[i] + 2 * a * model.mean_at_push[i]
                 + 2 * u_max)
        assert overtaking <= bound + 1e-9


def test_a_long_task_is_overtaken_only_until_its_stretched_turn():
    # Two 4 s tasks, a 10 s task, then 1 s tasks, all at once. With beta 1.5 a task may
    # fall behind its first-come turn by half the work queued ahead of it: the second 4 s
    # task (turn at 4 s of work) is due at 6, the 10 s task (turn at 8) at 12; the short
    # tasks fill the slack.
    tasks = make_tasks(
        T("a", 0, 4, 4),
        T("a", 0, 4, 4),
        T("b", 0, 10, 10),
        *[T("c", 0, 1, 1) for _ in range(6)],
    )
    policy = make_policy("guarded-sjf", tasks, {"beta": "1.5", "a": "0"})
    for i in range(len(tasks)):
        policy.push(i, 0.0)
    got = [policy.pop(0.0) for _ in range(len(tasks))]
    # clock 0: task 0 due (deadline 0) -> clock 4; task 1's deadline 1.5 * 4 = 6 > 4, task 2's
    # 1.5 * 8 = 12: shortest first, two 1 s tasks (clock 6), then task 1 is due (clock 10),
    # two more 1 s tasks (12), task 2 is due, then the rest
    assert got == [0, 3, 4, 1, 5, 6, 2, 7, 8]


def test_defaults_are_scale_free():
    # every prediction and duration times 1000: the same decisions
    small = make_tasks(*[T("ab"[i % 2], i * 0.5, 1 + i % 4, 1 + (i * 7) % 5) for i in range(30)])
    big = make_tasks(*[T("ab"[i % 2], i * 500.0, 1000 * (1 + i % 4), 1000 * (1 + (i * 7) % 5))
                       for i in range(30)])
    assert order(small, "guarded-sjf", None, 2) == order(big, "guarded-sjf", None, 2)


@pytest.mark.parametrize("bad", [{"beta": "0.5"}, {"a": "-1"}, {"beta": "nan"}])
def test_bad_parameters_are_refused(bad):
    from desched.errors import DeschedError

    tasks = make_tasks(T("a", 0, 1, 1))
    with pytest.raises(DeschedError, match="guarded-sjf"):
        make_policy("guarded-sjf", tasks, bad)
    assert math.isfinite(units(1.0))


@settings(max_examples=examples(150), deadline=None)
@given(data=st.data(), tasks=workloads(), a=st.sampled_from(["0", "1", "20"]),
       beta=st.sampled_from(["1", "1.5"]), run=requeue_ops)
def test_a_task_taken_out_of_order_then_handed_back_decides_as_the_naive_twin(
    data: st.DataObject, tasks: TaskTable, a: str, beta: str, run: list[object],
) -> None:
    """A task dispatched while not at the top of both heaps (a pop by size, a ``take`` of the
    memory-fit dispatch) leaves a heap entry behind; a lease that expires hands it back with
    a new deadline: the old entry must not come back to life (it did, and made the task due
    early)."""
    from tests.test_policy_contract import FitDriver, memory_needs

    params = {"a": a, "beta": beta}
    mem = data.draw(memory_needs(tasks))
    fast = make_policy("guarded-sjf", tasks, params)
    naive = make_policy("guarded-sjf", tasks, params, naive=True)
    d_fast, d_naive = FitDriver(tasks, mem), FitDriver(tasks, mem)
    for op in [*run, *[1] * (2 * len(tasks))]:
        assert d_fast.step(fast, op) == d_naive.step(naive, op)  # type: ignore[arg-type]
    assert len(fast) == len(naive) == 0
