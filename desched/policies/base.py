"""The policy contract, shared by the simulator and the live service.

A policy only ranks. The caller owns time (every method takes ``now``), the task table and
the workers; the policy keeps whatever index it needs over the tasks it was given with
``push`` and hands back one of them on ``pop``. Completion records reach it through
``complete``. ``score`` and ``parts`` describe the last decision for the decision log.

Every fast policy names its naive twin in ``naive``: a ``NaivePolicy`` that rescans the whole
queue on every pop and must give the identical decision sequence.

Memory-aware dispatch (the live service) asks for the first choice, in the policy's order,
among the tasks that fit a worker: ``pop_fitting(now, fits, limit)``. Its winner is the
first task of the sequence of successive pops from the current state that ``fits`` accepts,
looking at no more than ``limit`` candidates that ``fits`` refuses. Afterwards the state,
``score`` and ``parts`` included, is exactly what ``take(winner, now)`` gives from the
current state: the refused candidates stay queued and no per-tenant state moves for them (a
round-robin tenant keeps its turn, a VTC tenant is not charged). When nothing fits, nothing
changes. ``take(i, now)`` dispatches one queued task: the state change of a ``pop`` that
chose ``i``. ``pop(now)`` is ``pop_fitting`` with a ``fits`` that accepts everything.
"""

from __future__ import annotations

import copy
import heapq
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict

from desched.trace import TaskTable

Fits = Callable[[int], bool]
"""Whether queued task ``i`` may be handed to the polling worker (``pop_fitting``)."""


def first_fitting(
    candidates: Iterable[int], fits: Fits, limit: int | None
) -> tuple[int | None, int]:
    """The first of ``candidates`` that ``fits`` accepts and how many it refused before it,
    or ``(None, refused)`` after ``limit`` refusals or when the candidates run out. A lazy
    ``candidates`` learns of a refusal by being asked for the next one."""
    refused = 0
    for i in candidates:
        if fits(i):
            return i, refused
        refused += 1
        if limit is not None and refused >= limit:
            break
    return None, refused


