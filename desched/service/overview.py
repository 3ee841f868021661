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
  simulation run). Cost: the database's own scans of the tasks table (counts per tenant and
  state; the tasks that ended since the previous read, ``FinishedTasks``) and O(r log r)
  numpy work over the r tasks that ended within the windows or are leased (at most
  ``MAX_ROWS``, the latest by sequence: ``sampled`` says when the cut applied).

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
    """Per tenant, the p50 and p95 of its waits (numpy's linear method), all tenants at
    once: one sort, O(n log n)."""
    if waits.size == 0:
        return {}
    names, codes = np.unique(tenants, return_inverse=True)
    order = np.lexsort((waits, codes))
    w = waits[order]
    counts = np.bincount(codes, minlength=names.size)
    first = np.concatenate(([0], np.cumsum(counts)[:-1]))
    out: list[Floats] = []
    for q in (0.50, 0.95):
        virtual = q * (counts - 1).astype(np.float64)
        below = np.floor(virtual).astype(np.int64)
        above = np.minimum(below + 1, counts - 1)
        frac = virtual - below
        out.append(w[first + below] + (w[first + above] - w[first + below]) * frac)
    return {str(k): (float(a), float(b)) for k, a, b in zip(names, out[0], out[1], strict=True)}



def _window_jain(codes: npt.NDArray[np.int64], n_tenants: int, slow: Floats,
                 window: npt.NDArray[np.int64], n_windows: int) -> list[float | None]:
    """Per window, Jain's index over the per-tenant mean of ``slow`` (None for a window
    without a value): one sort of (window, tenant) keys."""
    if slow.size == 0:
        return [None] * n_windows
    pairs, inverse = np.unique(window * n_tenants + codes, return_inverse=True)
    mean = np.bincount(inverse, weights=slow) / np.bincount(inverse)
    win = pairs // n_tenants
    total = np.bincount(win, weights=mean, minlength=n_windows)
    squares = np.bincount(win, weights=mean * mean, minlength=n_windows)
    members = np.bincount(win, minlength=n_windows)
    return [
        None if members[j] == 0 else
        (float(total[j] ** 2 / (members[j] * squares[j])) if squares[j] > 0 else 1.0)
        for j in range(n_windows)
    ]


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
    ok = done & (duration_s > 0) & (end_s >= edges[0]) & (end_s < edges[-1])
    names_ok, codes_ok = np.unique(tenant[ok], return_inverse=True)
    jains = _window_jain(
        codes_ok.astype(np.int64), max(1, names_ok.size),
        (end_s[ok] - submit_s[ok]) / duration_s[ok],
        (np.searchsorted(edges, end_s[ok], side="right") - 1).astype(np.int64), n_windows,
    )
    return [
        {
            "end_s": float(edges[j + 1]),
            "jain_slowdown": jains[j],
            "max_service_lag_s": float(lags[j]),
            "backlogged_tenants": int(backlogged[j]),
        }
        for j in range(n_windows)
    ]


COMMIT_MARGIN_S = 60.0
"""How far back, before the previous read, a refresh looks for tasks that ended: a task's
``end_s`` is the decision's time, its row commits a moment later (at most the writer's
commit timeout, 30 s), so a row may appear after a read that its time precedes."""


