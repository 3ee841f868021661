"""``fifo``: global first come, first served."""

from __future__ import annotations

import heapq

from desched.policies.base import NaivePolicy, Policy, PolicyParams
from desched.structures.heaps import heap_delete
from desched.trace import TaskTable


class FifoNaive(NaivePolicy):
    """Reference: the queued task with the earliest ``(submit_s, position)``."""

    name = "fifo"
    summary = "global first come, first served"
    components = ()

    def key(self, i: int, now: float) -> tuple[float, ...]:
        return (-self.tasks.submit_s[i], -i)

    def explain(self, i: int, now: float) -> tuple[float, tuple[float, ...]]:
        return now - self.tasks.submit_s[i], ()


class Fifo(Policy):
    """Global first come, first served: the earliest ``(submit_s, position)`` wins.

    Rule: order of arrival, which is the order of submission (DESIGN.md, Simulation).
    State: none per tenant. Cost: O(log n) per push and pop (a heap, so that a task handed
    back by the live service regains its place); ``pop_fitting`` pops and pushes back
    (O((s + 1) log n) for s refused candidates); ``take`` O(n). Score logged: the winner's
    wait.
    """

    name = "fifo"
    summary = FifoNaive.summary
    naive = FifoNaive
    requeue_is_exact = True
    score_reads_queue = False

    def __init__(self, tasks: TaskTable, params: PolicyParams | None = None) -> None:
        super().__init__(tasks, params)
        self.heap: list[tuple[float, int]] = []

    def __len__(self) -> int:
        return len(self.heap)

    def push(self, i: int, now: float) -> None:
        heapq.heappush(self.heap, (self.tasks.submit_s[i], i))

    def pop(self, now: float) -> int:
        submit, i = heapq.heappop(self.heap)
        self.score = now - submit
        return i

    def take(self, i: int, now: float) -> None:
        submit = self.tasks.submit_s[i]
        heap_delete(self.heap, self.heap.index((submit, i)))
        self.score = now - submit

    def remove(self, i: int, now: float) -> None:
        """O(n) to find the entry, O(log n) to delete it."""
        heap_delete(self.heap, self.heap.index((self.tasks.submit_s[i], i)))
