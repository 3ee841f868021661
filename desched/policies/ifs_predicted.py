"""``ifs-predicted``: the IFS scorer with normalised wait replaced by predicted shortness."""

from __future__ import annotations

import heapq
from typing import ClassVar

import numpy as np
from pydantic import Field

from desched.policies.base import MAX_WEIGHT, NaivePolicy, Policy, PolicyParams
from desched.structures.ifs_kernel import PREDICTED, Call, KernelCacheState, kernel
from desched.structures.tenant_queues import TenantQueues
from desched.trace import TaskTable

_COMPACT_SLACK = 64


class IfsPredictedParams(PolicyParams):
    w_backlog: float = Field(0.1, ge=0, le=MAX_WEIGHT, description="weight of the normalised tenant backlog")
    w_short: float = Field(
        0.9, ge=0, le=MAX_WEIGHT, description="weight of the shortness 1 - predicted_s / max predicted_s"
    )


def shortness(p: float, p_max: float) -> float:
    """``1 - p / p_max``, and 0 where the maximum is 0."""
    return 1.0 - p / p_max if p_max > 0 else 0.0


class IfsPredictedNaive(NaivePolicy):
    """Reference: scores every queued task from scratch."""

    name = "ifs-predicted"
    summary = (
        "0.1 * normalised tenant backlog + 0.9 * (1 - predicted / max predicted), "
        "recomputed every poll"
    )
    Params = IfsPredictedParams
    components = ("norm_backlog", "norm_short")
    reads = frozenset({"predicted_s"})
    params: IfsPredictedParams

    def prepare(self, now: float) -> None:
        self.backlog = self.backlog_of()
        self.max_backlog = float(max(self.backlog.values()))
        self.p_max = max(self.tasks.predicted_s[i] for i in self.queue)

    def parts_of(self, i: int) -> tuple[float, float]:
        """The twin's own ``norm`` and ``shortness``."""
        backlog = self.backlog[self.tasks.tenant[i]]
        nb = backlog / self.max_backlog if self.max_backlog > 0 else 0.0
        p = self.tasks.predicted_s[i]
        return nb, (1.0 - p / self.p_max if self.p_max > 0 else 0.0)

    def key(self, i: int, now: float) -> tuple[float, ...]:
        nb, ns = self.parts_of(i)
        return (self.params.w_backlog * nb + self.params.w_short * ns, -self.tasks.submit_s[i], -i)

    def explain(self, i: int, now: float) -> tuple[float, tuple[float, ...]]:
        nb, ns = self.parts_of(i)
        return self.params.w_backlog * nb + self.params.w_short * ns, (nb, ns)


