"""``round-robin``: one task per backlogged tenant in turn (Hatchet's ``GROUP_ROUND_ROBIN``)."""

from __future__ import annotations

from collections import deque
from typing import Any

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

    def state(self) -> dict[str, Any] | None:
        names = self.tasks.tenant_names
        backlogged = {self.tasks.tenant[j] for j in self.queue}
        return {"ring": [names[k] for k in sorted(backlogged, key=self.stamp.__getitem__)]}

    def restore(self, state: dict[str, Any]) -> None:
        backlogged = {self.tasks.tenant[j] for j in self.queue}
        listed = [self.tasks.tenant_code(str(name)) for name in state["ring"]]
        first = [k for k in listed if k in backlogged]
        rest = sorted(backlogged - set(first), key=self.stamp.__getitem__)
        for k in first + rest:
            self._restamp(k)


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

    def state(self) -> dict[str, Any] | None:
        """The ring, front first."""
        names = self.tasks.tenant_names
        return {"ring": [names[k] for k in self.ring]}

    def restore(self, state: dict[str, Any]) -> None:
        """Backlogged tenants named in the saved ring go first, in its order; the others
        keep their order behind them."""
        listed = [self.tasks.tenant_code(str(name)) for name in state["ring"]]
        present = set(self.ring)
        first = [k for k in dict.fromkeys(listed) if k in present]
        chosen = set(first)
        self.ring = deque(first + [k for k in self.ring if k not in chosen])
