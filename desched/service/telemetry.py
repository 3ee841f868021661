"""What the service counts and how ``/metrics`` shows it (Prometheus text format 0.0.4).

``Counters`` are plain integers and one latency histogram that the scheduler bumps under its
lock: a decision costs a few attribute increments, no metric object and no extra lock. The
exposition is ``prometheus_client``'s, through a custom collector that asks the scheduler for
one ``Snapshot`` per scrape, taken under the scheduler's lock, so every number of a scrape
comes from one instant (the histogram's sum and count agree, the queue lengths sum to the
queued tasks).

Names, labels and meanings are part of the service's contract (dashboards, ``desched
live-demo`` and ``benchmarks/bench_service.py`` read them): ``desched_queue_length{tenant}``,
``desched_leased_tasks``, ``desched_tenant_weight{tenant}``, ``desched_tenant_cap{tenant}``,
``desched_tenant_running{tenant}``, ``desched_tenant_rate_limit{tenant}``, ``desched_active`` (1 while this process holds the writer lock, 0
while it stands by), the ``desched_*_total`` counters, ``desched_policy_info{policy}`` and
the ``desched_decision_latency_seconds`` histogram.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
"""Upper bounds of the decision latency histogram's buckets, seconds."""
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The media type of what ``generate_latest`` writes (the classic text format)."""


@dataclass(slots=True)
class Counters:
    """Totals since the process started (a rebuild from the database keeps them)."""

    submitted: int = 0
    decisions: int = 0
    completed: int = 0
    failed: int = 0
    dead_lettered: int = 0
    lease_expiries: int = 0
    policy_switches: int = 0
    unfit_skips: int = 0
    unfit_polls: int = 0
    policy_state_restores: int = 0
    tasks_labelled_late: int = 0
    tasks_labelled_typical: int = 0
    cancelled_queued: int = 0
    cancelled_leased: int = 0
    takeovers: int = 0
    demotions: int = 0
    state_disagreements: int = 0
    latency_sum_s: float = 0.0
    latency_buckets: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_S) + 1))

    def observe_latency(self, seconds: float) -> None:
        """Count one decision that held the lock ``seconds``; O(log buckets)."""
        self.latency_sum_s += seconds
        self.latency_buckets[bisect.bisect_left(LATENCY_BUCKETS_S, seconds)] += 1

    def copy(self) -> Counters:
        return replace(self, latency_buckets=list(self.latency_buckets))


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One instant of the scheduler, as a scrape reports it."""

    counters: Counters
    queue_length: Sequence[tuple[str, int]]
    """Queued tasks per tenant, sorted by tenant."""
    leased: int
    policy: str
    active: bool
    tenants: Sequence[tuple[str, float, int | None, int, float | None]] = ()
    """``(tenant, weight, cap, running, rate)`` of every controlled or running tenant."""
    rate_limited: int = 0


_COUNTERS = (
    ("desched_tasks_submitted", "Tasks accepted.", "submitted"),
    ("desched_decisions", "Polls answered with a task.", "decisions"),
    ("desched_tasks_completed", "Tasks completed.", "completed"),
    ("desched_task_failures", "Failed attempts reported.", "failed"),
    ("desched_tasks_dead_lettered", "Tasks dead-lettered.", "dead_lettered"),
    ("desched_lease_expiries", "Leases that expired.", "lease_expiries"),
    ("desched_policy_switches", "Live policy switches.", "policy_switches"),
    (
        "desched_policy_state_restores",
        "Starts and rebuilds that took back the policy state saved by an earlier run.",
        "policy_state_restores",
    ),
    (
        "desched_tasks_labelled_late",
        ("Live tasks stored without a prediction, predicted when a policy ranking on "
         "predictions was installed over them."),
        "tasks_labelled_late",
    ),
    (
        "desched_tasks_labelled_typical",
        ("Tasks the duration model could not label, ranked under the median prediction of "
         "the live tasks by a policy that ranks on predictions."),
        "tasks_labelled_typical",
    ),
    (
        "desched_takeovers",
        "Times this process took the writer lock after standing by and began to serve.",
        "takeovers",
    ),
    (
        "desched_demotions",
        "Times this process lost the writer lock to another service and stood by.",
        "demotions",
    ),
    (
        "desched_state_disagreements",
        (
            "Batches that failed because a conditional write found its row otherwise than "
            "memory held it (a bug, or a row changed behind the service's back; logged at "
            "ERROR with the evidence). 0 in normal operation."
        ),
        "state_disagreements",
    ),
    (
        "desched_unfit_skips",
        "Candidates skipped because they did not fit the poll's free memory.",
        "unfit_skips",
    ),
    (
        "desched_unfit_polls",
        "Polls left without a task because none of the candidates fit.",
        "unfit_polls",
    ),
)
"""``(name without _total, help, Counters field)`` of every counter, in exposition order."""


