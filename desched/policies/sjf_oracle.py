"""``sjf-oracle``: shortest true duration first, the clairvoyant reference.

Also home of the generic shortest-column-first policy that ``sjf-predicted`` reuses with
``predicted_s``.
"""

from __future__ import annotations

import heapq
from typing import ClassVar

from desched.policies.base import NaivePolicy, Policy, PolicyParams
from desched.structures.heaps import heap_delete
from desched.trace import TaskTable


class ShortestColumnFirstNaive(NaivePolicy):
    """Reference: the queued task with the smallest ``(column, submit_s, position)``."""

    column: ClassVar[str]

    def __init__(self, tasks: TaskTable, params: PolicyParams | None = None) -> None:
        super().__init__(tasks, params)
        self.values: list[float] = getattr(tasks, self.column)

    def key(self, i: int, now: float) -> tuple[float, ...]:
        return (-self.values[i], -self.tasks.submit_s[i], -i)

    def explain(self, i: int, now: float) -> tuple[float, tuple[float, ...]]:
        return self.values[i], ()


class ShortestColumnFirst(Policy):
    """Non-preemptive shortest job first on one per-task column of the task table.

    Rule: the smallest ``(column, submit_s, position)`` wins. State: none per tenant.
    Cost: O(log n) per push and pop (one heap); ``pop_fitting`` pops and pushes back
    (O((s + 1) log n) for s refused candidates); ``take`` and ``remove`` O(n). Score logged: the winner's
    column value. Subclasses set ``column`` and ``reads``.
    """

    column: ClassVar[str]
    requeue_is_exact = True
    score_reads_queue = False

    def __init__(self, tasks: TaskTable, params: PolicyParams | None = None) -> None:
        super().__init__(tasks, params)
        self.values: list[float] = getattr(tasks, self.column)
        self.heap: list[tuple[float, float, int]] = []

    def __len__(self) -> int:
        return len(self.heap)

    def push(self, i: int, now: float) -> None:
        heapq.heappush(self.heap, (self.values[i], self.tasks.submit_s[i], i))

    def pop(self, now: float) -> int:
        value, _, i = heapq.heappop(self.heap)
        self.score = value
        return i

    def take(self, i: int, now: float) -> None:
        heap_delete(self.heap, self.heap.index((self.values[i], self.tasks.submit_s[i], i)))
        self.score = self.values[i]

    def remove(self, i: int, now: float) -> None:
        """O(n) to find the entry, O(log n) to delete it."""
        heap_delete(self.heap, self.heap.index((self.values[i], self.tasks.submit_s[i], i)))


class SjfOracleNaive(ShortestColumnFirstNaive):
    """Reference for ``sjf-oracle``."""

    name = "sjf-oracle"
    summary = "shortest true duration first (clairvoyant reference), non-preemptive"
    column = "duration_s"
    reads = frozenset({"duration_s"})


class SjfOracle(ShortestColumnFirst):
    """Shortest true duration first, non-preemptive: the clairvoyant reference.

    Rule: the smallest ``(duration_s, submit_s, position)`` wins; it reads the true service
    time, which no live scheduler knows, so it bounds what a perfect predictor could give.
    Non-preemptive SJF minimises mean response among non-preemptive policies when all tasks
    are present (Smith's rule, 1956; Conway, Maxwell and Miller, *Theory of Scheduling*,
    1967). State: none per tenant. Cost: O(log n) per push and pop. Score logged: the
    winner's ``duration_s``.
    """

    name = "sjf-oracle"
    summary = SjfOracleNaive.summary
    column = SjfOracleNaive.column
    reads = SjfOracleNaive.reads
    naive = SjfOracleNaive
