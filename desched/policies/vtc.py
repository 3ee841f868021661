"""``vtc``: Virtual Token Counter, least-served backlogged tenant first (Sheng et al., OSDI 2024).

Sheng, Cao, Li, Zhu, Li, Zhuo, Gonzalez, Stoica, "Fairness in Serving Large Language Models",
OSDI 2024 (arXiv:2401.00588), Algorithm 2; the authors' code is ``VTCReqQueue`` in
github.com/Ying1123/VTC-artifact (``slora/server/router/vtc_req_queue.py``). Service here is
seconds of worker time instead of weighted tokens.
"""

from __future__ import annotations

import heapq
import math
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

_COMPACT_SLACK = 64


class VirtualCounters:
    """One counter per tenant: seconds of service charged to it, with VTC's charge and lift rules.

    Charge (divided by the tenant's weight, ``TaskTable.charge``: weighted VTC): a task with
    a prediction (``predicted_s`` not NaN) is charged ``predicted_s`` when it is dispatched;
    a task without one is charged its real ``duration_s`` when its completion record
    arrives, so until then its tenant's counter does not move and the tenant can win several
    workers in a row. Lift (Algorithm 2, on the arrival of a request of a client that
    has none queued): a tenant that becomes backlogged has its counter raised to the lowest
    counter among the backlogged tenants; when none is backlogged, to the counter of the last
    tenant whose queue emptied ("the last client left Q"); a counter never goes down, so a
    tenant keeps its debt but loses credit banked while idle. The artifact's ``VTCReqQueue``
    leaves the counter unchanged in the no-backlog case; this follows the paper.
    Cost: O(1) per charge and lift, given the floor.
    """

    def __init__(self, tasks: TaskTable) -> None:
        self.tasks = tasks
        self.counter: dict[int, float] = {}
        self.last_left: int | None = None

    def of(self, k: int) -> float:
        return self.counter.get(k, 0.0)

    def lift(self, k: int, floor: float | None) -> None:
        """Tenant ``k`` becomes backlogged; ``floor`` is the lowest backlogged counter, if any."""
        if floor is None:
            if self.last_left is None:
                return
            floor = self.of(self.last_left)
        if floor > self.of(k):
            self.counter[k] = floor

    def left(self, k: int) -> None:
        """Tenant ``k``'s queue just became empty."""
        self.last_left = k

    def dispatched(self, i: int) -> None:
        """Task ``i`` starts: charge its prediction, if it has one."""
        predicted = self.tasks.predicted_s[i]
        if not math.isnan(predicted):
            k = self.tasks.tenant[i]
            self.counter[k] = self.of(k) + self.tasks.charge(k, predicted)

    def state(self) -> dict[str, Any]:
        names = self.tasks.tenant_names
        return {
            "counter": {names[k]: v for k, v in sorted(self.counter.items())},
            "last_left": None if self.last_left is None else names[self.last_left],
        }

    def restore(self, state: dict[str, Any]) -> None:
        code = self.tasks.tenant_code
        self.counter = {code(str(name)): float(v) for name, v in state["counter"].items()}
        last = state["last_left"]
        self.last_left = None if last is None else code(str(last))

    def completed(self, i: int, duration_s: float) -> bool:
        """Task ``i`` finished after ``duration_s``: charge it if it had no prediction.

        Returns whether a counter changed.
        """
        if not math.isnan(self.tasks.predicted_s[i]):
            return False
        k = self.tasks.tenant[i]
        self.counter[k] = self.of(k) + self.tasks.charge(k, duration_s)
        return True


