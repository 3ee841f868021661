"""What the operator page (``GET /ui``) shows: one ``Overview`` of the service, as JSON.

Two parts, neither on the request path of tenants and workers:

- **Live** (``live_part``): read from the scheduler's memory under its lock, the way one
  ``/metrics`` scrape is: the role (active or standby), the policy in force and why, the
  queued and running tasks and the controls of every tenant, the leases held. Cost O(tenants
  + leases) under the lock, once per refresh.
- **Stored** (``stored_part``): read from the state database on a connection of its own
  (never the scheduler's nor the writer's, so no request waits on it; SQLite in WAL mode and
  PostgreSQL let it read while the writer commits): per tenant the tasks done, dead and
  cancelled, the wait p50 and p95 of the tasks started in the last 5 and 60 minutes, and per
  window (``window_s`` long, at most ``MAX_WINDOWS`` of them, ending now) Jain's index over
  the tenants' mean slowdown of the tasks completed in the window and the largest service lag
  between two tenants backlogged throughout it (``desched.metrics``' definitions, as in a
  simulation run). Cost: two scans of the tasks table and O(r log r) numpy work over the
  r rows of the tasks live or ended within the windows (at most ``MAX_ROWS``, the latest by
  sequence: ``sampled`` says when the cut applied).

``OverviewCache`` computes the stored part at most once per ``refresh_s``, in a thread off
the event loop, whatever the number of viewers; nothing is computed while nobody looks. The
page itself (``operator.html`` beside this module) is static and holds no data: its script
fetches ``/ui/state`` with an operator token (``desched operators add``).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from desched.metrics import RunArrays, window_service_lags
from desched.service.records import Role
from desched.service.store import Store

if TYPE_CHECKING:
    from desched.service.scheduler import Scheduler

PAGE = Path(__file__).with_name("operator.html")
"""The operator page: static HTML, inline CSS and script, no external resource."""
MAX_WINDOWS = 60
"""Windows of the fairness charts, the latest ending now."""
MAX_ROWS = 200_000
"""Tasks read per refresh at most (the latest by sequence number)."""
MAX_LEASES = 200
"""Leases listed on the page at most (the earliest to expire)."""
RECENT_S = (300.0, 3600.0)
"""The spans of the wait percentiles: the last 5 and 60 minutes."""

Floats = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class LeaseRow:
    task_id: str
    tenant: str
    worker: str
    worker_id: str
    held_s: float
    expires_in_s: float


@dataclass(slots=True)
class TenantRow:
    tenant: str
    queued: int = 0
    running: int = 0
    done: int = 0
    dead: int = 0
    cancelled: int = 0
    weight: float = 1.0
    cap: int | None = None
    rate_per_s: float | None = None
    wait_p50_5m_s: float | None = None
    wait_p95_5m_s: float | None = None
    wait_p50_60m_s: float | None = None
    wait_p95_60m_s: float | None = None


@dataclass(slots=True)
class Overview:
    """The page's data; ``as_json`` gives what ``/ui/state`` answers."""

    now: float
    role: str
    policy: str
    params: dict[str, Any]
    policy_reason: str
    policy_error: str | None
    duration_model: bool
    memory_model: bool
    decisions: int
    completed: int
    tenants: list[TenantRow] = field(default_factory=list)
    leases: list[LeaseRow] = field(default_factory=list)
    leases_total: int = 0
    workers: list[dict[str, Any]] = field(default_factory=list)
    window_s: float = 60.0
    windows: list[dict[str, Any]] = field(default_factory=list)
    sampled: bool = False
    stored_at: float | None = None

    def as_json(self) -> dict[str, Any]:
        return {k: _finite(v) for k, v in asdict(self).items()}


def _finite(value: Any) -> Any:
    """JSON has no NaN: NaN and infinities become null, at any depth."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


@dataclass(frozen=True, slots=True)
class Live:
    """The scheduler's memory at one instant (``live_part``)."""

    active: bool
    policy: str
    params: dict[str, Any]
    recorded: bool
    default_reason: str
    policy_error: str | None
    duration_model: bool
    memory_model: bool
    decisions: int
    completed: int
    queued: dict[str, int]
    controls: list[tuple[str, float, int | None, int, float | None]]
    leases: list[tuple[str, str, str, str, float, float]]


def live_part(sched: Scheduler) -> Live:
    """Read the scheduler's memory under its lock: O(tenants + leases)."""
    with sched.lock:
        active = sched.active
        host = sched.host
        leases = [
            (t.task_id, t.tenant, t.worker or "", t.worker_id or "", t.start_s,
             t.lease_expires_at)
            for t in sched.leases.values()
        ]
        return Live(
            active=active,
            policy=host.spec.name,
            params=host.policy.params.model_dump() if active else {},
            recorded=host.spec.config is not None,
            default_reason=host.default_reason,
            policy_error=host.error,
            duration_model=sched.predictions.duration is not None,
            memory_model=sched.predictions.memory is not None,
            decisions=sched.counters.decisions,
            completed=sched.counters.completed,
            queued=dict(sched.backlog),
            controls=sched.admission.tenants(sched.tasks) if active else [],
            leases=leases,
        )


