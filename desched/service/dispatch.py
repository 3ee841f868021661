"""Which queued task a poll gets: the policy's first candidate that the worker can take.

Memory-aware dispatch (the memory-constrained scheduling that motivates the enrichment
workers): every task carries ``predicted_mem_mb``, fixed at submit (``predictions``). A poll
that states ``free_mem_mb`` gets only a task with ``predicted_mem_mb <= free_mem_mb``; a task
without a prediction fits anywhere, and a poll without ``free_mem_mb`` takes any task.

``Policy.pop_fitting`` gives the first task of the policy's pop sequence that fits, and
afterwards the policy, its logged score included, is exactly as if only that task had been
dispatched (``Policy.take``): a skipped task stays queued and no per-tenant state moves for it
(a skipped round-robin tenant keeps its turn, a skipped VTC tenant is not charged;
``desched/policies/base.py``). After ``max_fit_skips`` candidates that do not fit, the poll
gets nothing and the policy is unchanged.

Cost: one pop when the first candidate fits (a poll without ``free_mem_mb`` is a plain pop);
for s skipped, about s + 1 pops and s pushes where a pop moves nothing but the queue, and
for round-robin and VTC a walk of the pop sequence over copies of their ring or counters
plus one ``take``. A worker may hold several leases at once: a GPU worker polls again, with
what its memory has left, while a task fits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from desched.policies.base import Policy
from desched.service.records import LiveTask

if TYPE_CHECKING:
    from desched.controls import Gate


def pop_fitting(
    policy: Policy,
    live: Mapping[int, LiveTask],
    now: float,
    free_mem_mb: float | None,
    max_fit_skips: int,
    admit: Callable[[LiveTask], bool] | None = None,
    gate: Gate | None = None,
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
        return policy.pop_fitting(now, fits, max_fit_skips)
    plain = free_mem_mb is None and admit is None
    return gate.choose(policy, now, None if plain else fits, max_fit_skips)
