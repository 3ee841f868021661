"""Heap helpers over ``heapq`` lists."""

from __future__ import annotations

import heapq
from collections.abc import Collection, Sequence
from typing import Any


def without_task(heap: list[tuple[Any, ...]], i: int) -> list[tuple[Any, ...]]:
    """A ``heapq`` heap of ``(key, tiebreak, task)`` entries with every entry of task ``i``
    left out, heapified: O(n), for the rare purge of a lazily deleted task's leftovers (a
    task handed back, which would otherwise find its old entries alive)."""
    kept = [e for e in heap if e[2] != i]
    heapq.heapify(kept)
    return kept


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


class LazyWalk:
    """The live entries of a ``heapq`` list of tuples ending in a task position, in heap
    order, without touching the list: O(log k) per entry for the first k.

    An entry is live while its task is in ``live`` and not in the ``gone`` set passed to
    ``peek``; the caller adds the task it takes to ``gone``, and dead entries (tasks that
    left a lazily deleted heap) are passed over. The walk keeps a frontier heap of
    ``(entry, index)`` pairs: popping an entry pushes its two children in the list."""

    def __init__(self, heap: Sequence[tuple[Any, ...]], live: Collection[int]) -> None:
        self.heap = heap
        self.live = live
        self.frontier: list[tuple[tuple[Any, ...], int]] = [(heap[0], 0)] if heap else []

    def peek(self, gone: Collection[int]) -> tuple[Any, ...] | None:
        """The smallest entry whose task is live and not in ``gone``, or None."""
        heap, frontier = self.heap, self.frontier
        while frontier:
            entry, j = frontier[0]
            if entry[-1] in self.live and entry[-1] not in gone:
                return entry
            heapq.heappop(frontier)
            for c in (2 * j + 1, 2 * j + 2):
                if c < len(heap):
                    heapq.heappush(frontier, (heap[c], c))
        return None
