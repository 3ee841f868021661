"""Which queued task a poll gets: the policy's first candidate that the worker can take.

Memory-aware dispatch (the memory-constrained scheduling that motivates the enrichment
workers): every task carries ``predicted_mem_mb``, fixed at submit (``predictions``). A poll
that states ``free_mem_mb`` gets only a task with ``predicted_mem_mb <= free_mem_mb``; a task
without a prediction fits anywhere, and a poll without ``free_mem_mb`` takes any task.

``Policy.pop_fitting`` gives the first task of the policy's pop sequence that fits, and
afterwards the policy, its logged score included, is exactly as if only that task had been
dispatched (``Policy.take``): a skipped task stays queued and no per-tenant state moves for it
(a skipped round-robin tenant keeps its turn, a skipped VTC tenant is not charged;
``desched/policies/base.py``). The candidates of a tenant none of whose queued tasks fits
are passed over without counting: after ``max_fit_skips`` other candidates that do not fit,
the poll gets nothing and the policy is unchanged. (Counting them let one tenant's 64 tasks
that fit no worker hold every memory-aware poll at 204 while other tenants' small tasks
waited.) The walk counts every refusal first, which gives the same winner whenever it finds
one; only when it gives up does ``_walk_without`` look at each tenant's smallest queued
memory (one pass over the queue) and walk again without the tenants whose tasks cannot fit.

Cost: one pop when the first candidate fits (a poll without ``free_mem_mb`` is a plain pop);
for s skipped, about s + 1 pops and s pushes where a pop moves nothing but the queue, and
for round-robin and VTC a walk of the pop sequence over copies of their ring or counters
plus one ``take``. A worker may hold several leases at once: a GPU worker polls again, with
what its memory has left, while a task fits.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from typing import TYPE_CHECKING

from desched.policies.base import Fits, Policy, first_fitting
from desched.service.records import LiveTask

if TYPE_CHECKING:
    from desched.controls import Gate


WALK_POPS = 4096
"""The most tasks the second walk pops from a policy whose pop moves the queue (the IFS
family, fifo), so that a poll holds the scheduler's lock for a bounded time walking past
the tasks of tenants that cannot fit; past that many the poll gets nothing, as before the
second walk existed. Measured in process (one tenant's oversized tasks ahead of another's
small ones, polls of 4,000 MB): ifs-memoryless 3.4 ms a poll with 1,000 ahead, 8.6 ms with
3,000, 31 ms with 10,000 unbounded, 12 ms with 10,000 and 19 ms with 100,000 under this
bound (nothing granted); fifo 0.8, 2.0, 3.0, 8.4 ms; vtc (a walk over copies of its
counters, unbounded) 0.2, 0.3, 0.6, 6.8 ms, every poll granted; the one pass over the queue
is most of the cost at 100,000."""


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
    """``(position, skipped)`` of the task the poll gets, or ``(None, skipped)`` when none of
    the first ``max_fit_skips`` candidates fits. The policy must not be empty.

    ``admit`` is the hook for per-tenant admission: a candidate it refuses is skipped
    exactly as one that does not fit, so it moves no policy state. ``gate`` applies the
    tenant controls (caps and priority levels, ``desched.controls.Gate.choose``): the tasks
    of tenants at their cap are left out of the walk and count neither as skipped nor
    towards ``max_fit_skips``."""
    if free_mem_mb is None and admit is None and gate is None:
        return policy.pop(now), 0

    def fits(i: int) -> bool:
        task = live[i]
        if admit is not None and not admit(task):
            return False
        need = task.predicted_mem_mb
        return free_mem_mb is None or need is None or need <= free_mem_mb

    if gate is None:
        winner, skipped = policy.pop_fitting(now, fits, max_fit_skips)
    else:
        plain = free_mem_mb is None and admit is None
        winner, skipped = gate.choose(policy, now, None if plain else fits, max_fit_skips)
    if winner is not None or skipped < max_fit_skips or free_mem_mb is None:
        return winner, skipped
    if gate is not None and gate.mixed:  # priority levels: the gate's walk alone
        return winner, skipped
    capped = set() if gate is None else {
        k for k, cap in gate.caps.items() if gate.running[k] >= cap}
    return _walk_without(policy, live, queued, now, free_mem_mb, fits, max_fit_skips, capped)


def _walk_without(
    policy: Policy,
    live: Mapping[int, LiveTask],
    queued: Collection[int] | None,
    now: float,
    free_mem_mb: float,
    fits: Fits,
    limit: int,
    capped: set[int],
) -> tuple[int | None, int]:
    """``pop_fitting`` of the queue without the tenants none of whose queued tasks need at
    most ``free_mem_mb`` (module docstring) and without the ``capped`` ones (at their
    concurrency cap): O(queued) to find them, then the walk as ``Gate.choose`` walks past
    capped tenants (popping and pushing back for a policy whose ``requeue_is_exact``, else
    its ``pop_sequence`` without them); ``(None, skipped)`` with the policy unchanged when
    nothing fits."""
    if not queued:
        return None, limit
    tenant = policy.tasks.tenant
    fitting: set[int] = set()
    present: set[int] = set()
    for i in queued:
        k = tenant[i]
        present.add(k)
        need = live[i].predicted_mem_mb
        if need is None or need <= free_mem_mb:
            fitting.add(k)
    hopeless = (present - fitting) | capped
    if not present - hopeless or not present - fitting:
        return None, limit
    popped: list[int] = []

    def popping() -> Iterator[int]:
        while len(policy) and len(popped) < WALK_POPS:
            i = policy.pop(now)
            popped.append(i)
            if tenant[i] not in hopeless:
                yield i

    if policy.requeue_is_exact and not policy.skips_tenants:
        sequence: Iterator[int] = popping()
    else:
        sequence = policy.pop_sequence(now, hopeless)
    logged = policy.score, policy.parts
    winner, skipped = first_fitting(sequence, fits, limit)
    for i in popped:
        policy.push(i, now)
    if winner is None:
        policy.score, policy.parts = logged
    else:
        policy.take(winner, now)
    return winner, limit + skipped
