"""``fair-boost``: VTC across tenants, γ-Boost order inside a tenant, predicted cost corrected
at completion.

Across tenants: the Virtual Token Counter of Sheng et al., OSDI 2024 (Algorithm 2; ``vtc``),
with the predicted cost charged at dispatch (divided by the tenant's weight) and corrected
when the completion record arrives: the counter then moves by ``(duration_s -
predicted_s) / weight``, so an under-estimated task is charged in full to its own tenant (and
an over-estimated one refunded), and the service gap between backlogged tenants stays
bounded by real service, not predicted. Inside the chosen tenant: γ-Boost on predicted
sizes (Yu & Scully, 2024; ``boost-predicted``'s label model and online γ estimate, one
estimate for the whole queue), so a tenant's short tasks overtake its own long ones only
within their boost.
"""

from __future__ import annotations

import math
from typing import Any

from desched.policies.base import PolicyParams
from desched.policies.boost_predicted import (
    BoostEstimator,
    BoostEstimatorParams,
    NaiveBoostHistory,
)
from desched.policies.vtc import VirtualCounters, Vtc, VtcNaive
from desched.structures.tenant_queues import TenantQueues
from desched.trace import TaskTable


def _finite(x: float) -> float | None:
    return None if math.isinf(x) else x


class CorrectedCounters(VirtualCounters):
    """``VirtualCounters`` whose completion record corrects a predicted charge: the tenant
    is charged ``duration_s - predicted_s`` more (less, where the task was over-estimated);
    a task without a prediction is charged its ``duration_s`` as in ``vtc``."""

    def completed(self, i: int, duration_s: float) -> bool:
        k = self.tasks.tenant[i]
        p = self.tasks.predicted_s[i]
        owed = duration_s if math.isnan(p) else duration_s - p
        self.counter[k] = self.of(k) + self.tasks.charge(k, owed)
        return True


class FairBoost(Vtc):
    """VTC across tenants, γ-Boost inside the tenant (module docstring).

    Rule: the backlogged tenant with the lowest counter is served (ties: the smaller
    ``(boosted arrival, submit_s, position)`` of its best task); it serves its task with the
    smallest ``(submit_s - boost, submit_s, position)``, the boost fixed at push by
    ``BoostEstimator``. Charges: ``predicted_s / weight`` at dispatch, ``(duration_s -
    predicted_s) / weight`` at completion (``CorrectedCounters``). State: one counter per
    tenant and the last tenant that left (``vtc``), the γ estimator and each queued task's
    boosted arrival. Cost: as ``vtc``, O(log K + log m) amortised per decision, plus the
    estimator's O(window × 40) every ``window`` dispatches. Score logged: the winner's
    counter before this decision's charge.
    """

    name = "fair-boost"
    summary = ("least-served backlogged tenant first (predicted cost, corrected at "
               "completion); γ-Boost order inside the tenant")
    Params = BoostEstimatorParams
    reads = frozenset({"predicted_s", "predicted_p50_s", "predicted_p90_s"})
    tenant_state = frozenset({"service"})
    params: BoostEstimatorParams

    def __init__(self, tasks: TaskTable, params: PolicyParams | None = None) -> None:
        super().__init__(tasks, params)
        self.counters = CorrectedCounters(self.tasks)
        self.estimator = BoostEstimator(self.tasks, self.params)
        self.boosted: dict[int, float] = {}

    def task_key(self, i: int) -> tuple[float, ...]:
        """``(boosted arrival, submit_s)``; for a task not pushed yet (a gate asks for its
        ``tenant_order`` just before the push), the boosted arrival its push would fix."""
        s = self.tasks.submit_s[i]
        b = self.boosted.get(i)
        if b is None:
            est = self.estimator
            b = s - est.boost(*est.label(i))
        return (b, s)

    def push(self, i: int, now: float) -> None:
        self.estimator.pushed(i)
        self.boosted[i] = self.task_key(i)[0]
        super().push(i, now)

    def pop(self, now: float) -> int:
        i = super().pop(now)
        self._dispatched(i)
        return i

    def take(self, i: int, now: float) -> None:
        super().take(i, now)
        self._dispatched(i)

    def _dispatched(self, i: int) -> None:
        del self.boosted[i]
        self.estimator.dispatched(i)

    def remove(self, i: int, now: float) -> None:
        super().remove(i, now)
        del self.boosted[i]

    def complete(self, i: int, now: float, duration_s: float) -> None:
        super().complete(i, now, duration_s)
        self.estimator.completed(i)

    def state(self) -> dict[str, Any] | None:
        ids = self.tasks.task_id
        return {**self.counters.state(), "estimator": self.estimator.state(),
                "boosted": {ids[i]: _finite(b) for i, b in sorted(self.boosted.items())}}

    def restore(self, state: dict[str, Any]) -> None:
        """Counters, estimator and boosted arrivals from ``state``; the tenants' queues are
        rebuilt under the restored keys and every backlogged tenant refiled."""
        self.estimator.restore(state["estimator"])
        saved = state["boosted"]
        ids = self.tasks.task_id
        for i in self.boosted:
            if ids[i] in saved:
                b = saved[ids[i]]
                self.boosted[i] = -math.inf if b is None else float(b)
        self.queues = TenantQueues(self.tasks, self.task_key)
        for i in sorted(self.boosted):
            self.queues.push(i)
        super().restore(state)


class FairBoostNaive(VtcNaive):
    """Reference: ``vtc``'s naive twin (its own counters, rescans) with the completion
    correction written again, the naive estimator ``NaiveBoostHistory`` and a task key of
    ``(boosted arrival, submit_s)``."""

    name = "fair-boost"
    summary = FairBoost.summary
    Params = BoostEstimatorParams
    reads = frozenset({"predicted_s", "predicted_p50_s", "predicted_p90_s"})
    tenant_state = frozenset({"service"})
    params: BoostEstimatorParams

    def __init__(self, tasks: TaskTable, params: PolicyParams | None = None) -> None:
        super().__init__(tasks, params)
        self.est = NaiveBoostHistory(self.tasks, self.params)
        self.arrival: dict[int, float] = {}

    def task_key(self, i: int) -> tuple[float, ...]:
        return (self.arrival[i], self.tasks.submit_s[i])

    def push(self, i: int, now: float) -> None:
        self.est.pushed(i)
        self.arrival[i] = self.tasks.submit_s[i] - self.est.boost_of(i)
        super().push(i, now)

    def taken(self, i: int, now: float) -> None:
        super().taken(i, now)
        del self.arrival[i]
        self.est.dispatched(i)

    def removed(self, i: int, now: float) -> None:
        super().removed(i, now)
        del self.arrival[i]

    def complete(self, i: int, now: float, duration_s: float) -> None:
        p = self.tasks.predicted_s[i]
        self.add(self.tasks.tenant[i], duration_s if math.isnan(p) else duration_s - p)
        self.est.completed(i)

    def state(self) -> dict[str, Any] | None:
        base = super().state() or {}
        ids = self.tasks.task_id
        return {**base, "estimator": self.est.state(),
                "boosted": {ids[i]: (None if math.isinf(self.arrival[i]) else self.arrival[i])
                            for i in sorted(self.queue)}}

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        self.est.restore(state["estimator"])
        for i in self.queue:
            b = state["boosted"].get(self.tasks.task_id[i], "absent")
            if b != "absent":
                self.arrival[i] = -math.inf if b is None else float(b)


FairBoost.naive = FairBoostNaive