class IfsPredicted(KernelCacheState, Policy):
    """The IFS scorer ranking on predicted remaining time instead of wait (DESIGN.md, Q3).

    Rule: ``score = w_backlog * backlog_k / max backlog + w_short * (1 - p_i / p_max)`` with
    ``p = predicted_s`` and ``p_max`` the largest over all queued tasks (the term is 0 when
    ``p_max`` is 0), highest wins, ties to the earlier ``submit_s`` then position.
    State: none that outlives a decision.

    Cost: every float operation from ``p`` to the score is monotone (``p / p_max``, then
    ``1 - q``, then ``w * x``, then ``c + y``), so within a tenant, which shares the backlog
    term, the score never increases with ``p``: only the head of each tenant by
    ``(predicted_s, submit_s, position)`` can win. A decision is O(K) vectorised work over
    the K backlogged tenants, O(log n) for ``p_max`` (a max-heap with lazy deletion, rebuilt
    when entries of tasks that left outnumber the queued ones: amortised O(1)) and O(log m)
    for the tenant heap. Rounding can give a larger ``p`` of the same tenant the same score;
    the next larger distinct ``p`` of the winning tenants (kept per tenant) detects it in
    O(1), and only then are that tenant's tied tasks visited (all of its tasks when
    ``w_short`` is 0), so the choice among equal scores is the naive one.
    ``pop_fitting`` pops and pushes back: one pop when the first candidate fits; for s
    refused, s + 1 pops, s + 1 pushes and a ``take`` of the winner (which logs its score
    among all queued tasks).
    """

    name = "ifs-predicted"
    summary = IfsPredictedNaive.summary
    Params = IfsPredictedParams
    components = IfsPredictedNaive.components
    reads = IfsPredictedNaive.reads
    naive = IfsPredictedNaive
    requeue_is_exact = True
    use_kernel: ClassVar[bool] = True  # the compiled scan (desched.structures.ifs_kernel)
    params: IfsPredictedParams

    def __init__(self, tasks: TaskTable, params: PolicyParams | None = None) -> None:
        super().__init__(tasks, params)
        s = tasks.submit_s
        pred = tasks.predicted_s
        self.queues = TenantQueues(tasks, lambda i: (pred[i], s[i]))
        self.distinct: dict[int, list[float]] = {}
        self.count: dict[int, dict[float, int]] = {}
        self.neg_pred: list[float] = []
        self.left_pred: dict[float, int] = {}

    def __len__(self) -> int:
        return len(self.queues)

    def push(self, i: int, now: float) -> None:
        self.queues.push(i)
        k = self.tasks.tenant[i]
        p = self.tasks.predicted_s[i]
        counts = self.count.setdefault(k, {})
        c = counts.get(p, 0)
        if c == 0:
            heapq.heappush(self.distinct.setdefault(k, []), p)
        counts[p] = c + 1
        heapq.heappush(self.neg_pred, -p)
        if len(self.neg_pred) > 2 * len(self.queues) + _COMPACT_SLACK:
            self._compact()

    def _compact(self) -> None:
        """Rebuild the heap of predictions from the queued tasks' (``count``), dropping the
        entries of tasks that left: memory-aware dispatch pushes refused candidates back, so
        without this the heap would grow with every skip. O(n), amortised O(1) per push."""
        self.neg_pred = [-p for counts in self.count.values() for p, c in counts.items()
                         for _ in range(c)]
        heapq.heapify(self.neg_pred)
        self.left_pred = {}

    def p_max(self) -> float:
        """The largest queued ``predicted_s``; drops the heap tops that already left."""
        heap, left = self.neg_pred, self.left_pred
        while True:
            p = -heap[0]
            c = left.get(p, 0)
            if c == 0:
                return p
            if c == 1:
                del left[p]
            else:
                left[p] = c - 1
            heapq.heappop(heap)

    def pop(self, now: float) -> int:
        q = self.queues
        n = q.n
        w_backlog, w_short = self.params.w_backlog, self.params.w_short
        p_max = self.p_max()
        fn = kernel() if self.use_kernel else None
        if fn is not None:
            if self.__dict__.get("_call_of") is not q.backlog:  # new arrays, or a copy
                self._call_of = q.backlog
                self._call = Call(fn[PREDICTED], q.backlog.ctypes.data,
                                  q.head_submit.ctypes.data, q.head_pos.ctypes.data,
                                  q.head_pred.ctypes.data)
            first = self._call(n, now, (p_max, w_backlog, w_short, 0.0))
            out = self._call.out
            if out[4] == 1.0:  # one slot scores best (else: the numpy path lists them)
                only = self._best_of_tenant(int(q.tenant[first]), first, out[0], out[1], p_max)
                return self._finish(only, out[0], out[1], p_max)
        backlog = q.backlog[:n]
        norm_backlog = backlog / backlog[backlog.argmax()]
        if p_max > 0:
            norm_short = 1.0 - q.head_pred[:n] / p_max
        else:
            norm_short = np.zeros(n)
        score = w_backlog * norm_backlog + w_short * norm_short
        first = int(score.argmax())
        best = score[first]
        equal = score == best
        slots = [first] if np.count_nonzero(equal) == 1 else np.flatnonzero(equal).tolist()
        pick: tuple[float, int, int] | None = None
        for slot in slots:
            k = int(q.tenant[slot])
            cand = self._best_of_tenant(k, slot, float(best), float(norm_backlog[slot]), p_max)
            if pick is None or cand < pick:
                pick = cand
        assert pick is not None
        return self._finish(pick, float(best), float(norm_backlog[pick[2]]), p_max)

    def _finish(self, pick: tuple[float, int, int], best: float, nb: float, p_max: float) -> int:
        """Log the winner's score and parts and take it off the queue."""
        q = self.queues
        _, i, slot = pick
        k = self.tasks.tenant[i]
        p = self.tasks.predicted_s[i]
        self.score = best
        self.parts = (nb, shortness(p, p_max))
        if i == q.head_pos[slot]:
            q.pop_tenant(k)
        else:
            self._remove_inside(k, slot, i)
        self._forget(k, p)
        return i

    def take(self, i: int, now: float) -> None:
        """Score ``i`` as a pop that chose it would, then remove it: O(K) for the backlog
        maximum, O(log n) amortised for ``p_max``, O(log m), or O(m) when ``i`` is not its
        tenant's head."""
        q = self.queues
        k = self.tasks.tenant[i]
        p = self.tasks.predicted_s[i]
        slot = q.slot_of[k]
        nb = float(q.backlog[slot] / q.backlog[: q.n].max())
        ns = shortness(p, self.p_max())
        self.score = self.params.w_backlog * nb + self.params.w_short * ns
        self.parts = (nb, ns)
        q.remove(i)
        self._forget(k, p)

    def remove(self, i: int, now: float) -> None:
        """O(log m), or O(m) when ``i`` is not its tenant's head; O(1) for ``p_max``."""
        self.queues.remove(i)
        self._forget(self.tasks.tenant[i], self.tasks.predicted_s[i])

    def _best_of_tenant(
        self, k: int, slot: int, best: float, nb: float, p_max: float
    ) -> tuple[float, int, int]:
        """``(submit_s, position, slot)`` of tenant ``k``'s earliest task scoring ``best``.

        Precondition: the tenant's head scores ``best``. Larger ``p`` score no more than
        smaller ones, so when the next distinct ``p`` scores less, the head is the answer.
        """
        q = self.queues
        head = (float(q.head_submit[slot]), int(q.head_pos[slot]), slot)
        distinct = self.distinct[k]
        if len(distinct) == 1:
            return head
        second = distinct[1] if len(distinct) == 2 else min(distinct[1], distinct[2])
        w_backlog, w_short = self.params.w_backlog, self.params.w_short
        if w_backlog * nb + w_short * shortness(second, p_max) != best:
            return head
        heap = q.heaps[k]
        found = head
        todo = [0]
        while todo:
            x = todo.pop()
            p, s, i = heap[x]
            if w_backlog * nb + w_short * shortness(p, p_max) != best:
                continue
            if (s, i) < found[:2]:
                found = (s, i, slot)
            todo.extend(c for c in (2 * x + 1, 2 * x + 2) if c < len(heap))
        return found

    def _remove_inside(self, k: int, slot: int, i: int) -> None:
        """Remove task ``i``, not the head, from tenant ``k``'s heap (rounding ties only)."""
        q = self.queues
        heap = q.heaps[k]
        x = next(x for x, entry in enumerate(heap) if entry[-1] == i)
        heap[x] = heap[-1]
        heap.pop()
        heapq.heapify(heap)
        q.size -= 1
        q.backlog[slot] -= 1.0

    def _forget(self, k: int, p: float) -> None:
        """Task of tenant ``k`` with prediction ``p`` left the queue."""
        self.left_pred[p] = self.left_pred.get(p, 0) + 1
        counts = self.count[k]
        c = counts[p] - 1
        if c:
            counts[p] = c
            return
        del counts[p]
        if not counts:
            del self.count[k]
            del self.distinct[k]
            return
        distinct = self.distinct[k]
        if distinct[0] == p:
            heapq.heappop(distinct)
        else:
            distinct.remove(p)
            heapq.heapify(distinct)