class VtcNaive(NaivePolicy):
    """Reference: the queued task with the smallest ``(counter of its tenant, task_key, position)``.

    Written from the rules of ``VirtualCounters`` again, sharing none of its code: its own
    counters in a dict, the backlogged tenants (for the lift, and for whether a tenant's
    queue emptied) found by rescanning the queue.
    """

    name = "vtc"
    summary = "least-served backlogged tenant first (virtual counter of service seconds)"
    components = ()
    optional_reads = frozenset({"predicted_s"})
    tenant_state = frozenset({"service"})

    def __init__(self, tasks: TaskTable, params: PolicyParams | None = None) -> None:
        super().__init__(tasks, params)
        self.counter: dict[int, float] = {}
        self.last_left: int | None = None

    def task_key(self, i: int) -> tuple[float, ...]:
        """Order within a tenant, smallest first (the position breaks ties)."""
        return (self.tasks.submit_s[i],)

    def backlogged(self) -> set[int]:
        tenant = self.tasks.tenant
        return {tenant[j] for j in self.queue}

    def add(self, k: int, seconds: float) -> None:
        """Charge tenant ``k`` ``seconds`` of service, divided by its weight if it has one."""
        w = self.tasks.tenant_weight.get(k)
        self.counter[k] = self.counter.get(k, 0.0) + (seconds if w is None else seconds / w)

    def push(self, i: int, now: float) -> None:
        k = self.tasks.tenant[i]
        others = self.backlogged()
        if k not in others:
            if others:
                floor: float | None = min(self.counter.get(j, 0.0) for j in others)
            elif self.last_left is not None:
                floor = self.counter.get(self.last_left, 0.0)
            else:
                floor = None
            if floor is not None and floor > self.counter.get(k, 0.0):
                self.counter[k] = floor
        super().push(i, now)

    def key(self, i: int, now: float) -> tuple[float, ...]:
        rank = (self.counter.get(self.tasks.tenant[i], 0.0), *self.task_key(i), i)
        return tuple(-x for x in rank)

    def explain(self, i: int, now: float) -> tuple[float, tuple[float, ...]]:
        return self.counter.get(self.tasks.tenant[i], 0.0), ()

    def taken(self, i: int, now: float) -> None:
        k = self.tasks.tenant[i]
        p = self.tasks.predicted_s[i]
        if not math.isnan(p):  # charged at dispatch
            self.add(k, p)
        if k not in self.backlogged():
            self.last_left = k

    def removed(self, i: int, now: float) -> None:
        k = self.tasks.tenant[i]
        if k not in self.backlogged():
            self.last_left = k

    def complete(self, i: int, now: float, duration_s: float) -> None:
        p = self.tasks.predicted_s[i]
        if math.isnan(p):  # no prediction: charged its real duration now
            self.add(self.tasks.tenant[i], duration_s)

    def state(self) -> dict[str, Any] | None:
        names = self.tasks.tenant_names
        return {
            "counter": {names[k]: self.counter[k] for k in sorted(self.counter)},
            "last_left": None if self.last_left is None else names[self.last_left],
        }

    def restore(self, state: dict[str, Any]) -> None:
        code = self.tasks.tenant_code
        self.counter = {code(str(n)): float(v) for n, v in state["counter"].items()}
        last = state["last_left"]
        self.last_left = None if last is None else code(str(last))


HeapEntry = tuple[Any, ...]
"""``(counter, *task_key of the head, head position, tenant, version)``."""


