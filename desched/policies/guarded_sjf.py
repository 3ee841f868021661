"""``guarded-sjf``: shortest predicted first, each task guarded by its first-come turn.

The guard runs on a *work clock*: ``clock`` counts the predicted work (``predicted_s``)
dispatched so far. A task that arrives finds ``Q`` predicted seconds of work queued ahead of
it; first-come-first-served would start it once that much work has been dispatched, so its
*turn* is ``clock + Q``. Its deadline on the work clock is ``clock + beta * Q + a * m``,
with ``m`` the mean prediction of the tasks pushed so far: ``beta = 1`` is exactly its
first-come turn, ``beta > 1`` lets later, shorter tasks overtake it by up to ``(beta - 1) * Q``
more seconds of work (plus ``a`` mean tasks' worth). At each decision, if the queued task
with the earliest deadline is due (``deadline <= clock``), it goes first; otherwise the
shortest predicted task does.

Nothing in the rule is in seconds of wall time or counts workers, so one setting serves a
queue of one-second tasks and a log of day-long jobs alike; the clock advances by the
winner's prediction, so a workload whose predictions are all off by one factor decides the
same. Work is counted in whole milliseconds (``units``) so that the fast policy's running
sums and the naive twin's rescans agree exactly.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterator, Mapping
from typing import Any, ClassVar

from pydantic import Field

from desched.policies.base import MAX_WEIGHT, NaivePolicy, Policy
from desched.policies.learnable import LearnableParams, Range, SearchSpace
from desched.structures.heaps import LazyWalk, without_task
from desched.trace import TaskTable

UNITS_PER_S = 1000
"""Work is counted in whole milliseconds of predicted duration (module docstring)."""


def units(predicted_s: float) -> int:
    """A prediction in whole milliseconds (at least 0)."""
    return max(0, round(predicted_s * UNITS_PER_S))


class GuardedSjfParams(LearnableParams):
    """How far behind its first-come turn a task may fall (module docstring).

    Learnable: ``beta`` (the stretch of its turn) and ``a`` (extra slack, in mean tasks).
    Defaults ``beta = 1, a = 20``: each task's first-come turn plus 20 mean tasks of work,
    the grid point with the smallest summed distance to issue 12's four criteria over the six
    bundled SWF logs among those that do no harm on the DES scenarios (any ``beta > 1``
    lowers Jain's index on ``flood``); docs/deploy-policy-research.md.
    """

    frontier_grid: ClassVar[tuple[Mapping[str, float], ...]] = tuple(
        {"beta": 1.0, "a": a}
        for a in (0.0, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 5000.0))
    search: ClassVar[SearchSpace] = SearchSpace((
        Range("beta", 1.0, 4.0, grid=(1.0, 1.05, 1.1, 1.25, 1.5, 2.0)),
        Range("a", 0.0, 500.0, grid=(0.0, 5.0, 10.0, 20.0, 50.0, 200.0)),
    ))

    beta: float = Field(1.0, ge=1.0, le=MAX_WEIGHT, description="deadline = work clock + beta * work queued "
                        "ahead at arrival (+ a mean tasks); 1 is first-come-first-served")
    a: float = Field(20.0, ge=0.0, le=MAX_WEIGHT, description="extra slack before a task is due, in mean "
                     "predicted tasks of work")


class GuardState:
    """The fast policy's work clock, pushed-work sums and deadlines (the naive twin keeps
    its own)."""

    clock: int
    pushed_work: int
    pushed: int
    deadline: dict[int, float]

    def init_guard(self) -> None:
        self.clock = 0
        self.pushed_work = 0
        self.pushed = 0
        self.deadline = {}

    def deadline_of(self, u: int, queued_work: int, params: GuardedSjfParams) -> float:
        """Deadline of a task of ``u`` units arriving with ``queued_work`` units ahead; counts
        it among the pushed tasks."""
        self.pushed_work += u
        self.pushed += 1
        return self.clock + params.beta * queued_work + params.a * (self.pushed_work / self.pushed)

    def lateness_s(self, i: int) -> float:
        """How far the clock has run past ``i``'s deadline, in seconds of work (> 0: due)."""
        return (self.clock - self.deadline[i]) / UNITS_PER_S

    def guard_state(self, tasks: TaskTable, queued: Any) -> dict[str, Any] | None:
        if self.clock == 0 and self.pushed == 0:
            return None
        return {
            "clock": self.clock,
            "pushed": [self.pushed_work, self.pushed],
            "deadline": {tasks.task_id[i]: self.deadline[i] for i in sorted(queued)},
        }

    def restore_guard(self, tasks: TaskTable, queued: Any, state: dict[str, Any]) -> None:
        self.clock = int(state["clock"])
        self.pushed_work, self.pushed = (int(x) for x in state["pushed"])
        saved = state["deadline"]
        for i in queued:
            if tasks.task_id[i] in saved:
                self.deadline[i] = float(saved[tasks.task_id[i]])


