"""Which queued task a poll gets: the policy's first candidate that the worker can take.

Memory-aware dispatch (the memory-constrained scheduling that motivates the enrichment
workers): every task carries ``predicted_mem_mb``, fixed at submit (``predictions``). A poll
that states ``free_mem_mb`` gets only a task with ``predicted_mem_mb <= free_mem_mb``; a task
without a prediction fits anywhere, and a poll without ``free_mem_mb`` takes any task.

``Policy.pop_fitting`` gives the first task of the policy's pop sequence that fits, and
afterwards the policy, its logged score included, is exactly as if only that task had been
dispatched (``Policy.take``): a skipped task stays queued and no per-tenant state moves for it
(a skipped round-robin tenant keeps its turn, a skipped VTC tenant is not charged;
``desched/policies/base.py``). The walk stops after ``max_fit_skips`` candidates that do
not fit; when it finds nothing that way and some queued task does fit the poll (one pass
over the queue says so), it walks again up to ``WALK_POPS`` refused candidates; after that
the poll gets nothing and the policy is unchanged. (With the first bound alone, one tenant's
64 tasks that fit no worker, ahead of the others, held every memory-aware poll at 204 while
other tenants' small tasks waited.) The second walk is the first one with a longer bound, so
the winner is the same whenever the first finds one, and the gate's caps and priority levels
apply to both.

Cost: one pop when the first candidate fits (a poll without ``free_mem_mb`` is a plain pop);
for s skipped, about s + 1 pops and s pushes where a pop moves nothing but the queue, and
for round-robin and VTC a walk of the pop sequence over copies of their ring or counters
plus one ``take``. A worker may hold several leases at once: a GPU worker polls again, with
what its memory has left, while a task fits.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING

from desched.policies.base import Policy
from desched.service.records import LiveTask

if TYPE_CHECKING:
    from desched.controls import Gate


WALK_POPS = 4096
"""The most refused candidates of the second walk, so that a poll holds the scheduler's lock
for a bounded time when many queued tasks do not fit it; past that many the poll gets
nothing. Measured in process (one tenant's oversized tasks ahead of other tenants' small
ones, polls of 4,000 MB), ms a poll: ifs-memoryless 3.1 with 1,000 ahead, 8.3 with 3,000,
12.7 with 10,000 and 16.7 with 100,000 (past the bound: nothing granted); fifo 0.7, 2.0,
3.1, 8.2; vtc 1.4, 3.6, 6.1, 10.3; round-robin 0.1 (its walk meets the other tenants at
once). A poll that nothing queued fits (a nearly full worker's) stops after the first walk
and the pass over the queue: 0.3–0.5 ms with 10,000 queued, 4.3–4.5 ms with 100,000."""


def pop_fitting(
    policy: Policy,
    live: Mapping[int, LiveTask],
    now: float,
    free_mem_mb: float | None,
    max_fit_skips: int,
    admit: Callable[[LiveTask], bool] | None = None,
    gate: Gate | None = None,
    queued: Collection[int] | None = None,
) -> tuple[int | None, int]:
    """``(position, skipped)`` of the task the poll gets, or ``(None, skipped)`` when none
    fits within the walks' bounds (module docstring). The policy must not be empty.

    ``admit`` is the hook for per-tenant admission: a candidate it refuses is skipped
    exactly as one that does not fit, so it moves no policy state. ``gate`` applies the
    tenant controls (caps and priority levels, ``desched.controls.Gate.choose``): the tasks
    of tenants at their cap are left out of the walk and count neither as skipped nor
    towards the bounds. ``queued``: the positions of the queued tasks (for the one pass that
    decides whether a second walk can find anything; without it there is none)."""
    if free_mem_mb is None and admit is None and gate is None:
        return policy.pop(now), 0

    def fits(i: int) -> bool:
        task = live[i]
        if admit is not None and not admit(task):
            return False
        need = task.predicted_mem_mb
        return free_mem_mb is None or need is None or need <= free_mem_mb

    def walk(limit: int) -> tuple[int | None, int]:
        if gate is None:
            return policy.pop_fitting(now, fits, limit)
        plain = free_mem_mb is None and admit is None
        return gate.choose(policy, now, None if plain else fits, limit)

    winner, skipped = walk(max_fit_skips)
    if winner is not None or skipped < max_fit_skips or free_mem_mb is None:
        return winner, skipped
    if WALK_POPS <= max_fit_skips or not _some_task_fits(policy, live, queued, free_mem_mb, gate):
        return winner, skipped
    winner, more = walk(WALK_POPS)
    return winner, skipped + more


def _some_task_fits(
    policy: Policy,
    live: Mapping[int, LiveTask],
    queued: Collection[int] | None,
    free_mem_mb: float,
    gate: Gate | None,
) -> bool:
    """Whether a queued task of a tenant under its cap needs at most ``free_mem_mb``: one
    pass over the queue, so that a poll nothing fits (a nearly full GPU worker's) stops
    after the first walk."""
    if not queued:
        return False
    capped = set() if gate is None else gate.capped()
    tenant = policy.tasks.tenant
    for i in queued:
        need = live[i].predicted_mem_mb
        if (need is None or need <= free_mem_mb) and tenant[i] not in capped:
            return True
    return False