def policy_reason(live: Live) -> str:
    """Why this policy runs, in one sentence."""
    if live.policy_error:
        return live.policy_error
    if not live.recorded:
        return f"no policy recorded: the default, as {live.default_reason}"
    model = "a duration model is loaded" if live.duration_model else "no duration model loaded"
    return f"recorded as the live policy (serve --policy or policy set); {model}"


@dataclass(frozen=True, slots=True)
class Stored:
    """What the database says (``stored_part``)."""

    counts: dict[str, dict[str, int]]
    tenant_waits: dict[str, tuple[float, float, float, float]]
    windows: list[dict[str, Any]]
    workers: list[dict[str, Any]]
    sampled: bool
    at: float


def _percentiles(tenants: npt.NDArray[Any], waits: Floats) -> dict[str, tuple[float, float]]:
    """Per tenant, the p50 and p95 of its waits (numpy's linear method): one sort."""
    if waits.size == 0:
        return {}
    order = np.lexsort((waits, tenants))
    t, w = tenants[order], waits[order]
    cut = np.flatnonzero(t[1:] != t[:-1]) + 1
    out = {}
    for name, part in zip(t[np.concatenate(([0], cut))], np.split(w, cut)):
        p50, p95 = np.percentile(part, [50, 95])
        out[str(name)] = (float(p50), float(p95))
    return out


def fairness_windows(
    tenant: npt.NDArray[Any],
    submit_s: Floats,
    start_s: Floats,
    end_s: Floats,
    duration_s: Floats,
    done: npt.NDArray[np.bool_],
    edges: Floats,
) -> list[dict[str, Any]]:
    """Per window ``[lo, hi)``: Jain's index over the per-tenant mean slowdown of the tasks
    done in it (None without one), the largest service lag between two tenants backlogged
    throughout it (``desched.metrics.window_service_lags``), and how many tenants were.

    Rows are tasks as the service knows them now: a queued task has ``start_s = end_s =``
    the last edge (backlogged until now, no service yet), a leased one ``end_s =`` the last
    edge (service so far)."""
    n_windows = edges.size - 1
    if tenant.size == 0:
        lags: Floats = np.zeros(n_windows)
        backlogged = np.zeros(n_windows, dtype=np.int64)
    else:
        names, codes = np.unique(tenant, return_inverse=True)
        run = RunArrays(
            tenant=codes.astype(np.int64),
            submit_s=submit_s,
            duration_s=np.where(duration_s > 0, duration_s, 1.0),
            start_s=start_s,
            end_s=end_s,
            tenant_names=names,
        )
        lags, backlogged = window_service_lags(run, edges)
    jains: list[float | None] = [None] * n_windows
    ok = done & (duration_s > 0) & (end_s >= edges[0]) & (end_s < edges[-1])
    if ok.any():
        slow = (end_s[ok] - submit_s[ok]) / duration_s[ok]
        win = np.searchsorted(edges, end_s[ok], side="right") - 1
        for w in np.unique(win):
            inside = win == w
            means = [
                float(slow[inside][tenant[ok][inside] == k].mean())
                for k in np.unique(tenant[ok][inside])
            ]
            x = np.asarray(means)
            jains[int(w)] = float(x.sum() ** 2 / (x.size * (x * x).sum())) if (x * x).sum() else 1.0
    return [
        {
            "end_s": float(edges[j + 1]),
            "jain_slowdown": jains[j],
            "max_service_lag_s": float(lags[j]),
            "backlogged_tenants": int(backlogged[j]),
        }
        for j in range(n_windows)
    ]


