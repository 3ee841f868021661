"""``fair-sjf``: VTC across tenants, shortest predicted task first within a tenant."""

from __future__ import annotations

from desched.policies.vtc import Vtc, VtcNaive


class FairSjfNaive(VtcNaive):
    """Reference: the queued task with the smallest ``(counter of its tenant, predicted_s,
    submit_s, position)``, by a scan of the queue."""

    name = "fair-sjf"
    summary = "least-served backlogged tenant first, its shortest predicted task first"
    reads = frozenset({"predicted_s"})

    def task_key(self, i: int) -> tuple[float, ...]:
        return (self.tasks.predicted_s[i], self.tasks.submit_s[i])


class FairSjf(Vtc):
    """VTC across tenants, shortest job first (by prediction) within the chosen tenant.

    Rule: the backlogged tenant with the lowest virtual counter is served (counters, charge
    at dispatch and lift exactly as ``vtc``: Sheng et al., OSDI 2024, Algorithm 2); ties
    between tenants go to the smaller ``(predicted_s, submit_s, position)`` of their best
    task; that tenant serves its task with the smallest ``(predicted_s, submit_s, position)``.
    Fairness across tenants is VTC's; shortest-first only reorders a tenant's own work, so a
    tenant's long task waits behind its own short ones, never behind another tenant's.
    Reads only ``predicted_s`` (every task has one, so every charge happens at dispatch).
    State and cost: as ``vtc``, O(log K + log m) amortised per decision. Score logged: the
    winner's counter before this decision's charge.
    """

    name = "fair-sjf"
    summary = FairSjfNaive.summary
    reads = FairSjfNaive.reads
    naive = FairSjfNaive

    def task_key(self, i: int) -> tuple[float, ...]:
        return (self.tasks.predicted_s[i], self.tasks.submit_s[i])
