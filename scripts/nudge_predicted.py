"""``nudge-predicted``, a candidate for issue 19: Nudge-M (Charlet & Van Houdt, 2024; after
Nudge, Grosof, Yang, Scully & Harchol-Balter, SIGMETRICS 2021) on predicted sizes. Not
registered: run

    .venv/bin/python -m scripts.nudge_predicted --out data/judge-nudge

to register it in this process and run ``desched judge --set dev --jobs 1`` on it beside
``boost-ledger`` at four values of ``m`` (its own judge options may follow).

Why. Issue 19 names Nudge as what the queueing literature knows about beating first-come-
first-served on the mean *and* the tail: first-come, except that a small task arriving behind
a large one swaps with it. Nudge-M widens the swap: an arriving type-1 task passes every
type-2 task still queued that arrived as one of the last ``M`` tasks. Every candidate so far
(the γ-Boost line, guarded shortest-first, HRRN) lets a task predicted short overtake
*without bound in count*, and the harm to tenants comes from under-predicted long tasks that
overtake and then block. Under Nudge-M a task is overtaken only by tasks that arrived after
it and within ``M`` arrivals of it, so what any task loses is bounded by construction,
whatever the predictions, and no task is ever passed by one that arrived more than ``M``
arrivals later.

The rule, fixed and committed before any run of this candidate (every constant below):

- *Arrival number.* ``a``: how many distinct tasks were pushed before this one (a task pushed
  again, handed back by the live service, keeps its first ``a`` and type).
- *Type.* Type 1 ("small") when ``predicted_s`` is strictly below the lower median
  (``sorted(w)[(len(w) - 1) // 2]``) of the finite ``predicted_s`` of the previous
  ``WINDOW = 256`` distinct pushed tasks that had one; type 2 otherwise (and always while
  that window is empty, and for a task without a finite ``predicted_s``, which does not enter
  the window). Fixed at the first push.
- *Order.* First come, first served, except that a type-1 task arriving passes every queued
  type-2 task whose arrival number is at least ``a - m``; type-1 tasks keep their arrival
  order among themselves, as type-2 tasks do. Equivalently, the smallest key wins, with key
  ``2a`` for type 2 and ``2(a - m) - 1`` for type 1 (keys never tie).
- *Score logged.* The winner's wait; part ``small``: 1 for type 1, 0 for type 2.
- *m.* Run at ``m`` 4, 16, 64 and 256 (``frontier_grid``, so the clairvoyant family gains
  the same four points, typed by the true sizes); the default is the value the
  recommendation rule (``desched.bench.rule``) ranks first on the development logs. The
  held-back logs are run once, after the default is fixed, and only if it ranks above
  ``boost-ledger`` on the development logs.

What we expect, written before the run: the p99 and worst-tenant promises hold at ``m`` 4
and 16 on every log (a task loses at most ``m`` places), and the gain grows with ``m``; at
``m`` 4 it may fall under the gain floor (0.1 of the oracle's gain), since the HPC logs'
oracle gain comes from letting short jobs pass many long ones. At ``m`` 256 the order is
close to a two-class priority and LLNL-Thunder's Jain's index falls as it does under the
other shortest-first candidates. Whether some ``m`` keeps the promises on more workloads
than ``boost-ledger``'s four of six, and at what share, we do not know.

The fast class keeps the static keys in a heap; its naive twin keeps the queue as a list and
inserts an arriving type-1 task by walking back from the end of the list past the type-2
tasks of the last ``m`` arrivals, as the papers describe the swap (it shares no rule code
with the fast class).
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import deque
from collections.abc import Mapping
from typing import ClassVar

from desched.policies.base import Policy, PolicyParams
from desched.structures.heaps import heap_delete
from desched.trace import TaskTable

WINDOW = 256
"""Distinct pushed tasks whose predictions set the small/large threshold (fixed before any
run)."""

M_GRID = (4, 16, 64, 256)


class NudgeParams(PolicyParams):
    m: int = 16
    """How many of the latest arrivals an arriving small task may pass (large ones only)."""

    frontier_grid: ClassVar[tuple[Mapping[str, float], ...]] = tuple(
        {"m": m} for m in M_GRID)


def _check(params: NudgeParams) -> None:
    if params.m < 0:
        raise ValueError(f"nudge-predicted: m must be >= 0, got {params.m}")


class NudgePredicted(Policy):
    """Nudge-M on predicted sizes (module docstring). Cost: O(log n) per push and pop, plus
    O(WINDOW) per first push for the sorted window; ``take`` and ``remove`` O(n)."""

    name = "nudge-predicted"
    summary = "first come, first served; a task predicted small passes the large ones of the last m arrivals"
    Params = NudgeParams
    components = ("small",)
    reads = frozenset({"predicted_s"})
    requeue_is_exact = True
    score_reads_queue = False

    def __init__(self, tasks: TaskTable, params: PolicyParams | None = None) -> None:
        super().__init__(tasks, params)
        assert isinstance(self.params, NudgeParams)
        _check(self.params)
        self.heap: list[tuple[int, int]] = []
        self.key: dict[int, int] = {}
        self.arrivals = 0
        self.recent: deque[float] = deque()
        self.sorted_recent: list[float] = []

    def __len__(self) -> int:
        return len(self.heap)

    def _first_key(self, i: int) -> int:
        a = self.arrivals
        self.arrivals += 1
        p = self.tasks.predicted_s[i]
        w = self.sorted_recent
        small = bool(w) and p < w[(len(w) - 1) // 2]
        if math.isfinite(p):
            self.recent.append(p)
            bisect.insort(w, p)
            if len(self.recent) > WINDOW:
                old = self.recent.popleft()
                del w[bisect.bisect_left(w, old)]
        return 2 * (a - self.params.m) - 1 if small else 2 * a  # type: ignore[attr-defined]

    def push(self, i: int, now: float) -> None:
        k = self.key.get(i)
        if k is None:
            k = self.key[i] = self._first_key(i)
        heapq.heappush(self.heap, (k, i))

    def _log(self, i: int, k: int, now: float) -> None:
        self.score = now - self.tasks.submit_s[i]
        self.parts = (float(k & 1),)

    def pop(self, now: float) -> int:
        k, i = heapq.heappop(self.heap)
        self._log(i, k, now)
        return i

    def take(self, i: int, now: float) -> None:
        k = self.key[i]
        heap_delete(self.heap, self.heap.index((k, i)))
        self._log(i, k, now)

    def remove(self, i: int, now: float) -> None:
        heap_delete(self.heap, self.heap.index((self.key.pop(i), i)))

    def complete(self, i: int, now: float, duration_s: float) -> None:
        self.key.pop(i, None)


class NudgePredictedNaive(Policy):
    """Reference: the queue as a list, front first; an arriving small task is inserted by
    walking back from the end past the large tasks among the last ``m`` arrivals."""

    name = "nudge-predicted"
    summary = NudgePredicted.summary
    Params = NudgeParams
    components = ("small",)
    reads = frozenset({"predicted_s"})

    def __init__(self, tasks: TaskTable, params: PolicyParams | None = None) -> None:
        super().__init__(tasks, params)
        assert isinstance(self.params, NudgeParams)
        _check(self.params)
        self.line: list[int] = []
        self.arrival: dict[int, int] = {}
        self.small: dict[int, bool] = {}
        self.predictions: list[float] = []  # every finite prediction, in push order

    def __len__(self) -> int:
        return len(self.line)

    def _ahead(self, j: int, i: int) -> bool:
        """Whether queued ``j`` goes before ``i``: by arrival within a type; a small task
        before a large one unless the large arrived more than ``m`` arrivals earlier."""
        m = self.params.m  # type: ignore[attr-defined]
        if self.small[j] == self.small[i]:
            return self.arrival[j] < self.arrival[i]
        if self.small[j]:
            return self.arrival[i] >= self.arrival[j] - m
        return self.arrival[j] < self.arrival[i] - m

    def push(self, i: int, now: float) -> None:
        if i in self.arrival:  # handed back: its place among the queued tasks
            at = next((k for k, j in enumerate(self.line) if not self._ahead(j, i)),
                      len(self.line))
            self.line.insert(at, i)
            return
        p = self.tasks.predicted_s[i]
        window = sorted(self.predictions[-WINDOW:])
        self.small[i] = len(window) > 0 and p < window[(len(window) - 1) // 2]
        if not (math.isnan(p) or math.isinf(p)):
            self.predictions.append(p)
        a = self.arrival[i] = len(self.arrival)
        at = len(self.line)
        if self.small[i]:
            m = self.params.m  # type: ignore[attr-defined]
            while at > 0:
                back = self.line[at - 1]
                if self.small[back] or self.arrival[back] < a - m:
                    break
                at -= 1
        self.line.insert(at, i)

    def _log(self, i: int, now: float) -> None:
        self.score = now - self.tasks.submit_s[i]
        self.parts = (1.0 if self.small[i] else 0.0,)

    def pop(self, now: float) -> int:
        i = self.line.pop(0)
        self._log(i, now)
        return i

    def take(self, i: int, now: float) -> None:
        self.line.remove(i)
        self._log(i, now)

    def remove(self, i: int, now: float) -> None:
        self.line.remove(i)


NudgePredicted.naive = NudgePredictedNaive


def main(argv: list[str]) -> None:
    from desched.cli import cli
    from desched.policies import REGISTRY

    REGISTRY[NudgePredicted.name] = NudgePredicted
    specs = ",".join(["boost-ledger", *(f"nudge-predicted?m={m}" for m in M_GRID)])
    cli.main(["judge", "--set", "dev", "--jobs", "1", "--policies", specs, *argv])


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
