"""The policy contract, shared by the simulator and the live service.

A policy only ranks. The caller owns time (every method takes ``now``), the task table and
the workers; the policy keeps whatever index it needs over the tasks it was given with
``push`` and hands back one of them on ``pop``. Completion records reach it through
``complete``. ``score`` and ``parts`` describe the last decision for the decision log.

Every fast policy names its naive twin in ``naive``: a ``NaivePolicy`` that rescans the whole
queue on every pop and must give the identical decision sequence.

Memory-aware dispatch (the live service) asks for the first choice, in the policy's order,
among the tasks that fit a worker: ``pop_fitting(now, fits, limit)``. Its winner is the
first task of the sequence of successive pops from the current state that ``fits`` accepts,
looking at no more than ``limit`` candidates that ``fits`` refuses. Afterwards the state,
``score`` and ``parts`` included, is exactly what ``take(winner, now)`` gives from the
current state: the refused candidates stay queued and no per-tenant state moves for them (a
round-robin tenant keeps its turn, a VTC tenant is not charged). When nothing fits, nothing
changes. ``take(i, now)`` dispatches one queued task: the state change of a ``pop`` that
chose ``i``. ``pop(now)`` is ``pop_fitting`` with a ``fits`` that accepts everything.

Cancellation (the live service) withdraws a queued task without dispatching it:
``remove(i, now)``. No per-tenant state is charged for it (no counter moves, no turn is
used); a tenant whose queue it empties leaves the queue as after its last dispatch (it
leaves the round-robin ring; for VTC it is the last tenant that left). ``score`` and
``parts`` keep describing the last decision.
"""

from __future__ import annotations

import copy
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from desched.trace import TaskTable

Fits = Callable[[int], bool]
"""Whether queued task ``i`` may be handed to the polling worker (``pop_fitting``)."""


def first_fitting(
    candidates: Iterable[int], fits: Fits, limit: int | None
) -> tuple[int | None, int]:
    """The first of ``candidates`` that ``fits`` accepts and how many it refused before it,
    or ``(None, refused)`` after ``limit`` refusals or when the candidates run out. A lazy
    ``candidates`` learns of a refusal by being asked for the next one."""
    refused = 0
    for i in candidates:
        if fits(i):
            return i, refused
        refused += 1
        if limit is not None and refused >= limit:
            break
    return None, refused


MAX_WEIGHT = 1e6
"""The largest weight or multiplier a parameter takes: past it a score leaves the float range
(a weight of 1e308 times a normalised term is infinite, and the ranking falls to its
tie-break)."""


class PolicyParams(BaseModel):
    """Parameters of a policy; a policy without parameters uses this empty model.

    ``duration_scaled`` names parameters in seconds whose defaults suit the DES scenarios'
    task durations, each with its default expressed in mean task durations: a workload of
    much longer tasks (a real log of hour-long jobs) should scale them (``desched demo``
    sets ``key = factor * mean task duration`` on the real logs).
    """

    # a parameter is a finite number: NaN and infinity are refused by name, not left to turn
    # every score into NaN or -inf
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    duration_scaled: ClassVar[Mapping[str, float]] = MappingProxyType({})
    frontier_grid: ClassVar[tuple[Mapping[str, float], ...]] = ()
    """The points at which the judge's clairvoyant frontier runs the policy fed the true
    durations (``desched.bench.frontier``), ordered from nearly first-come to nearly
    shortest-first; empty: its defaults only."""


