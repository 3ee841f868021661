"""Tenant controls in the live service: the room that holds them (``desched.controls``).

``desched tenants set TENANT --weight W --cap N --rate R/s --burst B`` records a tenant's
controls in the store (``Store.set_tenant_control``) and moves the controls epoch; the
housekeeper re-reads them when the epoch moved (``Scheduler.refresh_controls``) and
acknowledges the epoch it applied, which the command waits for. Memory is rebuilt with the
recorded controls at every start and takeover (high availability), so a standby applies
the same ones.

What each control does here is what it does in the simulator (``desched.controls``): the
weights go to the scheduler's task table, where the counting policies read them; the
``Gate`` keeps, per tenant, the tasks leased now and the priority levels queued, and chooses
what a poll gets under the caps and priorities through the policy's ``pop_fitting`` /
``pop_sequence`` and ``take`` (a skipped capped tenant leaves no trace in the policy); the
``RateLimits`` refuse a submit over the tenant's token bucket with 429 and ``Retry-After``,
and one larger than the whole bucket (its burst), which no wait lets pass, with 413.

The tasks of a tenant at its cap are left out of the poll's walk of the policy and do not
count towards ``max_fit_skips``, so that caps never leave a worker idle while another
tenant's task fits. Changing a tenant's rate or burst refills its bucket.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from desched.controls import Controls, Gate, RateLimits
from desched.service.errors import TooLarge, TooManyRequests
from desched.trace import TaskTable


class Admission:
    """The controls in force, the gate over the scheduler's task table and the submit
    buckets. Called under the scheduler's lock."""

    def __init__(self) -> None:
        self.controls = Controls()
        self.epoch = -1
        self.limits = RateLimits(self.controls)
        self.rate_limited = 0
        self.gate = Gate(TaskTable.empty())

    def reset(self, tasks: TaskTable, priority_of: Callable[[int], int]) -> None:
        """A fresh gate over ``tasks`` (memory is being rebuilt), with the controls in force."""
        self.gate = Gate(tasks, self.controls, priority_of)

    def apply(self, controls: Controls, epoch: int) -> None:
        """Put ``controls`` (recorded at ``epoch``) in force."""
        self.controls = controls
        self.epoch = epoch
        self.gate.set_controls(controls)
        self.limits.set_controls(controls)

    def check_submit(self, tenant: str, n: int, now: float) -> None:
        """Take ``n`` tokens of ``tenant``'s bucket, or refuse the whole submit: 429 when a
        wait lets it pass, 413 when ``n`` exceeds the burst."""
        wait = self.limits.take(tenant, now, n)
        if wait == 0:
            return
        control = self.controls.of(tenant)
        if math.isinf(wait):  # no wait lets it pass: a size limit, not a rate limit
            raise TooLarge(
                f"a submit of {n} tasks can never pass tenant {tenant!r}'s burst of "
                f"{control.bucket:g}: split it into submits of at most "
                f"{int(control.bucket)} tasks"
            )
        self.rate_limited += 1
        raise TooManyRequests(
            f"tenant {tenant!r} is over its rate limit of {control.rate:g} tasks/s "
            f"(burst {control.bucket:g}); retry in {wait:.3f} s",
            retry_after_s=max(1, math.ceil(wait)),
        )

    def tenants(self, tasks: TaskTable) -> list[tuple[str, float, int | None, int, float | None]]:
        """``(tenant, weight, cap, running, rate)`` of every controlled or running tenant,
        sorted by tenant (``/metrics``)."""
        running = {tasks.tenant_names[k]: n for k, n in self.gate.running.items()}
        names = sorted({*self.controls.tenants, *running})
        out = []
        for name in names:
            c = self.controls.of(name)
            out.append((name, c.weight, c.cap, running.get(name, 0), c.rate))
        return out

    def in_force(self, tenant: str) -> dict[str, Any]:
        """The controls on a decision row: ``tenant_weight`` and ``tenant_cap``."""
        c = self.controls.of(tenant)
        return {"tenant_weight": c.weight, "tenant_cap": c.cap}