class SchedulerCollector(Collector):
    """Turns one ``Snapshot`` per scrape into metric families."""

    def __init__(self, snapshot: Callable[[], Snapshot]) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        s = self.snapshot()
        c = s.counters
        queue = GaugeMetricFamily(
            "desched_queue_length", "Tasks queued (not leased), per tenant.", labels=["tenant"]
        )
        for tenant, n in s.queue_length:
            queue.add_metric([tenant], n)
        yield queue
        yield GaugeMetricFamily("desched_leased_tasks", "Tasks leased to workers now.", s.leased)
        yield GaugeMetricFamily(
            "desched_active",
            "1 while this process holds the writer lock and serves, 0 while it stands by.",
            int(s.active),
        )
        for name, text, attr in _COUNTERS:
            yield CounterMetricFamily(name, text, getattr(c, attr))
        cancelled = CounterMetricFamily(
            "desched_tasks_cancelled",
            "Tasks cancelled by their tenant, by the state they were cancelled in.",
            labels=["was"],
        )
        cancelled.add_metric(["queued"], c.cancelled_queued)
        cancelled.add_metric(["leased"], c.cancelled_leased)
        yield cancelled
        yield from tenant_families(s)
        info = GaugeMetricFamily("desched_policy_info", "The live policy.", labels=["policy"])
        info.add_metric([s.policy], 1)
        yield info
        buckets, total = [], 0
        for bound, n in zip((*LATENCY_BUCKETS_S, "+Inf"), c.latency_buckets):
            total += n
            buckets.append((bound if isinstance(bound, str) else repr(bound), total))
        yield HistogramMetricFamily(
            "desched_decision_latency_seconds",
            "Time to decide a lease and queue its write.",
            buckets=buckets,
            sum_value=c.latency_sum_s,
        )


def tenant_families(s: Snapshot) -> Iterator[Metric]:
    """The tenant controls in force and the tasks each tenant runs (``admission``)."""
    weight = GaugeMetricFamily(
        "desched_tenant_weight", "Tenant weight in force (1 unless set).", labels=["tenant"]
    )
    cap = GaugeMetricFamily(
        "desched_tenant_cap", "Concurrency cap in force, for capped tenants.", labels=["tenant"]
    )
    running = GaugeMetricFamily(
        "desched_tenant_running", "Tasks of the tenant leased now.", labels=["tenant"]
    )
    rate = GaugeMetricFamily(
        "desched_tenant_rate_limit",
        "Submit rate limit in force, tasks per second, for rate-limited tenants.",
        labels=["tenant"],
    )
    for tenant, w, c, n, r in s.tenants:
        weight.add_metric([tenant], w)
        running.add_metric([tenant], n)
        if c is not None:
            cap.add_metric([tenant], c)
        if r is not None:
            rate.add_metric([tenant], r)
    yield from (weight, cap, running, rate)
    yield CounterMetricFamily(
        "desched_rate_limited_submits",
        "Submits refused with 429 for their tenant's rate limit.",
        s.rate_limited,
    )


class Telemetry:
    """The counters and the registry ``/metrics`` renders; ``snapshot`` takes the
    scheduler's lock."""

    def __init__(self, snapshot: Callable[[], Snapshot]) -> None:
        self.counters = Counters()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SchedulerCollector(snapshot))

    def exposition(self) -> str:
        """The Prometheus text of one snapshot."""
        return generate_latest(self.registry).decode("utf-8")
