"""Heap helpers over ``heapq`` lists."""

from __future__ import annotations

import heapq
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