class PolicyParams(BaseModel):
    """Parameters of a policy; a policy without parameters uses this empty model."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Policy(ABC):
    """Ranks the queued tasks and hands one over per poll.

    Contract: ``pop`` is called only when ``len(self) > 0``; it removes and returns the
    position of the winner and sets ``score`` and ``parts`` (values of ``components``).
    ``now`` never decreases between calls.
    """

    name: ClassVar[str]
    summary: ClassVar[str]
    Params: ClassVar[type[PolicyParams]] = PolicyParams
    components: ClassVar[tuple[str, ...]] = ()
    reads: ClassVar[frozenset[str]] = frozenset()
    naive: ClassVar[type[Policy]]
    requeue_is_exact: ClassVar[bool] = False
    """True where ``pop`` and ``push`` change nothing but the queued set and a decision
    depends only on the queued set (not on the order of pushes), ``now`` and state that
    neither touches: pushing popped tasks back then restores the state exactly, so the
    default ``pop_fitting`` may pop candidates and push the refused ones back."""
    score_reads_queue: ClassVar[bool] = True
    """Whether a task's ``score`` and ``parts`` depend on the other queued tasks (maxima,
    backlogs); where not, the score a task gets in the pop sequence is the one ``take``
    gives, and ``pop_fitting_by_requeue`` needs no ``take``."""

    def __init__(self, tasks: TaskTable, params: PolicyParams | None = None) -> None:
        self.tasks = tasks
        self.params = params if params is not None else self.Params()
        self.score = math.nan
        self.parts: tuple[float, ...] = ()

    @abstractmethod
    def push(self, i: int, now: float) -> None:
        """Task ``i`` joins the queue at ``now``."""

    @abstractmethod
    def pop(self, now: float) -> int:
        """Remove and return the winner at ``now``."""

    @abstractmethod
    def __len__(self) -> int:
        """Number of queued tasks."""

    def complete(self, i: int, now: float, duration_s: float) -> None:
        """The completion record of task ``i`` (its real ``duration_s``) arrives at ``now``."""

    def take(self, i: int, now: float) -> None:
        """Dispatch queued task ``i``: remove it and apply exactly the state change a ``pop``
        that chose ``i`` would apply (charges, ring moves, ``last_left``, ...), and set
        ``score`` and ``parts`` to those such a pop would log."""
        raise NotImplementedError(f"{type(self).__name__} does not implement take")

    def pop_fitting(
        self, now: float, fits: Fits, limit: int | None = None
    ) -> tuple[int | None, int]:
        """``(winner, skipped)``: the first task of the pop sequence from the current state
        that ``fits`` accepts and the number of candidates refused before it, or
        ``(None, skipped)`` after ``limit`` refusals (``limit`` >= 1; None: no bound) or
        when the queue runs out. Afterwards the state is what ``take(winner, now)`` gives;
        when nothing fits it is unchanged (module docstring).

        This default pops and pushes back where ``requeue_is_exact``, and otherwise runs
        its ``pop_sequence`` (``pop_fitting_by_walk``; by default pops on a deep copy, the
        reference: O(size of the policy) per call). A stateful fast policy overrides it.
        """
        if self.requeue_is_exact:
            return self.pop_fitting_by_requeue(now, fits, limit)
        return self.pop_fitting_by_walk(now, fits, limit)

    def pop_sequence(self, now: float) -> Iterator[int]:
        """The tasks successive pops from the current state would give, in order, leaving
        this policy untouched. This default pops a deep copy of it (the task table shared),
        O(size of the policy) to start; round-robin and VTC walk copies of their ring or
        counters instead."""
        trial = copy.deepcopy(self, {id(self.tasks): self.tasks})
        while len(trial) > 0:
            yield trial.pop(now)

    def pop_fitting_by_walk(
        self, now: float, fits: Fits, limit: int | None = None
    ) -> tuple[int | None, int]:
        """``pop_fitting`` by its definition: the first task of ``pop_sequence`` that fits,
        then ``take`` of it here. Exact for any policy whose ``take`` and ``pop_sequence``
        are; the naive twins' implementation."""
        winner, skipped = first_fitting(self.pop_sequence(now), fits, limit)
        if winner is not None:
            self.take(winner, now)
        return winner, skipped

    def pop_fitting_by_requeue(
        self, now: float, fits: Fits, limit: int | None = None
    ) -> tuple[int | None, int]:
        """``pop_fitting`` for a policy that declares ``requeue_is_exact``: pops candidates,
        pushes the refused ones back and, where ``score_reads_queue``, pushes the winner
        back too and dispatches it with ``take``, so that it logs the score it has among
        all the queued tasks. Cost: one ``pop`` when the first candidate fits; for s refused,
        s + 1 pops, s pushes (and one push and one ``take``)."""
        if len(self) == 0:
            return None, 0
        logged = self.score, self.parts
        i = self.pop(now)
        if fits(i):
            return i, 0
        refused = [i]
        winner = None
        while len(self) > 0 and (limit is None or len(refused) < limit):
            i = self.pop(now)
            if fits(i):
                winner = i
                break
            refused.append(i)
        for j in refused:
            self.push(j, now)
        if winner is None:
            self.score, self.parts = logged
        elif self.score_reads_queue:
            self.push(winner, now)
            self.take(winner, now)
        return winner, len(refused)

    def state(self) -> dict[str, Any] | None:
        """What a restart of the live service should keep besides the queue: the per-tenant
        state (counters, turns), JSON-able and keyed by tenant name (codes differ between task
        tables); equal for a fast policy and its naive twin. None for a policy whose
        decisions depend only on the queued tasks."""
        return None

    def restore(self, state: dict[str, Any]) -> None:
        """Take back ``state()`` of an earlier instance with the same parameters, after the
        queued tasks were pushed: from then on it decides as that instance would have over
        the same queue. Tenants it names that this task table lacks are added to it."""


