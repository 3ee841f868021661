"""Policy state across a restart of the live service: ``Policy.state`` and ``restore``.

A restarted service rebuilds the policy from the queued tasks and then gives it the state
the previous run saved. The contract: a policy built over the same queue and given
``restore(state())`` of another decides exactly as that other one from then on; fast
policies and their naive twins report the same state.
"""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from desched.policies import REGISTRY, make_policy
from desched.policies.base import Policy
from desched.trace import TaskTable
from tests.builders import T, examples, make_tasks, workloads

POLICIES = sorted(REGISTRY)


class Driver:
    """Feeds a policy pushes (in submit order), pops and completions, keeping what is
    queued and running so that a second policy can be built over the same queue."""

    def __init__(self, tasks: TaskTable) -> None:
        self.tasks = tasks
        self.order = sorted(range(len(tasks)), key=lambda i: (tasks.submit_s[i], i))
        self.next = 0
        self.now = 0.0
        self.queued: set[int] = set()
        self.running: list[int] = []
        self.removed: list[int] = []
        self.started: list[int] = []
        """Every task dispatched so far, in order (``running`` loses the completed ones)."""

    def step(self, policy: Policy, op: int) -> tuple[object, ...] | None:
        """Op 0 pushes the next task, 1 pops (when the queue is not empty), 2 completes the
        longest-running task, 3 withdraws (``remove``) the middle queued task by position; an
        op that cannot run pushes instead (or does nothing)."""
        if op == 1 and self.queued:
            self.now += 0.25
            i = policy.pop(self.now)
            self.queued.remove(i)
            self.running.append(i)
            self.started.append(i)
            return (i, policy.score, *policy.parts)
        if op == 2 and self.running:
            i = self.running.pop(0)
            self.now += 0.25
            policy.complete(i, self.now, float(self.tasks.duration_s[i]))
            return ("done", i)
        if op == 3 and self.queued:
            return self.withdraw(policy, len(self.queued) // 2)
        if self.next < len(self.order):
            i = self.order[self.next]
            self.next += 1
            self.now = max(self.now, float(self.tasks.submit_s[i]))
            policy.push(i, self.now)
            self.queued.add(i)
        return None

    def withdraw(self, policy: Policy, r: int) -> tuple[object, ...]:
        """``remove`` the r-th queued task by position (mod their number)."""
        i = sorted(self.queued)[r % len(self.queued)]
        self.now += 0.25
        policy.remove(i, self.now)
        self.queued.remove(i)
        self.removed.append(i)
        return ("removed", i)


def rebuilt(name: str, tasks: TaskTable, driver: Driver, state: object) -> Policy:
    """What the service does at start: a fresh policy, the queue pushed in position order,
    then the saved state (through JSON, as it is stored)."""
    policy = make_policy(name, tasks)
    for i in sorted(driver.queued):
        policy.push(i, driver.now)
    if state is not None:
        policy.restore(json.loads(json.dumps(state, allow_nan=False)))
    return policy


ops = st.lists(st.integers(0, 3), min_size=0, max_size=120)


@pytest.mark.parametrize("name", POLICIES)
@settings(max_examples=examples(80), deadline=None)
@given(tasks=workloads(), before=ops, after=ops)
def test_a_policy_rebuilt_from_the_queue_and_its_saved_state_decides_as_the_original(
    name, tasks, before, after
):
    driver = Driver(tasks)
    original = make_policy(name, tasks)
    for op in before:
        driver.step(original, op)
    state = original.state()
    restored = rebuilt(name, tasks, driver, state)
    twin = copy.deepcopy(driver)
    for op in [*after, *[1] * len(tasks)]:
        assert driver.step(original, op) == twin.step(restored, op)
    assert restored.state() == original.state()


@pytest.mark.parametrize("name", POLICIES)
@settings(max_examples=examples(60), deadline=None)
@given(tasks=workloads(), run=ops)
def test_fast_and_naive_policies_report_the_same_state(name, tasks, run):
    fast, naive = make_policy(name, tasks), make_policy(name, tasks, naive=True)
    d_fast, d_naive = Driver(tasks), Driver(tasks)
    for op in run:
        assert d_fast.step(fast, op) == d_naive.step(naive, op)
        assert fast.state() == naive.state()


STATEFUL = [n for n in POLICIES if REGISTRY[n].tenant_state]
"""Every policy that declares state: read from the registry, so a new one is covered."""


@pytest.mark.parametrize("name", STATEFUL)
def test_stateful_policies_have_state_and_stateless_ones_none(name):
    tasks = make_tasks(T("a", 0, 1, 1), T("b", 0, 1, 1))
    policy = make_policy(name, tasks)
    policy.push(0, 0.0)
    policy.push(1, 0.0)
    policy.complete(policy.pop(0.0), 1.0, 1.0)
    assert policy.state() is not None
    for stateless in set(POLICIES) - set(STATEFUL):
        assert make_policy(stateless, tasks).state() is None


def test_a_restart_keeps_the_vtc_counters():
    # a's tasks are predicted 5 s, b's 1 s. After a0, b0, b1 a has been served 5 s and b 2 s,
    # so b goes next; a restart that forgot the counters would see a tie and serve a first.
    tasks = make_tasks(*[T("a", 0, 5, 5) for _ in range(3)], *[T("b", 0, 1, 1) for _ in range(5)])
    before = make_policy("vtc", tasks)
    for i in range(8):
        before.push(i, 0.0)
    assert [before.pop(0.0) for _ in range(3)] == [0, 3, 4]
    saved = before.state()
    assert saved == {"counter": {"a": 5.0, "b": 2.0}, "last_left": None}
    assert before.pop(1.0) == 5

    def restarted(state: dict | None) -> int:
        policy = make_policy("vtc", tasks)
        for i in (1, 2, 5, 6, 7):
            policy.push(i, 1.0)
        if state is not None:
            policy.restore(state)
        return policy.pop(1.0)

    assert restarted(None) == 1  # forgot: a's older task first
    assert restarted(saved) == 5