class Policy(ABC):
    """Ranks the queued tasks and hands one over per poll.

    Contract: ``pop`` is called only when ``len(self) > 0``; it removes and returns the
    position of the winner and sets ``score`` and ``parts`` (values of ``components``).
    ``now`` never decreases between calls.
    """

    name: ClassVar[str]
    summary: ClassVar[str]
    Params: ClassVar[type[PolicyParams]] = PolicyParams
    components: ClassVar[tuple[str, ...]] = ()
    reads: ClassVar[frozenset[str]] = frozenset()
    """Task columns the ranking reads besides tenant and submission time: ``predicted_s``
    (a prediction, Q3's policies), ``duration_s`` (the true duration: a clairvoyant bound
    that no live scheduler can run)."""
    optional_reads: ClassVar[frozenset[str]] = frozenset()
    """Task columns the policy uses where the trace has them and does without otherwise
    (``vtc`` charges ``predicted_s`` at dispatch, or the true duration at completion): a
    run on a trace without them is not refused. ``tests/test_duration_withheld.py`` holds
    every other policy's decisions blind to ``predicted_s``."""
    tenant_state: ClassVar[frozenset[str]] = frozenset()
    """What the policy remembers per tenant between decisions (``state()``): ``service``
    (a counter of service received, Q1's family), ``turn`` (a place in a ring), ``clock`` (a
    global work clock and each queued task's deadline on it: ``guarded-sjf``, whose state is
    not per tenant); empty for a policy whose decisions depend only on the queued tasks."""
    naive: ClassVar[type[Policy]]
    requeue_is_exact: ClassVar[bool] = False
    """True where ``pop`` and ``push`` change nothing but the queued set and a decision
    depends only on the queued set (not on the order of pushes), ``now`` and state that
    neither touches: pushing popped tasks back then restores the state exactly, so the
    default ``pop_fitting`` may pop candidates and push the refused ones back."""
    skips_tenants: ClassVar[bool] = False
    """Whether ``pop_sequence(now, skip)`` leaves out the skipped tenants at no cost per
    task of theirs (a walk over copies of per-tenant state), so that a caller refusing whole
    tenants (a concurrency cap, ``desched.controls``) walks that instead of refusing their
    tasks one by one."""
    submit_ordered_queues: ClassVar[bool] = False
    """True where the policy keeps its queued tasks in a ``TenantQueues`` named ``queues``,
    each tenant's ordered by ``(submit_s,)``, into which ``push`` puts each task and from
    which ``pop`` removes the head it returns: the per-tenant index a wrapper
    (``desched.bench.rl.WindowControlled``) would otherwise keep beside it, slot for slot."""
    score_reads_queue: ClassVar[bool] = True
    """Whether a task's ``score`` and ``parts`` depend on the other queued tasks (maxima,
    backlogs); where not, the score a task gets in the pop sequence is the one ``take``
    gives, and ``pop_fitting_by_requeue`` needs no ``take``."""
    withdrawal_leaves_trace: ClassVar[str] = ""
    """Why a task pushed and withdrawn (``remove``) while its tenant stays queued changes the
    decisions that follow; empty (every policy but one) where it does not, which the
    contract suite checks."""

    def __init__(self, tasks: TaskTable, params: PolicyParams | None = None) -> None:
        self.tasks = tasks if self.clairvoyant() else tasks.without_durations()
        self.params = params if params is not None else self.Params()
        self.score = math.nan
        self.parts: tuple[float, ...] = ()

    @classmethod
    def clairvoyant(cls) -> bool:
        """Whether the policy declares that it reads the true ``duration_s`` (``reads``): a
        bound, not a candidate. Every other policy sees the task table through
        ``TaskTable.without_durations``, whose ``duration_s`` raises on any read (here and in
        ``desched.policies.make_policy``, the mechanism, whatever the policy does)."""
        return "duration_s" in cls.reads

    @abstractmethod
    def push(self, i: int, now: float) -> None:
        """Task ``i`` joins the queue at ``now``."""

    @abstractmethod
    def pop(self, now: float) -> int:
        """Remove and return the winner at ``now``."""

    @abstractmethod
    def __len__(self) -> int:
        """Number of queued tasks."""

    def complete(self, i: int, now: float, duration_s: float) -> None:
        """The completion record of task ``i`` (its real ``duration_s``) arrives at ``now``."""

    def take(self, i: int, now: float) -> None:
        """Dispatch queued task ``i``: remove it and apply exactly the state change a ``pop``
        that chose ``i`` would apply (charges, ring moves, ``last_left``, ...), and set
        ``score`` and ``parts`` to those such a pop would log."""
        raise NotImplementedError(f"{type(self).__name__} does not implement take")

    def remove(self, i: int, now: float) -> None:
        """Withdraw queued task ``i`` without dispatching it (module docstring,
        cancellation): afterwards the policy decides as one that never had ``i`` pushed,
        except that a tenant it emptied counts as having left the queue."""
        raise NotImplementedError(f"{type(self).__name__} does not implement remove")

    def pop_fitting(
        self, now: float, fits: Fits, limit: int | None = None
    ) -> tuple[int | None, int]:
        """``(winner, skipped)``: the first task of the pop sequence from the current state
        that ``fits`` accepts and the number of candidates refused before it, or
        ``(None, skipped)`` after ``limit`` refusals (``limit`` >= 1; None: no bound) or
        when the queue runs out. Afterwards the state is what ``take(winner, now)`` gives;
        when nothing fits it is unchanged (module docstring).

        This default pops and pushes back where ``requeue_is_exact``, and otherwise runs
        its ``pop_sequence`` (``pop_fitting_by_walk``; by default pops on a deep copy, the
        reference: O(size of the policy) per call). A stateful fast policy overrides it.
        """
        if self.requeue_is_exact:
            return self.pop_fitting_by_requeue(now, fits, limit)
        return self.pop_fitting_by_walk(now, fits, limit)

    def pop_sequence(self, now: float, skip: Collection[int] = ()) -> Iterator[int]:
        """The tasks successive pops from the current state would give, in order, leaving
        this policy untouched, without those of the tenant codes in ``skip``. This default
        pops a deep copy of it (the task table shared), O(size of the policy) to start, and
        filters; round-robin and VTC walk copies of their ring or counters instead."""
        trial = copy.deepcopy(self, {id(self.tasks): self.tasks})
        tenant = self.tasks.tenant
        while len(trial) > 0:
            i = trial.pop(now)
            if not skip or tenant[i] not in skip:
                yield i

    def tenant_order(self, i: int) -> tuple[Any, ...] | None:
        """Where the policy keeps a fixed order within each tenant (its pop sequence gives a
        tenant's tasks in increasing ``tenant_order``), task ``i``'s key in it; None where
        the order within a tenant depends on the state (this default)."""
        return None

    def pop_fitting_by_walk(
        self, now: float, fits: Fits, limit: int | None = None
    ) -> tuple[int | None, int]:
        """``pop_fitting`` by its definition: the first task of ``pop_sequence`` that fits,
        then ``take`` of it here. Exact for any policy whose ``take`` and ``pop_sequence``
        are; the naive twins' implementation."""
        winner, skipped = first_fitting(self.pop_sequence(now), fits, limit)
        if winner is not None:
            self.take(winner, now)
        return winner, skipped

    def pop_fitting_by_requeue(
        self, now: float, fits: Fits, limit: int | None = None
    ) -> tuple[int | None, int]:
        """``pop_fitting`` for a policy that declares ``requeue_is_exact``: pops candidates,
        pushes the refused ones back and, where ``score_reads_queue``, pushes the winner
        back too and dispatches it with ``take``, so that it logs the score it has among
        all the queued tasks. Cost: one ``pop`` when the first candidate fits; for s refused,
        s + 1 pops, s pushes (and one push and one ``take``)."""
        if len(self) == 0:
            return None, 0
        logged = self.score, self.parts
        i = self.pop(now)
        if fits(i):
            return i, 0
        refused = [i]
        winner = None
        while len(self) > 0 and (limit is None or len(refused) < limit):
            i = self.pop(now)
            if fits(i):
                winner = i
                break
            refused.append(i)
        for j in refused:
            self.push(j, now)
        if winner is None:
            self.score, self.parts = logged
        elif self.score_reads_queue:
            self.push(winner, now)
            self.take(winner, now)
        return winner, len(refused)

    def state(self) -> dict[str, Any] | None:
        """What a restart of the live service should keep besides the queue: the per-tenant
        state (counters, turns), JSON-able and keyed by tenant name (codes differ between task
        tables); equal for a fast policy and its naive twin. None for a policy whose
        decisions depend only on the queued tasks."""
        return None

    def restore(self, state: dict[str, Any]) -> None:
        """Take back ``state()`` of an earlier instance with the same parameters, after the
        queued tasks were pushed: from then on it decides as that instance would have over
        the same queue. Tenants it names that this task table lacks are added to it."""