def stored_part(store: Store, now: float, window_s: float) -> Stored:
    """Read the database (module docstring): two scans of ``tasks``, one of ``principals``."""
    counts: dict[str, dict[str, int]] = {}
    first_queued: dict[str, float] = {}
    for tenant, state, n, first in store.execute(
        "SELECT tenant, state, COUNT(*), MIN(submit_s) FROM tasks GROUP BY tenant, state"
    ).fetchall():
        counts.setdefault(tenant, {})[state] = int(n)
        if state == "queued":
            first_queued[tenant] = float(first)
    span = window_s * MAX_WINDOWS
    rows = store.execute(
        "SELECT tenant, submit_s, start_s, end_s, duration_s, state FROM tasks "
        "WHERE state = 'leased' OR (start_s IS NOT NULL AND end_s >= ?) "
        "ORDER BY seq DESC LIMIT ?",
        (now - span, MAX_ROWS),
    ).fetchall()
    sampled = len(rows) >= MAX_ROWS
    workers = [
        {"worker": name, "token": _token_state(expires_at, revoked_at, now)}
        for name, _, expires_at, revoked_at in store.principal_rows(Role.WORKER)
    ]
    n = len(rows) + len(first_queued)
    tenant = np.empty(n, dtype=object)
    submit, start, end, duration = (np.empty(n) for _ in range(4))
    done = np.zeros(n, dtype=bool)
    for j, (t, s, st, e, d, state) in enumerate(rows):
        tenant[j] = t
        submit[j], start[j] = s, st
        end[j] = now if e is None else e
        duration[j] = math.nan if d is None else d
        done[j] = state == "done"
    for j, (t, s) in enumerate(first_queued.items(), start=len(rows)):
        tenant[j], submit[j], start[j], end[j], duration[j] = t, s, now, now, math.nan
    started = np.asarray(start[: len(rows)])
    waits = started - submit[: len(rows)]
    by_span = [
        _percentiles(tenant[: len(rows)][started >= now - s], waits[started >= now - s])
        for s in RECENT_S
    ]
    tenant_waits = {
        name: (*by_span[0].get(name, (math.nan, math.nan)), *by_span[1][name])
        for name in by_span[1]
    }
    earliest = float(submit.min()) if n else now
    count = max(1, min(MAX_WINDOWS, math.ceil((now - earliest) / window_s)))
    edges = now - window_s * np.arange(count, -1, -1, dtype=np.float64)
    windows = fairness_windows(tenant, submit, start, end, np.nan_to_num(duration), done, edges)
    return Stored(counts, tenant_waits, windows, workers, sampled, now)


def _token_state(expires_at: float | None, revoked_at: float | None, now: float) -> str:
    if revoked_at is not None:
        return "revoked"
    if expires_at is not None and expires_at <= now:
        return "expired"
    return "active"


def combine(live: Live, stored: Stored | None, now: float, window_s: float) -> Overview:
    """The page's data from both parts; a standby (empty memory) takes its counts from the
    database."""
    rows: dict[str, TenantRow] = {}

    def row(name: str) -> TenantRow:
        found = rows.get(name)
        if found is None:
            found = rows[name] = TenantRow(name)
        return found

    for name, n in live.queued.items():
        row(name).queued = n
    for name, weight, cap, running, rate in live.controls:
        r = row(name)
        r.weight, r.cap, r.running, r.rate_per_s = weight, cap, running, rate
    if stored is not None:
        for name, by_state in stored.counts.items():
            r = row(name)
            r.done = by_state.get("done", 0)
            r.dead = by_state.get("dead", 0)
            r.cancelled = by_state.get("cancelled", 0)
            if not live.active:
                r.queued = by_state.get("queued", 0)
                r.running = by_state.get("leased", 0)
        for name, (p50_5, p95_5, p50_60, p95_60) in stored.tenant_waits.items():
            r = row(name)
            r.wait_p50_5m_s, r.wait_p95_5m_s = p50_5, p95_5
            r.wait_p50_60m_s, r.wait_p95_60m_s = p50_60, p95_60
    leases = sorted(live.leases, key=lambda lease: lease[5])
    held: dict[str, int] = {}
    for lease in leases:
        held[lease[2]] = held.get(lease[2], 0) + 1
    workers = [] if stored is None else [
        {**w, "leases": held.pop(w["worker"], 0)} for w in stored.workers
    ]
    workers += [{"worker": name, "token": "?", "leases": n} for name, n in held.items()]
    return Overview(
        now=now,
        role="active" if live.active else "standby",
        policy=live.policy,
        params=live.params,
        policy_reason=policy_reason(live),
        policy_error=live.policy_error,
        duration_model=live.duration_model,
        memory_model=live.memory_model,
        decisions=live.decisions,
        completed=live.completed,
        tenants=sorted(rows.values(), key=lambda r: (-(r.queued + r.running), r.tenant)),
        leases=[
            LeaseRow(task_id, tenant, worker, worker_id, now - start_s, expires - now)
            for task_id, tenant, worker, worker_id, start_s, expires in leases[:MAX_LEASES]
        ],
        leases_total=len(leases),
        workers=workers,
        window_s=window_s,
        windows=[] if stored is None else stored.windows,
        sampled=False if stored is None else stored.sampled,
        stored_at=None if stored is None else stored.at,
    )


class OverviewCache:
    """The stored part, recomputed at most once per ``refresh_s`` per window length on a
    connection of its own (opened at first use, closed by ``close``); callers run ``get``
    in a thread, off the event loop. Thread-safe: concurrent viewers share one computation."""

    def __init__(self, db_url: str, refresh_s: float) -> None:
        self.db_url = db_url
        self.refresh_s = refresh_s
        self._lock = threading.Lock()
        self._store: Store | None = None
        self._cached: dict[float, Stored] = {}

    def get(self, sched: Scheduler, window_s: float) -> Overview:
        live = live_part(sched)
        now = time.time()
        with self._lock:
            stored = self._cached.get(window_s)
            if stored is None or now - stored.at >= self.refresh_s:
                if self._store is None:
                    self._store = Store(self.db_url)
                stored = stored_part(self._store, now, window_s)
                self._cached = {window_s: stored}
        return combine(live, stored, now, window_s)

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None