class NaivePolicy(Policy):
    """Reference implementation: a plain list, rescanned on every pop.

    Subclasses implement ``prepare`` (whole-queue quantities for this decision, computed by
    scanning), ``key`` (a total order, larger wins) and ``explain`` (score and parts).
    """

    def __init__(self, tasks: TaskTable, params: PolicyParams | None = None) -> None:
        super().__init__(tasks, params)
        self.queue: list[int] = []

    def push(self, i: int, now: float) -> None:
        self.queue.append(i)

    def __len__(self) -> int:
        return len(self.queue)

    def prepare(self, now: float) -> None:
        """Compute per-decision quantities by scanning ``self.queue``."""

    @abstractmethod
    def key(self, i: int, now: float) -> tuple[float, ...]:
        """Ranking key of queued task ``i``; the maximum wins and keys never tie."""

    @abstractmethod
    def explain(self, i: int, now: float) -> tuple[float, tuple[float, ...]]:
        """Score and parts of queued task ``i`` if it were dispatched now (by ``pop`` or
        ``take``), after ``prepare``."""

    def taken(self, i: int, now: float) -> None:
        """Hook after ``i`` left the queue (stateful policies charge here)."""

    def pop(self, now: float) -> int:
        self.prepare(now)
        best = max(self.queue, key=lambda i: self.key(i, now))
        self.score, self.parts = self.explain(best, now)
        self.queue.remove(best)
        self.taken(best, now)
        return best

    def take(self, i: int, now: float) -> None:
        self.prepare(now)
        self.score, self.parts = self.explain(i, now)
        self.queue.remove(i)
        self.taken(i, now)

    def backlog_of(self) -> dict[int, int]:
        """Queued tasks per tenant code, by a full scan."""
        counts: dict[int, int] = {}
        tenant = self.tasks.tenant
        for i in self.queue:
            counts[tenant[i]] = counts.get(tenant[i], 0) + 1
        return counts


TaskKey = Callable[[int], tuple[Any, ...]]