class GuardedSjfNaive(NaivePolicy):
    """Reference, written from the module docstring again (no code shared with the fast
    policy): the work clock, the pushed work and each deadline kept in plain attributes; a
    push rescans the queue for the work ahead of it, a decision rescans it for the winner.
    Work is ``max(0, round(predicted_s * 1000))`` whole milliseconds."""

    name = "guarded-sjf"
    summary = ("shortest predicted first; a task whose first-come turn on the work clock, "
               "stretched by beta, has passed goes first")
    Params = GuardedSjfParams
    components = ("predicted_s", "lateness_s")
    reads = frozenset({"predicted_s"})
    tenant_state = frozenset({"clock"})
    params: GuardedSjfParams

    def __init__(self, tasks: TaskTable, params: GuardedSjfParams | None = None) -> None:
        super().__init__(tasks, params)
        self.work_done = 0
        self.work_pushed = 0
        self.count_pushed = 0
        self.due_at: dict[int, float] = {}

    def ms(self, i: int) -> int:
        """Task ``i``'s predicted work in whole milliseconds."""
        return max(0, round(self.tasks.predicted_s[i] * 1000))

    def push(self, i: int, now: float) -> None:
        ahead = 0
        for j in self.queue:
            ahead += self.ms(j)
        self.work_pushed += self.ms(i)
        self.count_pushed += 1
        mean = self.work_pushed / self.count_pushed
        self.due_at[i] = self.work_done + self.params.beta * ahead + self.params.a * mean
        super().push(i, now)

    def key(self, i: int, now: float) -> tuple[float, ...]:
        d, s = self.due_at[i], self.tasks.submit_s[i]
        if d <= self.work_done:
            return (1.0, -d, -s, -i)
        return (0.0, -self.tasks.predicted_s[i], -s, -i)

    def explain(self, i: int, now: float) -> tuple[float, tuple[float, ...]]:
        late = (self.work_done - self.due_at[i]) / 1000
        return late, (self.tasks.predicted_s[i], late)

    def taken(self, i: int, now: float) -> None:
        self.work_done += self.ms(i)
        del self.due_at[i]

    def removed(self, i: int, now: float) -> None:
        self.work_pushed -= self.ms(i)
        self.count_pushed -= 1
        del self.due_at[i]

    def state(self) -> dict[str, Any] | None:
        if self.work_done == 0 and self.count_pushed == 0:
            return None
        ids = self.tasks.task_id
        return {
            "clock": self.work_done,
            "pushed": [self.work_pushed, self.count_pushed],
            "deadline": {ids[i]: self.due_at[i] for i in sorted(self.queue)},
        }

    def restore(self, state: dict[str, Any]) -> None:
        self.work_done = int(state["clock"])
        self.work_pushed, self.count_pushed = (int(x) for x in state["pushed"])
        saved = state["deadline"]
        for i in self.queue:
            tid = self.tasks.task_id[i]
            if tid in saved:
                self.due_at[i] = float(saved[tid])


