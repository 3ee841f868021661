"""``boost-slowdown``, a candidate for issue 19: ``boost-predicted`` with a guard on the
quantity the fairness promise measures. Not registered: run

    .venv/bin/python -m scripts.boost_slowdown --out data/judge-slowdown

to register it in this process and run ``desched judge --set dev --jobs 1`` on it beside
``boost-predicted`` (its own judge options may follow).

Why. Under the online protocol (docs/deploy-policy.md, "Since 2026-12-07") the promise every
predictive candidate breaks most often is Δ Jain, Jain's index over the per-tenant mean
bounded slowdown: `boost-predicted` lowers it by 0.235 on LLNL-Thunder and 0.084 on
Sandia-Ross, where one tenant ends at 4.1× and 3.1× its bounded slowdown under today's
scorer. Every guard tried so far acts on a proxy (a first-come lane, a ledger of predicted
work that overtook a tenant, per-tenant calibration of the predictions, bounded overtaking);
none looks at the bounded slowdowns the tenants actually get. The completion records carry
them: a finished task's submit time, end and real duration are known to any live scheduler.
This guard serves a tenant whose recent tasks finished with a bounded slowdown far above the
tenants' typical one, so the spread that Jain's index measures stays bounded, while every
other decision is `boost-predicted`'s.

The rule, fixed and committed before any run of this candidate (every constant below):

- *Order.* ``boost-predicted``'s, every parameter at its default: its choice, its boosts
  fixed at push, its estimator seeing every dispatch, guard or not; the score logged is the
  winner's boosted arrival (part: its boost), as ``boost-predicted`` logs.
- *A tenant's recent slowdown.* At each completion record of task ``i`` (``complete``, at
  ``now``, with the real ``duration_s`` the record carries) the tenant of ``i`` gets the
  bounded slowdown ``max(1, (now - submit_s[i]) / max(duration_s, 10))``. A tenant's
  *recent slowdown* is the mean (Python's ``sum`` from the oldest, over the count) of its
  last ``WINDOW = 32`` such values; a tenant with at least ``MIN_DONE = 4`` values is
  *rated*.
- *The typical slowdown* ``M``: the mean of the recent slowdowns of every rated tenant,
  queued or not, summed in ascending tenant code.
- *Guard tasks.* A task dispatched by the guard is a *guard task* until its completion record
  or until it is pushed again (a lease that expired). ``W`` is the worker count as
  ``boost-predicted``'s estimator takes it (its ``workers`` parameter, or where that is 0 the
  most tasks seen dispatched and not yet completed at once, at least 1).
- *The guard.* At a decision, among the rated tenants with a queued task and no running guard
  task, take the one with the largest recent slowdown (ties: the smallest tenant code). When
  its recent slowdown is above ``FACTOR * M`` with ``FACTOR = 2`` and fewer than
  ``ceil(W / 2)`` guard tasks run, its oldest queued task (smallest ``(submit_s,
  position)``) goes; otherwise ``boost-predicted``'s choice.

The constants were set from the promises, not from any run: ``FACTOR`` is the worst-tenant
promise's 2×; ``WINDOW`` and ``MIN_DONE`` make the rating recent and not a single task's;
one running guard task per tenant and at most half the workers for the guard (the share
``boost-lanes`` gives its lane) keep the guard from flooding the workers with one tenant's
backlog before any of its tasks has finished.

What we expect, written before the run: Δ Jain and the worst tenant improve on LLNL-Thunder
and Sandia-Ross against ``boost-predicted``, and the gain falls on every log. Whether the
promises then hold on more than ``boost-predicted``'s four of six workloads, and at what
frontier share, we do not know. The held-back logs are run once, and only if it ranks above
``boost-predicted`` on the development logs under the recommendation rule. It takes
``BoostParams`` as they are, so the judge's clairvoyant family runs it at
``boost-predicted``'s frontier grid, as it did ``boost-lanes``.

The fast class keeps the rated tenants sorted by recent slowdown (re-sorted at each
completion) and a heap per tenant by arrival; its naive twin (on ``boost-predicted``'s naive
twin) keeps every completion's slowdown in a list per tenant and recomputes everything at
each decision by scanning; it shares no rule code with the fast class. Caps and priority
levels (``pop_sequence``) are not supported: the judge uses neither.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Collection, Iterator
from typing import Any

from desched.policies.base import PolicyParams
from desched.policies.boost_predicted import BoostPredicted, BoostPredictedNaive
from desched.trace import TaskTable

WINDOW = 32
"""Completions per tenant in its recent slowdown (fixed before any run)."""
MIN_DONE = 4
"""Completions in the window before a tenant is rated (fixed before any run)."""
FACTOR = 2.0
"""A rated tenant is served by the guard above this multiple of the typical slowdown."""
FLOOR_S = 10.0
"""The bounded slowdown's floor on the duration (DESIGN.md's metric)."""


class BoostSlowdown(BoostPredicted):
    """``boost-predicted`` with a slowdown guard (module docstring)."""

    name = "boost-slowdown"
    summary = ("γ-Boost on predicted sizes; a tenant whose recent tasks finished at over twice "
               "the typical bounded slowdown has its oldest task go")

    def __init__(self, tasks: TaskTable, params: PolicyParams | None = None) -> None:
        super().__init__(tasks, params)
        self.recent: dict[int, deque[float]] = {}
        self.rating: dict[int, float] = {}  # rated tenants' recent slowdown
        self.ranked: list[tuple[float, int]] = []  # (-rating, tenant), ascending
        self.typical = 0.0
        self.arrivals: dict[int, list[tuple[float, int]]] = {}  # per tenant, lazy deletion
        self.guard_running: dict[int, int] = {}  # guard task -> tenant
        self.guarded_tenants: dict[int, int] = {}  # tenant -> running guard tasks

    def push(self, i: int, now: float) -> None:
        self._guard_ends(i)
        super().push(i, now)
        heapq.heappush(self.arrivals.setdefault(self.tasks.tenant[i], []),
                       (self.tasks.submit_s[i], i))

    def _guard_ends(self, i: int) -> None:
        t = self.guard_running.pop(i, None)
        if t is not None:
            left = self.guarded_tenants[t] - 1
            if left:
                self.guarded_tenants[t] = left
            else:
                del self.guarded_tenants[t]

    def _oldest(self, t: int) -> int | None:
        heap = self.arrivals.get(t)
        keys = self.keys
        while heap and heap[0][1] not in keys:
            heapq.heappop(heap)
        return heap[0][1] if heap else None

    def _guard_choice(self) -> int | None:
        w = self.params.workers or max(self.estimator.workers_seen, 1)
        if len(self.guard_running) >= -(-w // 2):
            return None
        for negative, t in self.ranked:
            if -negative <= FACTOR * self.typical:
                return None
            if t in self.guarded_tenants:
                continue
            oldest = self._oldest(t)
            if oldest is not None:
                return oldest
        return None

    def pop(self, now: float) -> int:
        g = self._guard_choice()
        i = self._winner(now) if g is None else g
        BoostPredicted.take(self, i, now)
        if g is not None:
            t = self.tasks.tenant[i]
            self.guard_running[i] = t
            self.guarded_tenants[t] = self.guarded_tenants.get(t, 0) + 1
        return i

    def take(self, i: int, now: float) -> None:
        g = self._guard_choice()
        BoostPredicted.take(self, i, now)
        if g == i:
            t = self.tasks.tenant[i]
            self.guard_running[i] = t
            self.guarded_tenants[t] = self.guarded_tenants.get(t, 0) + 1

    def complete(self, i: int, now: float, duration_s: float) -> None:
        super().complete(i, now, duration_s)
        self._guard_ends(i)
        t = self.tasks.tenant[i]
        window = self.recent.setdefault(t, deque(maxlen=WINDOW))
        window.append(max(1.0, (now - self.tasks.submit_s[i]) / max(duration_s, FLOOR_S)))
        if len(window) >= MIN_DONE:
            self.rating[t] = sum(window) / len(window)
            rated = sorted(self.rating)
            self.typical = sum(self.rating[u] for u in rated) / len(rated)
            self.ranked = sorted((-r, u) for u, r in self.rating.items())

    def pop_sequence(self, now: float, skip: Collection[int] = ()) -> Iterator[int]:
        raise NotImplementedError("boost-slowdown: caps and priority levels are not supported")

    def state(self) -> dict[str, Any] | None:
        return None


# -- the naive twin: the guard written again from the module docstring, on the naive twin of
# -- boost-predicted (sharing no code above) ------------------------------------------------


class BoostSlowdownNaive(BoostPredictedNaive):
    """Reference: every completion's bounded slowdown in a list per tenant; each decision
    rescans the tenants, the queue and the running guard tasks."""

    name = "boost-slowdown"
    summary = BoostSlowdown.summary

    def __init__(self, tasks: TaskTable, params: PolicyParams | None = None) -> None:
        super().__init__(tasks, params)
        self.done: dict[int, list[float]] = {}
        self.guard: list[int] = []  # running guard tasks
        self.chosen: int | None = None

    def push(self, i: int, now: float) -> None:
        if i in self.guard:
            self.guard.remove(i)
        super().push(i, now)

    def prepare(self, now: float) -> None:
        self.chosen = None
        w = self.params.workers if self.params.workers > 0 else max(self.est.peak, 1)
        if len(self.guard) >= (w + 1) // 2:
            return
        mean = {}
        for t, values in sorted(self.done.items()):
            last = values[-WINDOW:]
            if len(last) >= MIN_DONE:
                mean[t] = sum(last) / len(last)
        if not mean:
            return
        typical = sum(mean.values()) / len(mean)
        busy = {self.tasks.tenant[j] for j in self.guard}
        queued = {self.tasks.tenant[j] for j in self.queue}
        pick, top = None, 0.0
        for t, m in mean.items():
            if t in queued and t not in busy and (pick is None or m > top):
                pick, top = t, m
        if pick is None or not top > FACTOR * typical:
            return
        s = self.tasks.submit_s
        mine = [j for j in self.queue if self.tasks.tenant[j] == pick]
        self.chosen = min(mine, key=lambda j: (s[j], j))

    def key(self, i: int, now: float) -> tuple[float, ...]:
        if self.chosen is not None:
            return (3.0,) if i == self.chosen else (-1.0, -i)
        return super().key(i, now)

    def taken(self, i: int, now: float) -> None:
        if i == self.chosen:
            self.guard.append(i)
        super().taken(i, now)

    def complete(self, i: int, now: float, duration_s: float) -> None:
        super().complete(i, now, duration_s)
        if i in self.guard:
            self.guard.remove(i)
        b = (now - self.tasks.submit_s[i]) / max(FLOOR_S, duration_s)
        self.done.setdefault(self.tasks.tenant[i], []).append(max(1.0, b))

    def state(self) -> dict[str, Any] | None:
        return None


BoostSlowdown.naive = BoostSlowdownNaive


def main(argv: list[str]) -> None:
    from desched.cli import cli
    from desched.policies import REGISTRY

    REGISTRY[BoostSlowdown.name] = BoostSlowdown
    cli.main(["judge", "--set", "dev", "--jobs", "1",
              "--policies", "boost-predicted,boost-slowdown", *argv])


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
