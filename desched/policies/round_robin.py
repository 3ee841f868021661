"""``round-robin``: one task per backlogged tenant in turn (Hatchet's ``GROUP_ROUND_ROBIN``)."""

from __future__ import annotations

from collections import deque

from desched.policies.base import NaivePolicy, Policy, PolicyParams, TenantQueues
from desched.trace import TaskTable


class RoundRobinNaive(NaivePolicy):
    """Reference: each tenant carries a stamp, the value of a global clock when it became
    backlogged or was last served; the backlogged tenant with the smallest stamp serves its
    oldest task. Finding the backlogged tenants rescans the queue on every push and pop.
    """

    name = "round-robin"
    summary = "one task per backlogged tenant in turn, oldest task first within a tenant"
    components = ()

    def __init__(self, tasks: TaskTable, params: PolicyParams | None = None) -> None:
        super().__init__(tasks, params)
        self.clock = 0
        self.stamp: dict[int, int] = {}

    def _is_backlogged(self, k: int) -> bool:
        tenant = self.tasks.tenant
        return any(tenant[j] == k for j in self.queue)

    def _restamp(self, k: int) -> None:
        self.clock += 1
        self.stamp[k] = self.clock

    def push(self, i: int, now: float) -> None:
        k = self.tasks.tenant[i]
        if not self._is_backlogged(k):
            self._restamp(k)
        super().push(i, now)

    def key(self, i: int, now: float) -> tuple[float, ...]:
        return (-self.stamp[self.tasks.tenant[i]], -self.tasks.submit_s[i], -i)

    def explain(self, i: int, now: float) -> tuple[float, tuple[float, ...]]:
        return now - self.tasks.submit_s[i], ()

    def taken(self, i: int, now: float) -> None:
        self._restamp(self.tasks.tenant[i])


class RoundRobin(Policy):
    """Round robin across tenants, as Hatchet's ``GROUP_ROUND_ROBIN`` concurrency strategy.

    Rule: the backlogged tenants form a ring in the order they became backlogged. A pop serves
    the front tenant's oldest task (earliest ``(submit_s, position)``); that tenant then goes
    to the back if it still has queued tasks and leaves the ring otherwise. A tenant that
    becomes backlogged again joins at the back. Task sizes are ignored: tenants get equal
    turns, not equal service. State: the ring and one heap of queued tasks per tenant.
    Cost: O(log m) per push and pop for a tenant with m queued tasks, O(1) for the ring.
    Score logged: the winner's wait.
    """

    name = "round-robin"
    summary = RoundRobinNaive.summary
    components = RoundRobinNaive.components
    naive = RoundRobinNaive

    def __init__(self, tasks: TaskTable, params: PolicyParams | None = None) -> None:
        super().__init__(tasks, params)
        s = tasks.submit_s
        self.queues = TenantQueues(tasks, lambda i: (s[i],))
        self.ring: deque[int] = deque()

    def __len__(self) -> int:
        return len(self.queues)

    def push(self, i: int, now: float) -> None:
        k = self.tasks.tenant[i]
        if not self.queues.is_backlogged(k):
            self.ring.append(k)
        self.queues.push(i)

    def pop(self, now: float) -> int:
        k = self.ring.popleft()
        i = self.queues.pop_tenant(k)
        if self.queues.is_backlogged(k):
            self.ring.append(k)
        self.score = now - self.tasks.submit_s[i]
        return i