class GuardedSjf(GuardState, Policy):
    """Shortest predicted first, with a first-come-turn guard on a work clock (module
    docstring).

    Rule: a task arriving with ``Q`` units of predicted work queued gets the deadline
    ``clock + beta * Q + a * mean prediction``. The queued task with the smallest
    ``(deadline, submit_s, position)`` wins if its deadline is ``<= clock``; otherwise the
    smallest ``(predicted_s, submit_s, position)`` wins. The clock then advances by the
    winner's prediction. Bound: a task is dispatched no later than when the work clock has
    advanced by ``(beta - 1) * Q + a * m`` past its first-come turn plus the work of the
    tasks due before it (test_policy_guarded_sjf). State: the clock, the pushed work and each
    queued task's deadline (``state()``, for a restart). Cost: two heaps with lazy deletion
    whose tops are kept live (a task that leaves pops the dead tops; both heaps are rebuilt
    when dead entries outnumber live ones twice over): O(log n) amortised per push, pop,
    ``take`` and ``remove``; ``pop_fitting`` walks both heaps lazily from their live tops,
    O((s + 1) log n) for s refused plus the dead entries it passes. Score logged: the winner's lateness on the
    work clock, seconds (> 0: its guard fired); parts: its ``predicted_s`` and lateness.
    """

    name = "guarded-sjf"
    summary = GuardedSjfNaive.summary
    Params = GuardedSjfParams
    components = GuardedSjfNaive.components
    reads = GuardedSjfNaive.reads
    tenant_state = GuardedSjfNaive.tenant_state
    naive = GuardedSjfNaive
    params: GuardedSjfParams

    def __init__(self, tasks: TaskTable, params: GuardedSjfParams | None = None) -> None:
        super().__init__(tasks, params)
        self.init_guard()
        self.queued: set[int] = set()
        self.queued_work = 0
        self.by_deadline: list[tuple[float, float, int]] = []
        self.by_size: list[tuple[float, float, int]] = []
        self.dead = 0
        self.stale: dict[int, int] = {}
        """Heap entries still held for each task that left the queue (lazy deletion): a
        task pushed again (a lease that expired) has them purged first, or its old deadline
        would count as live beside its new one."""

    def __len__(self) -> int:
        return len(self.queued)

    def purge(self, i: int) -> None:
        """Drop the heap entries left by ``i``'s earlier time in the queue: O(n), on a
        handed-back task only."""
        self.dead -= self.stale.pop(i)
        self.by_deadline = without_task(self.by_deadline, i)
        self.by_size = without_task(self.by_size, i)

    def push(self, i: int, now: float) -> None:
        if i in self.stale:
            self.purge(i)
        p = self.tasks.predicted_s[i]
        u = units(p)
        d = self.deadline[i] = self.deadline_of(u, self.queued_work, self.params)
        self.queued_work += u
        self.queued.add(i)
        s = self.tasks.submit_s[i]
        heapq.heappush(self.by_deadline, (d, s, i))
        heapq.heappush(self.by_size, (p, s, i))

    def clean(self) -> None:
        """Pop the dead entries off the top of both heaps, so that each top is a queued task
        (or the heap is empty) and a walk (``pop_sequence``) starts at a live entry."""
        queued, stale = self.queued, self.stale
        for heap in (self.by_deadline, self.by_size):
            while heap and heap[0][2] not in queued:
                i = heapq.heappop(heap)[2]
                self.dead -= 1
                if stale[i] == 1:
                    del stale[i]
                else:
                    stale[i] -= 1

    def winner(self) -> int:
        d, _, i = self.by_deadline[0]
        if d <= self.clock:
            return i
        return self.by_size[0][2]

    def pop(self, now: float) -> int:
        i = self.winner()
        self.take(i, now)
        return i

    def leave(self, i: int) -> int:
        """Drop ``i`` from the queue (its heap entries die) and return its units."""
        self.queued.remove(i)
        u = units(self.tasks.predicted_s[i])
        self.queued_work -= u
        del self.deadline[i]
        self.dead += 2
        self.stale[i] = self.stale.get(i, 0) + 2
        if self.dead > 2 * len(self.queued) + 64:
            self.compact()
        else:
            self.clean()
        return u

    def compact(self) -> None:
        """Rebuild both heaps from the live entries (the order of the keys is unchanged)."""
        queued = self.queued
        self.by_deadline = [e for e in self.by_deadline if e[2] in queued]
        self.by_size = [e for e in self.by_size if e[2] in queued]
        heapq.heapify(self.by_deadline)
        heapq.heapify(self.by_size)
        self.dead = 0
        self.stale.clear()

    def take(self, i: int, now: float) -> None:
        late = self.lateness_s(i)
        self.score, self.parts = late, (self.tasks.predicted_s[i], late)
        self.clock += self.leave(i)

    def remove(self, i: int, now: float) -> None:
        u = self.leave(i)
        self.pushed_work -= u
        self.pushed -= 1

    def pop_sequence(self, now: float, skip: Collection[int] = ()) -> Iterator[int]:
        """Successive pops from the current state, by lazy walks of both heaps, without the
        tasks of the tenant codes in ``skip`` (they are popped in the walk all the same, as
        the contract's default does)."""
        tenant = self.tasks.tenant
        clock = self.clock
        gone: set[int] = set()
        by_deadline = LazyWalk(self.by_deadline, self.queued)
        by_size = LazyWalk(self.by_size, self.queued)
        while len(gone) < len(self.queued):
            due = by_deadline.peek(gone)
            assert due is not None
            if due[0] <= clock:
                i = due[2]
            else:
                shortest = by_size.peek(gone)
                assert shortest is not None
                i = shortest[2]
            gone.add(i)
            clock += units(self.tasks.predicted_s[i])
            if not skip or tenant[i] not in skip:
                yield i

    def pop_fitting(self, now, fits, limit=None):  # type: ignore[no-untyped-def]
        """The lazy walk of ``pop_sequence`` and a ``take`` of the winner."""
        return self.pop_fitting_by_walk(now, fits, limit)

    def state(self) -> dict[str, Any] | None:
        return self.guard_state(self.tasks, self.queued)

    def restore(self, state: dict[str, Any]) -> None:
        self.restore_guard(self.tasks, self.queued, state)
        self.by_deadline = [(self.deadline[i], self.tasks.submit_s[i], i) for i in self.queued]
        heapq.heapify(self.by_deadline)
        self.by_size = [(self.tasks.predicted_s[i], self.tasks.submit_s[i], i)
                        for i in self.queued]
        heapq.heapify(self.by_size)
        self.dead = 0
        self.stale.clear()
