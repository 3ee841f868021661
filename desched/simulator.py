"""The event-driven simulator (DESIGN.md, Simulation semantics).

At each instant ``t``, in this order: (1) every completion at ``t`` frees its worker and its
completion record reaches the policy, in worker-id order; (2) every arrival at ``t`` joins the
queue, in trace order; (3) while a worker is idle and the queue is not empty, the idle worker
with the lowest id polls and starts the policy's winner at ``t``. A task runs for exactly its
``duration_s``. There is no randomness in the mechanism: a run is a pure function of the
trace, the policy and its parameters, and the worker count.
"""

from __future__ import annotations

import heapq
import math
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field

from desched.errors import DeschedError
from desched.policies.base import Policy
from desched.trace import TaskTable

ProgressFn = Callable[[int], None]
PROGRESS_EVERY = 16384


@dataclass(slots=True)
class Decisions:
    """One entry per decision, in decision order (columns of ``decisions.parquet``)."""

    t: array  # type: ignore[type-arg]
    worker: array  # type: ignore[type-arg]
    task: array  # type: ignore[type-arg]
    score: array  # type: ignore[type-arg]
    queue_len: array  # type: ignore[type-arg]
    tenant_backlog: array  # type: ignore[type-arg]
    parts: list[array]  # type: ignore[type-arg]

    @classmethod
    def empty(cls, n_parts: int) -> Decisions:
        return cls(
            array("d"), array("i"), array("q"), array("d"), array("q"), array("q"),
            [array("d") for _ in range(n_parts)],
        )


@dataclass(slots=True)
class SimResult:
    """Start, end and worker of every task (by position) and the decision log."""

    policy: str
    workers: int
    start_s: array  # type: ignore[type-arg]
    end_s: array  # type: ignore[type-arg]
    worker: array  # type: ignore[type-arg]
    decisions: Decisions
    wall_s: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)


def simulate(
    tasks: TaskTable,
    policy: Policy,
    workers: int,
    *,
    progress: ProgressFn | None = None,
) -> SimResult:
    """Run every task of ``tasks`` on ``workers`` workers under ``policy``.

    Every task starts exactly once, at or after its submission, and runs without preemption.
    Cost: O(n log n) for the event handling plus the policy's own cost per decision.
    ``progress`` is called with the number of decisions so far every ``PROGRESS_EVERY``.
    """
    if workers < 1:
        raise DeschedError(f"workers must be >= 1, got {workers}")
    if len(policy) != 0:
        raise DeschedError("the policy must start with an empty queue")
    wall0 = time.perf_counter()
    n = len(tasks)
    submit = tasks.submit_s
    duration = tasks.duration_s
    tenant = tasks.tenant
    order = sorted(range(n), key=submit.__getitem__)  # stable: trace order within an instant
    start_s = array("d", [math.nan]) * n
    end_s = array("d", [math.nan]) * n
    worker_of = array("i", [-1]) * n
    decisions = Decisions.empty(len(policy.components))
    d_t, d_worker, d_task = decisions.t, decisions.worker, decisions.task
    d_score, d_qlen, d_backlog = decisions.score, decisions.queue_len, decisions.tenant_backlog
    d_parts = decisions.parts
    n_parts = len(d_parts)
    backlog = [0] * max(1, len(tasks.tenant_names))

    running: list[tuple[float, int, int]] = []  # (end, worker, task): ties in worker order
    idle = list(range(workers))  # a heap of idle worker ids
    push, pop, complete = policy.push, policy.pop, policy.complete
    heappush, heappop = heapq.heappush, heapq.heappop
    inf = math.inf
    queued = 0
    next_arrival = 0
    decided = 0
    next_progress = PROGRESS_EVERY
    next_submit = submit[order[0]] if n else inf

    while next_submit < inf or running:
        t = running[0][0] if running else inf
        if next_submit < t:
            t = next_submit
        while running and running[0][0] == t:
            _, w, i = heappop(running)
            heappush(idle, w)
            complete(i, t, duration[i])
        while next_submit == t:
            i = order[next_arrival]
            next_arrival += 1
            next_submit = submit[order[next_arrival]] if next_arrival < n else inf
            push(i, t)
            backlog[tenant[i]] += 1
            queued += 1
        while idle and queued:
            w = heappop(idle)
            i = pop(t)
            k = tenant[i]
            d_t.append(t)
            d_worker.append(w)
            d_task.append(i)
            d_score.append(policy.score)
            d_qlen.append(queued)
            d_backlog.append(backlog[k])
            if n_parts:
                for column, value in zip(d_parts, policy.parts):
                    column.append(value)
            backlog[k] -= 1
            queued -= 1
            start_s[i] = t
            end = t + duration[i]
            end_s[i] = end
            worker_of[i] = w
            heappush(running, (end, w, i))
            decided += 1
            if progress is not None and decided >= next_progress:
                progress(decided)
                next_progress += PROGRESS_EVERY
    if queued or decided != n:
        raise DeschedError(f"simulation ended with {queued} queued and {n - decided} never run")
    if progress is not None:
        progress(decided)
    return SimResult(
        policy=policy.name,
        workers=workers,
        start_s=start_s,
        end_s=end_s,
        worker=worker_of,
        decisions=decisions,
        wall_s=time.perf_counter() - wall0,
    )
