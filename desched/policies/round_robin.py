"""``round-robin``: one task per backlogged tenant in turn (Hatchet's ``GROUP_ROUND_ROBIN``)."""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterator
from typing import Any

from desched.policies.base import (
    Fits,
    NaivePolicy,
    Policy,
    PolicyParams,
)
from desched.structures.tenant_queues import TenantQueues
from desched.trace import TaskTable


class RoundRobinNaive(NaivePolicy):
    """Reference: each tenant carries a stamp, the value of a global clock when it became
    backlogged or was last served; the backlogged tenant with the smallest stamp serves its
    oldest task. Finding the backlogged tenants rescans the queue on every push and pop.
    """

    name = "round-robin"
    summary = "one task per backlogged tenant in turn, oldest task first within a tenant"
    components = ()
    tenant_state = frozenset({"turn"})

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
    Cost: O(log m) per push and pop for a tenant with m queued tasks, O(1) for the ring;
    ``pop_fitting`` walks the ring without moving it and then takes the winner (O(K + m)).
    Score logged: the winner's wait.
    """

    name = "round-robin"
    summary = RoundRobinNaive.summary
    components = RoundRobinNaive.components
    tenant_state = RoundRobinNaive.tenant_state
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

    def take(self, i: int, now: float) -> None:
        """Serve ``i``: its tenant goes to the back of the ring (or leaves it); the tenants
        ahead of it keep their places. O(K + m) (ring and tenant-queue scans)."""
        k = self.tasks.tenant[i]
        self.queues.remove(i)
        self.ring.remove(k)
        if self.queues.is_backlogged(k):
            self.ring.append(k)
        self.score = now - self.tasks.submit_s[i]

    def remove(self, i: int, now: float) -> None:
        """Its tenant keeps its place in the ring, or leaves it when its queue empties.
        O(log m), or O(m) when ``i`` is not the tenant's head; O(K) when the tenant leaves."""
        k = self.tasks.tenant[i]
        self.queues.remove(i)
        if not self.queues.is_backlogged(k):
            self.ring.remove(k)

    def pop_fitting(
        self, now: float, fits: Fits, limit: int | None = None
    ) -> tuple[int | None, int]:
        """The pop sequence, walked without popping: the ring's tenants in turn, each
        offering its next task, a tenant going to the back of a copy of the ring after its
        offer. Then ``take`` of the winner. One ``pop`` when the front tenant's head fits."""
        if not self.ring:
            return None, 0
        if fits(self.queues.head(self.ring[0])):
            return self.pop(now), 0
        return self.pop_fitting_by_walk(now, fits, limit)

    skips_tenants = True

    def tenant_order(self, i: int) -> tuple[Any, ...]:
        """A tenant's tasks are served in ``task_key`` order, ties by position."""
        return (*self.queues.task_key(i), i)

    def pop_sequence(self, now: float, skip: Collection[int] = ()) -> Iterator[int]:
        """The tasks successive pops would give, in order, without popping any, the
        tenants in ``skip`` left out of the copy of the ring."""
        ring = deque(k for k in self.ring if k not in skip)
        offers: dict[int, Iterator[int]] = {}
        left = {k: self.queues.count(k) for k in ring}
        while ring:
            k = ring.popleft()
            if k not in offers:
                offers[k] = self.queues.in_order(k)
            yield next(offers[k])
            left[k] -= 1
            if left[k]:
                ring.append(k)

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