class NaivePolicy(Policy):
    """Reference implementation: a plain list, rescanned on every pop.

    Subclasses implement ``prepare`` (whole-queue quantities for this decision, computed by
    scanning), ``key`` (a total order, larger wins) and ``explain`` (score and parts).
    """

    def __init__(self, tasks: TaskTable, params: PolicyParams | None = None) -> None:
        super().__init__(tasks, params)
        self.queue: list[int] = []

    def push(self, i: int, now: float) -> None:
        self.queue.append(i)

    def __len__(self) -> int:
        return len(self.queue)

    def prepare(self, now: float) -> None:
        """Compute per-decision quantities by scanning ``self.queue``."""

    @abstractmethod
    def key(self, i: int, now: float) -> tuple[float, ...]:
        """Ranking key of queued task ``i``; the maximum wins and keys never tie."""

    @abstractmethod
    def explain(self, i: int, now: float) -> tuple[float, tuple[float, ...]]:
        """Score and parts of queued task ``i`` if it were dispatched now (by ``pop`` or
        ``take``), after ``prepare``."""

    def taken(self, i: int, now: float) -> None:
        """Hook after ``i`` left the queue (stateful policies charge here)."""

    def removed(self, i: int, now: float) -> None:
        """Hook after ``i`` was withdrawn (``remove``): nothing is charged for it."""

    def remove(self, i: int, now: float) -> None:
        self.queue.remove(i)
        self.removed(i, now)

    def pop(self, now: float) -> int:
        self.prepare(now)
        best = max(self.queue, key=lambda i: self.key(i, now))
        self.score, self.parts = self.explain(best, now)
        self.queue.remove(best)
        self.taken(best, now)
        return best

    def take(self, i: int, now: float) -> None:
        self.prepare(now)
        self.score, self.parts = self.explain(i, now)
        self.queue.remove(i)
        self.taken(i, now)

    def backlog_of(self) -> dict[int, int]:
        """Queued tasks per tenant code, by a full scan."""
        counts: dict[int, int] = {}
        tenant = self.tasks.tenant
        for i in self.queue:
            counts[tenant[i]] = counts.get(tenant[i], 0) + 1
        return counts