class TenantQueues:
    """Per-tenant heaps of queued tasks plus a dense array view of the backlogged tenants.

    Each tenant's heap is ordered by ``task_key(i) + (i,)``, so its head is the task that
    tenant would serve next. The first ``n`` entries of the arrays ``tenant``, ``backlog``,
    ``head_submit``, ``head_pos`` and ``head_pred`` describe the backlogged tenants in no
    particular order; fast policies compute on them with numpy. Cost: O(log m) per push and
    pop for a tenant with m queued tasks; O(1) to (de)activate a tenant (swap with the last).
    """

    def __init__(self, tasks: TaskTable, task_key: TaskKey) -> None:
        self.tasks = tasks
        self.task_key = task_key
        self.heaps: dict[int, list[tuple[Any, ...]]] = {}
        self.slot_of: dict[int, int] = {}
        self.n = 0
        self.size = 0
        cap = max(16, len(tasks.tenant_names))
        self.tenant = np.zeros(cap, dtype=np.int64)
        self.backlog = np.zeros(cap, dtype=np.float64)
        self.head_submit = np.zeros(cap, dtype=np.float64)
        self.head_pos = np.zeros(cap, dtype=np.int64)
        self.head_pred = np.zeros(cap, dtype=np.float64)

    def __len__(self) -> int:
        return self.size

    def _grow(self) -> None:
        cap = 2 * len(self.tenant)
        for name in ("tenant", "backlog", "head_submit", "head_pos", "head_pred"):
            old = getattr(self, name)
            new = np.zeros(cap, dtype=old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)

    def _set_head(self, slot: int, heap: list[tuple[Any, ...]]) -> None:
        i = heap[0][-1]
        self.head_submit[slot] = self.tasks.submit_s[i]
        self.head_pos[slot] = i
        self.head_pred[slot] = self.tasks.predicted_s[i]

    def push(self, i: int) -> int:
        """Queue task ``i``; returns its tenant's slot in the arrays."""
        k = self.tasks.tenant[i]
        entry = (*self.task_key(i), i)
        slot = self.slot_of.get(k)
        if slot is None:
            if self.n == len(self.tenant):
                self._grow()
            slot = self.n
            self.n += 1
            self.slot_of[k] = slot
            self.tenant[slot] = k
            self.backlog[slot] = 0.0
            heap = self.heaps[k] = [entry]
            self._set_head(slot, heap)
        else:
            heap = self.heaps[k]
            heapq.heappush(heap, entry)
            if heap[0] is entry:
                self._set_head(slot, heap)
        self.backlog[slot] += 1.0
        self.size += 1
        return slot

    def pop_tenant(self, k: int) -> int:
        """Remove and return the head task of backlogged tenant ``k``."""
        heap = self.heaps[k]
        i: int = heapq.heappop(heap)[-1]
        slot = self.slot_of[k]
        self.size -= 1
        if heap:
            self.backlog[slot] -= 1.0
            self._set_head(slot, heap)
            return i
        del self.heaps[k]
        del self.slot_of[k]
        last = self.n - 1
        if slot != last:
            moved = int(self.tenant[last])
            self.slot_of[moved] = slot
            for arr in (self.tenant, self.backlog, self.head_submit, self.head_pos, self.head_pred):
                arr[slot] = arr[last]
        self.n = last
        return i

    def remove(self, i: int) -> None:
        """Remove queued task ``i`` wherever it stands in its tenant's order: O(log m) when it
        is the head, else a C-speed scan for its entry (O(m) for m queued tasks of the
        tenant; only memory-aware dispatch takes a task that is not a head) and O(log m) to
        restore the heap."""
        k = self.tasks.tenant[i]
        heap = self.heaps[k]
        if heap[0][-1] == i:
            self.pop_tenant(k)
            return
        try:
            # task_key reads the task table's own float objects, so the entry compares equal
            # (by identity) even where a key is NaN.
            j = heap.index((*self.task_key(i), i))
        except ValueError:
            j = next(j for j, entry in enumerate(heap) if entry[-1] == i)
        heap_delete(heap, j)  # not the head: the head stays where it is
        self.backlog[self.slot_of[k]] -= 1.0
        self.size -= 1

    def in_order(self, k: int) -> Iterator[int]:
        """Backlogged tenant ``k``'s queued tasks in the order it serves them, without removing
        any: O(r log r) for the first r (a frontier over the heap's tree)."""
        heap = self.heaps[k]
        frontier = [(heap[0], 0)]
        while frontier:
            entry, j = heapq.heappop(frontier)
            yield entry[-1]
            for child in (2 * j + 1, 2 * j + 2):
                if child < len(heap):
                    heapq.heappush(frontier, (heap[child], child))

    def count(self, k: int) -> int:
        """Queued tasks of tenant ``k``."""
        heap = self.heaps.get(k)
        return 0 if heap is None else len(heap)

    def is_backlogged(self, k: int) -> bool:
        return k in self.slot_of

    def head(self, k: int) -> int:
        """Position of the task tenant ``k`` would serve next."""
        return int(self.heaps[k][0][-1])


def heap_delete(heap: list[Any], j: int) -> None:
    """Delete ``heap[j]`` from a ``heapq`` heap in O(log n): the last entry takes its place and
    moves up or down to where the heap order puts it."""
    last = heap.pop()
    if j == len(heap):
        return
    heap[j] = last
    moved = False
    while j > 0:
        parent = (j - 1) >> 1
        if not heap[j] < heap[parent]:
            break
        heap[j], heap[parent] = heap[parent], heap[j]
        j, moved = parent, True
    if moved:
        return
    n = len(heap)
    while (child := 2 * j + 1) < n:
        if child + 1 < n and heap[child + 1] < heap[child]:
            child += 1
        if not heap[child] < heap[j]:
            break
        heap[j], heap[child] = heap[child], heap[j]
        j = child


def pick_slot(score: np.ndarray, head_submit: np.ndarray, head_pos: np.ndarray) -> int:
    """Slot with the highest score; ties go to the earlier head submit, then position."""
    best = score.max()
    cands = np.flatnonzero(score == best)
    if len(cands) == 1:
        return int(cands[0])
    return int(min(cands, key=lambda j: (head_submit[j], head_pos[j])))
