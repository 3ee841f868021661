"""Per-tenant queues with a dense numpy view of the backlogged tenants, for policies that
score tenants by their head tasks."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from desched.structures.heaps import heap_delete
from desched.trace import TaskTable

TaskKey = Callable[[int], tuple[Any, ...]]


class TenantQueues:
    """Per-tenant heaps of queued tasks plus a dense array view of the backlogged tenants.

    Each tenant's heap is ordered by ``task_key(i) + (i,)``, so its head is the task that
    tenant would serve next. The first ``n`` entries of the arrays ``tenant``, ``backlog``,
    ``head_submit``, ``head_pos`` and ``head_pred`` describe the backlogged tenants in no
    particular order; fast policies compute on them with numpy (``extra`` holds per-slot
    arrays a policy adds, grown and moved with the others). Cost: O(log m) per push and
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
        # per-slot arrays a policy adds (name -> array): grown and moved with the slots
        self.extra: dict[str, np.ndarray] = {}

    def __len__(self) -> int:
        return self.size

    def _grow(self) -> None:
        cap = 2 * len(self.tenant)
        for name in ("tenant", "backlog", "head_submit", "head_pos", "head_pred"):
            old = getattr(self, name)
            new = np.zeros(cap, dtype=old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)
        for name, old in self.extra.items():
            new = np.zeros(cap, dtype=old.dtype)
            new[: len(old)] = old
            self.extra[name] = new

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
            for arr in self.extra.values():
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


def pick_slot(score: np.ndarray, head_submit: np.ndarray, head_pos: np.ndarray) -> int:
    """Slot with the highest score; ties go to the earlier head submit, then position.

    Precondition: no score is NaN."""
    # argmax and count_nonzero are direct C calls; max() and flatnonzero() go through the
    # ufunc and nonzero machinery, several microseconds on arrays of tens of elements
    first = int(score.argmax())
    best = score[first]
    equal = score == best
    if np.count_nonzero(equal) == 1:
        return first
    cands = np.flatnonzero(equal)
    return int(min(cands, key=lambda j: (head_submit[j], head_pos[j])))