class Vtc(Policy):
    """Virtual Token Counter (Sheng et al., OSDI 2024, Algorithm 2) over seconds of service.

    Rule: serve the backlogged tenant with the lowest counter; ties go to the tenant whose
    next task has the smaller ``(task_key, position)``; that tenant serves its oldest task
    (``task_key`` is ``submit_s``). Charge and lift rules: ``VirtualCounters``.
    State: one counter per tenant, the last tenant whose queue emptied, one heap of queued
    tasks per tenant, and a heap of backlogged tenants keyed by ``(counter, task_key of the
    head, head position)`` with lazy invalidation (a version per tenant: every counter or
    head change pushes a fresh entry). Cost: O(log K + log m) amortised per push, pop and
    completion for K backlogged tenants and m queued tasks of the tenant; the heap of tenants
    is rebuilt when stale entries outnumber live ones (amortised O(1)). ``pop_fitting`` walks
    the pop sequence without moving any counter and then takes the winner; ``take`` of a
    task that is not its tenant's head costs O(m). Score logged: the winner's counter before
    this decision's charge.
    """

    name = "vtc"
    summary = VtcNaive.summary
    components = VtcNaive.components
    optional_reads = VtcNaive.optional_reads
    tenant_state = VtcNaive.tenant_state
    naive = VtcNaive

    def __init__(self, tasks: TaskTable, params: PolicyParams | None = None) -> None:
        super().__init__(tasks, params)
        self.counters = VirtualCounters(tasks)
        self.queues = TenantQueues(tasks, self.task_key)
        self.heap: list[HeapEntry] = []
        self.version: dict[int, int] = {}

    def task_key(self, i: int) -> tuple[float, ...]:
        """Order within a tenant, smallest first (the position breaks ties)."""
        return (self.tasks.submit_s[i],)

    def __len__(self) -> int:
        return len(self.queues)

    def _enter(self, k: int) -> None:
        """(Re)file backlogged tenant ``k`` under its current counter and head."""
        v = self.version.get(k, 0) + 1
        self.version[k] = v
        h = self.queues.head(k)
        heapq.heappush(self.heap, (self.counters.of(k), *self.task_key(h), h, k, v))

    def _top(self) -> HeapEntry | None:
        """The live entry of the lowest-ranked backlogged tenant, dropping stale ones."""
        heap, version = self.heap, self.version
        while heap:
            entry = heap[0]
            if version[entry[-2]] == entry[-1]:
                return entry
            heapq.heappop(heap)
        return None

    def push(self, i: int, now: float) -> None:
        k = self.tasks.tenant[i]
        q = self.queues
        if not q.is_backlogged(k):
            top = self._top()
            self.counters.lift(k, None if top is None else top[0])
            q.push(i)
            self._enter(k)
            return
        q.push(i)
        if q.head(k) == i:
            self._enter(k)

    def pop(self, now: float) -> int:
        entry = self._top()
        assert entry is not None, "pop on an empty queue"
        heapq.heappop(self.heap)
        k: int = entry[-2]
        q = self.queues
        i = q.pop_tenant(k)
        self.score = entry[0]
        self.counters.dispatched(i)
        self._served(k)
        return i

    def _served(self, k: int) -> None:
        """Tenant ``k`` was just served (and charged) or had a task withdrawn: refile it, or
        note that it left."""
        q = self.queues
        if q.is_backlogged(k):
            self._enter(k)
        else:
            self.version[k] += 1
            self.counters.left(k)
        if len(self.heap) > 2 * q.n + _COMPACT_SLACK:
            version = self.version
            self.heap = [e for e in self.heap if version[e[-2]] == e[-1]]
            heapq.heapify(self.heap)

    def take(self, i: int, now: float) -> None:
        """Serve ``i`` (any queued task, not only a head): charge and refile its tenant as a
        pop would. O(log K + m) for m queued tasks of the tenant."""
        k = self.tasks.tenant[i]
        self.score = self.counters.of(k)
        self.queues.remove(i)
        self.counters.dispatched(i)
        self._served(k)

    def remove(self, i: int, now: float) -> None:
        """Withdraw ``i`` uncharged; its tenant is refiled (or has left). O(log K + log m),
        or O(m) when ``i`` is not its tenant's head."""
        self.queues.remove(i)
        self._served(self.tasks.tenant[i])

    def pop_fitting(
        self, now: float, fits: Fits, limit: int | None = None
    ) -> tuple[int | None, int]:
        """The pop sequence, walked without popping: a heap of the backlogged tenants on
        copies of their counters, each refused candidate charged to the copy only (so that
        the walk orders the later candidates as successive pops would), each tenant
        offering its tasks in order. Then ``take`` of the winner, which logs its tenant's
        real counter. One ``pop`` when the first candidate fits; else O(K) to copy the live
        entries plus O(log K + log r) per candidate for r of a tenant's tasks offered."""
        top = self._top()
        if top is None:
            return None, 0
        if fits(top[-3]):
            return self.pop(now), 0
        return self.pop_fitting_by_walk(now, fits, limit)

    skips_tenants = True

    def tenant_order(self, i: int) -> tuple[Any, ...]:
        """A tenant's tasks are served in ``task_key`` order, ties by position."""
        return (*self.queues.task_key(i), i)

    def pop_sequence(self, now: float, skip: Collection[int] = ()) -> Iterator[int]:
        """The tasks successive pops would give, in order, without popping any: each one
        handed out is charged to a copy of its tenant's counter before the next. The
        tenants in ``skip`` are left out of the walk (no other tenant's place depends on
        theirs)."""
        version = self.version
        heap = [e[:-1] for e in self.heap if version[e[-2]] == e[-1] and e[-2] not in skip]
        heapq.heapify(heap)
        offers: dict[int, Iterator[int]] = {}
        left: dict[int, int] = {}
        predicted = self.tasks.predicted_s
        while heap:
            entry = heapq.heappop(heap)
            counter, i, k = entry[0], entry[-2], entry[-1]
            if k not in offers:
                offers[k] = self.queues.in_order(k)
                next(offers[k])  # the head, i
                left[k] = self.queues.count(k)
            yield i
            left[k] -= 1
            if left[k]:
                if not math.isnan(predicted[i]):
                    counter += self.tasks.charge(k, predicted[i])
                h = next(offers[k])
                heapq.heappush(heap, (counter, *self.task_key(h), h, k))

    def complete(self, i: int, now: float, duration_s: float) -> None:
        k = self.tasks.tenant[i]
        if self.counters.completed(i, duration_s) and self.queues.is_backlogged(k):
            self._enter(k)

    def state(self) -> dict[str, Any] | None:
        return self.counters.state()

    def restore(self, state: dict[str, Any]) -> None:
        """Counters from ``state``; every backlogged tenant is refiled under its new one."""
        self.counters.restore(state)
        self.heap = []
        for k in self.queues.heaps:
            self._enter(k)