class FinishedTasks:
    """Every task that ended (done, dead, cancelled after a start) within the last ``span_s``,
    as numpy columns with integer tenant codes, kept between refreshes: each refresh reads
    only the rows that ended since the previous one (less ``COMMIT_MARGIN_S``, deduplicated by
    sequence number), a scan the database does on its own (no row crosses into Python but
    those). Not thread-safe: ``OverviewCache`` serialises refreshes."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.code: dict[str, int] = {}
        self.read_to = -math.inf
        self.cols: dict[str, npt.NDArray[Any]] = self._empty()

    @staticmethod
    def _empty() -> dict[str, npt.NDArray[Any]]:
        return {"seq": np.empty(0, np.int64), "tenant": np.empty(0, np.int64),
                **{c: np.empty(0) for c in ("submit_s", "start_s", "end_s", "duration_s")},
                "done": np.empty(0, bool)}

    def tenant_code(self, name: str) -> int:
        code = self.code.get(name)
        if code is None:
            code = self.code[name] = len(self.names)
            self.names.append(name)
        return code

    def refresh(self, store: Store, now: float, span_s: float) -> None:
        since = max(now - span_s, self.read_to - COMMIT_MARGIN_S)
        rows = store.ended_since(since, MAX_ROWS)
        self.read_to = now
        cols = self.cols
        keep = cols["end_s"] >= now - span_s
        if rows:
            new_seq = np.fromiter((r[0] for r in rows), np.int64, len(rows))
            fresh = ~np.isin(new_seq, cols["seq"][keep])
            rows = [r for r, f in zip(rows, fresh, strict=True) if f]
        if rows:
            add = {
                "seq": np.fromiter((r[0] for r in rows), np.int64, len(rows)),
                "tenant": np.fromiter((self.tenant_code(r[1]) for r in rows), np.int64,
                                      len(rows)),
                "submit_s": np.fromiter((r[2] for r in rows), np.float64, len(rows)),
                "start_s": np.fromiter((r[3] for r in rows), np.float64, len(rows)),
                "end_s": np.fromiter((r[4] for r in rows), np.float64, len(rows)),
                "duration_s": np.fromiter((math.nan if r[5] is None else r[5] for r in rows),
                                          np.float64, len(rows)),
                "done": np.fromiter((r[6] == "done" for r in rows), bool, len(rows)),
            }
            self.cols = {k: np.concatenate((v[keep], add[k])) for k, v in cols.items()}
        else:
            self.cols = {k: v[keep] for k, v in cols.items()}
        if self.cols["seq"].size > MAX_ROWS:
            latest = np.argsort(self.cols["seq"])[-MAX_ROWS:]
            self.cols = {k: v[latest] for k, v in self.cols.items()}


def stored_part(store: Store, now: float, window_s: float, finished: FinishedTasks) -> Stored:
    """Read the database (module docstring): the counts per tenant and state (one scan of
    ``tasks`` by the database), the leased tasks (the live index), the tasks that ended
    since the previous read (``FinishedTasks``), the workers."""
    counts: dict[str, dict[str, int]] = {}
    first_queued: dict[str, float] = {}
    for tenant, state, n, first in store.tenant_state_counts():
        counts.setdefault(tenant, {})[state] = int(n)
        if state == "queued":
            first_queued[tenant] = float(first)
    span = window_s * MAX_WINDOWS
    finished.refresh(store, now, max(span, RECENT_S[-1]))
    leased = store.leased_rows()
    workers = [
        {"worker": name, "token": _token_state(expires_at, revoked_at, now)}
        for name, _, expires_at, revoked_at in store.principal_rows(Role.WORKER)
    ]
    f = finished.cols
    extra = [(finished.tenant_code(t), s, st, now) for t, s, st in leased]
    extra += [(finished.tenant_code(t), s, now, now) for t, s in first_queued.items()]
    tenant = np.concatenate((f["tenant"], np.array([e[0] for e in extra], np.int64)))
    submit = np.concatenate((f["submit_s"], np.array([e[1] for e in extra], np.float64)))
    start = np.concatenate((f["start_s"], np.array([e[2] for e in extra], np.float64)))
    end = np.concatenate((f["end_s"], np.array([e[3] for e in extra], np.float64)))
    duration = np.concatenate((f["duration_s"], np.full(len(extra), np.nan)))
    done = np.concatenate((f["done"], np.zeros(len(extra), bool)))
    started_n = f["seq"].size + len(leased)  # rows with a real start: finished, then leased
    waits = start[:started_n] - submit[:started_n]
    by_span = []
    for recent in RECENT_S:
        pick = start[:started_n] >= now - recent
        coded = _percentiles(tenant[:started_n][pick], waits[pick])
        by_span.append({finished.names[int(k)]: v for k, v in coded.items()})
    tenant_waits = {
        name: (*by_span[0].get(name, (math.nan, math.nan)), *by_span[1][name])
        for name in by_span[1]
    }
    earliest = float(submit.min()) if submit.size else now
    count = max(1, min(MAX_WINDOWS, math.ceil((now - earliest) / window_s)))
    edges = now - window_s * np.arange(count, -1, -1, dtype=np.float64)
    inside = end >= edges[0]
    windows = fairness_windows(tenant[inside], submit[inside], start[inside],
                               end[inside], np.nan_to_num(duration[inside]), done[inside],
                               edges)
    return Stored(counts, tenant_waits, windows, workers,
                  f["seq"].size >= MAX_ROWS, now)


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
        self._finished = FinishedTasks()

    def get(self, sched: Scheduler, window_s: float) -> Overview:
        live = live_part(sched)
        now = time.time()
        with self._lock:
            stored = self._cached.get(window_s)
            if stored is None or now - stored.at >= self.refresh_s:
                if self._store is None:
                    self._store = Store(self.db_url)
                stored = stored_part(self._store, now, window_s, self._finished)
                self._cached = {window_s: stored}
        return combine(live, stored, now, window_s)

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None
