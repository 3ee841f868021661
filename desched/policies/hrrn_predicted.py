"""``hrrn-predicted``: highest response ratio next, on predicted durations."""

from __future__ import annotations

from desched.policies.base import NaivePolicy, Policy, PolicyParams
from desched.structures.kinetic import KineticTournament, response_ratio
from desched.trace import TaskTable


class HrrnPredictedNaive(NaivePolicy):
    """Reference: evaluates every queued task's response ratio ``((now - submit_s) + p) / p``
    at ``now`` (its own expression, not the tournament's ``response_ratio``)."""

    name = "hrrn-predicted"
    summary = "highest response ratio (wait + predicted) / predicted next, non-preemptive"
    components = ("predicted_s",)
    reads = frozenset({"predicted_s"})

    def ratio(self, i: int, now: float) -> float:
        p = self.tasks.predicted_s[i]
        waited = now - self.tasks.submit_s[i]
        return (waited + p) / p

    def key(self, i: int, now: float) -> tuple[float, ...]:
        return (self.ratio(i, now), -self.tasks.submit_s[i], -i)

    def explain(self, i: int, now: float) -> tuple[float, tuple[float, ...]]:
        return self.ratio(i, now), (self.tasks.predicted_s[i],)


class HrrnPredicted(Policy):
    """Highest response ratio next (Brinch Hansen, "Short-term scheduling in multiprogramming
    systems", SOSP 1971).

    Rule: the highest ``((now - submit_s) + p) / p`` with ``p = predicted_s`` wins, ties to
    the earlier ``submit_s`` then position: SJF that ages, so a long task that has waited
    long enough overtakes short fresh ones and nothing starves. State: none per tenant.
    Cost: each ratio is a line in time with slope ``1 / p``, so the order changes as time
    passes; a kinetic tournament tree (``KineticTournament``) keeps the winner, repairing
    only the comparisons that may have flipped: O(log n) per push, amortised O(log^2 n) per
    pop, never a scan of the queue, with decisions equal to the naive scan's bit for bit.
    ``pop_fitting`` pops and pushes back (s + 1 pops and s pushes for s refused candidates);
    ``take`` is a delete, O(log n). Score logged: the winner's response ratio; part: its
    ``predicted_s``.
    """

    name = "hrrn-predicted"
    summary = HrrnPredictedNaive.summary
    components = HrrnPredictedNaive.components
    reads = HrrnPredictedNaive.reads
    naive = HrrnPredictedNaive
    requeue_is_exact = True
    score_reads_queue = False

    def __init__(self, tasks: TaskTable, params: PolicyParams | None = None) -> None:
        super().__init__(tasks, params)
        self.tree = KineticTournament()

    def __len__(self) -> int:
        return len(self.tree)

    def push(self, i: int, now: float) -> None:
        self.tree.insert(i, self.tasks.submit_s[i], self.tasks.predicted_s[i])

    def pop(self, now: float) -> int:
        i, ratio = self.tree.best(now)
        self.tree.delete(i)
        self.score = ratio
        self.parts = (self.tasks.predicted_s[i],)
        return i

    def take(self, i: int, now: float) -> None:
        self.tree.delete(i)
        p = self.tasks.predicted_s[i]
        self.score = response_ratio(now, self.tasks.submit_s[i], p)
        self.parts = (p,)

    def remove(self, i: int, now: float) -> None:
        """A delete from the tree, O(log n)."""
        self.tree.delete(i)
