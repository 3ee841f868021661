"""Metrics of a run (DESIGN.md, Metrics): per task, per tenant, fairness, system.

All functions are pure numpy over per-task arrays; nothing here reads files or the clock.
Percentiles (p50, p99) are numpy's default, linear interpolation between the closest ranks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from desched.errors import DeschedError
from desched.records import Record
from desched.structures import lags_kernel

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
DEFAULT_WINDOWS = 20
MAX_WINDOWS = 1000  # a run is cut into at most this many windows (window_edges)
PAIR_CHUNK = 1 << 21  # (tenant, window) points evaluated at once in _window_lags
BOUNDED_SLOWDOWN_FLOOR_S = 10.0


class TenantMetrics(Record):
    """One tenant's figures of a run (``summarize``)."""

    tasks: int
    mean_wait_s: float
    p99_wait_s: float
    mean_slowdown: float
    service_s: float


class WindowMetrics(Record):
    """One window of a run: tasks submitted in it, Jain's index over the per-tenant mean
    slowdown of those tasks (NaN without any), the service lag among the tenants backlogged
    throughout it and how many those were."""

    start_s: float
    end_s: float
    tasks: int
    jain_slowdown: float
    service_lag_s: float
    backlogged_tenants: int


class WindowDrift(Record):
    """Scalar summaries of a run's windows: mean and minimum windowed Jain's index (over
    the ``jain_windows`` windows with submissions) and mean service lag (over the
    ``lag_windows`` windows with at least two tenants backlogged throughout)."""

    window_jain_mean: float
    window_jain_min: float
    window_lag_mean_s: float
    jain_windows: int = 0
    lag_windows: int = 0

    @classmethod
    def of(cls, windows: list[WindowMetrics]) -> WindowDrift:
        jains = [w.jain_slowdown for w in windows if not math.isnan(w.jain_slowdown)]
        lags = [w.service_lag_s for w in windows if w.backlogged_tenants >= 2]
        return cls(
            window_jain_mean=float(np.mean(jains)) if jains else math.nan,
            window_jain_min=float(np.min(jains)) if jains else math.nan,
            window_lag_mean_s=float(np.mean(lags)) if lags else 0.0,
            jain_windows=len(jains),
            lag_windows=len(lags),
        )


class RunMetrics(Record):
    """The metrics of DESIGN.md for a finished run (``summarize``)."""

    tasks: int
    mean_wait_s: float
    p99_wait_s: float
    mean_response_s: float
    p50_response_s: float
    p99_response_s: float
    mean_slowdown: float
    mean_bounded_slowdown: float
    jain_slowdown: float
    max_service_lag_s: float
    utilization: float
    makespan_s: float
    window_s: float
    # how many windows ``windows`` holds (at most MAX_WINDOWS); None in
    # summaries written before it was recorded
    windows_count: int | None = None
    per_tenant: dict[str, TenantMetrics] | None = None
    windows: list[WindowMetrics]

    def drift(self) -> WindowDrift:
        """``WindowDrift`` of this run's windows."""
        return WindowDrift.of(self.windows)


@dataclass(frozen=True, slots=True)
class RunArrays:
    """Per-task arrays of a finished run, aligned by task position.

    ``tenant`` holds the tenant names, or, when ``tenant_names`` (sorted, distinct, each with
    a task) is given, integer codes into it: sorting a million strings costs more than the
    rest of the metrics together, and a data frame library finds the codes much faster.
    The metrics do not depend on ``start_order`` and ``end_order``, only their cost does.
    """

    tenant: npt.NDArray[np.str_] | npt.NDArray[np.object_] | npt.NDArray[np.int64]
    submit_s: Floats
    duration_s: Floats
    start_s: Floats
    end_s: Floats
    tenant_names: npt.NDArray[np.str_] | npt.NDArray[np.object_] | None = None
    start_order: Ints | None = None
    """Task positions in start order (a run's decision order), if known: it spares a sort.
    Any permutation that sorts ``start_s`` will do; one that does not is ignored."""
    end_order: Ints | None = None
    """Task positions in end order (a run's completion order), if known, as ``start_order``."""

    def tenant_codes(self) -> tuple[npt.NDArray[Any], Ints]:
        """The distinct tenant names, sorted, and each task's index into them."""
        if self.tenant_names is not None:
            return np.asarray(self.tenant_names), np.asarray(self.tenant, dtype=np.int64)
        names, codes = np.unique(self.tenant, return_inverse=True)
        return names, codes.astype(np.int64).reshape(-1)

    @property
    def wait_s(self) -> Floats:
        return self.start_s - self.submit_s

    @property
    def response_s(self) -> Floats:
        return self.end_s - self.submit_s

    @property
    def slowdown(self) -> Floats:
        return self.response_s / self.duration_s

    @property
    def bounded_slowdown(self) -> Floats:
        floor = np.maximum(self.duration_s, BOUNDED_SLOWDOWN_FLOOR_S)
        return np.maximum(1.0, self.response_s / floor)


def jain(values: npt.ArrayLike) -> float:
    """Jain's index ``(sum x)^2 / (n * sum x^2)``: 1 when all equal, 1/n at worst; NaN if empty."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return math.nan
    with np.errstate(over="ignore"):
        sq = float(np.sum(x * x))
    total = float(np.sum(x))
    if math.isinf(sq) or abs(total) > 1e150:  # squares past the float range: scale first
        top = float(np.max(np.abs(x)))
        if not math.isfinite(top):
            return math.nan
        x = x / top
        sq, total = float(np.sum(x * x)), float(np.sum(x))
    return total ** 2 / (x.size * sq) if sq > 0 else 1.0


def _p(x: Floats, q: float) -> float:
    return float(np.percentile(x, q)) if x.size else math.nan


def sorting(values: Floats, hint: Ints | None = None) -> Ints:
    """A permutation that sorts ``values``: ``hint`` when it does (checked in O(n)), else
    the stable sort, which takes linear time on values already in order."""
    if hint is not None and hint.size == values.size:
        v = values[hint]
        if bool(np.all(v[1:] >= v[:-1])):
            return np.asarray(hint, dtype=np.int64)
    return np.asarray(np.argsort(values, kind="stable"), dtype=np.int64)


def order_by(codes: Ints, values: Floats, by_value: Ints | None = None) -> Ints:
    """``np.lexsort((values, codes))`` (by code, then value, then position), as two stable
    sorts: by value, then by code, which a radix sort does in O(n) for fewer than 65,536
    codes; the same permutation at about half the cost of ``lexsort`` on a million rows.
    ``by_value``, a permutation that sorts ``values`` (``sorting``), spares the first sort;
    tasks of one code with equal values may then come in another order, which no caller
    here depends on (they read counts, sums and values at the ends of such runs)."""
    if by_value is None:
        by_value = np.argsort(values, kind="stable")
    c = codes[by_value]
    if c.size and 0 <= int(c.min()) and int(c.max()) < 1 << 16:
        c = c.astype(np.uint16)
    return np.asarray(by_value[np.argsort(c, kind="stable")], dtype=np.int64)


PARTITION_GROUPS = 4096
"""Up to this many groups, ``_group_percentile`` selects within each group (O(n)) rather than
sorting every value."""


def _group_percentile(codes: Ints, values: Floats, counts: Ints, q: float) -> Floats:
    """Per-group ``np.percentile(values[codes == k], q)`` (linear method) for every group ``k``
    with at least one value, all groups at once: the two order statistics each percentile
    interpolates between, by a selection within each group (O(n), a radix sort by group
    then ``np.partition``) for up to ``PARTITION_GROUPS`` groups, else by one sort
    (O(n log n)); both find the same values."""
    first = np.concatenate(([0], np.cumsum(counts)[:-1]))
    virtual = (q / 100.0) * (counts - 1).astype(np.float64)
    below = np.floor(virtual).astype(np.int64)
    above = np.minimum(below + 1, counts - 1)
    frac = virtual - below
    if counts.size <= PARTITION_GROUPS:
        v = values[np.argsort(codes.astype(np.uint16), kind="stable")]
        a = np.full(counts.size, math.nan)
        b = np.full(counts.size, math.nan)
        for k in np.flatnonzero(counts > 0).tolist():
            group = v[first[k] : first[k] + counts[k]]
            group.partition((int(below[k]), int(above[k])))
            a[k], b[k] = group[below[k]], group[above[k]]
    else:
        v = values[order_by(codes, values)]
        a = v[first + below]
        b = v[first + above]
    diff = b - a
    # numpy's _lerp: from the nearer end, so that the result stays within [a, b]
    return np.asarray(np.where(frac >= 0.5, b - diff * (1.0 - frac), a + diff * frac),
                      dtype=np.float64)


def window_edges(submit_s: Floats, end_s: Floats, window_s: float | None) -> Floats:
    """Window boundaries from the first submission to the last completion.

    The default length is the submission span divided by ``DEFAULT_WINDOWS``, so every policy
    run on one trace is cut into the same windows. The length is never less than the run's
    span (first submission to last completion) over ``MAX_WINDOWS``, so a run has at most
    ``MAX_WINDOWS`` windows whatever is asked (a 1-s burst served for hours would otherwise be
    cut into hundreds of thousands); the summary states the length used and the count.
    """
    if window_s is not None and not (math.isfinite(window_s) and window_s > 0):
        raise DeschedError(f"window_s must be a positive number of seconds, got {window_s}")
    t0 = float(submit_s.min())
    t1 = float(end_s.max())
    if window_s is None:
        # a trace submitted at one instant gets the shortest windows, as one whose
        # submissions span a millisecond does, not one window that hides every lag
        window_s = (float(submit_s.max()) - t0) / DEFAULT_WINDOWS
    # the factor keeps ceil() at MAX_WINDOWS despite rounding of the division
    window_s = max(window_s, (t1 - t0) / MAX_WINDOWS * (1.0 + 1e-12))
    count = max(1, math.ceil((t1 - t0) / window_s))
    return np.asarray(t0 + window_s * np.arange(count + 1), dtype=np.float64)


def _busy_runs(
    codes: Ints, submit: Floats, start: Floats, start_order: Ints | None = None,
    by_start: Ints | None = None,
) -> tuple[Ints, Floats, Floats]:
    """Per tenant, the maximal intervals ``[p, q)`` over which it had a queued task, as
    ``busy_runs_by_events`` finds them (the reference: events at one instant applied together,
    an interval ends at the first instant after which the tenant's queued count is zero),
    in (tenant, time) order, without its sort of the 2n events.

    With one tenant's submissions sorted, ``S_1 <= ... <= S_m``, and its starts sorted,
    ``B_1 <= ... <= B_m``, ``B_j >= S_j`` (every task starts at or after its submission), so
    the count after an instant ``x`` is ``#{S <= x} - #{B <= x}`` and, at a start instant
    ``x = B_j`` (``j`` its last index, ``j0`` its first), it is zero after ``x`` and was not
    before exactly when ``S_{j+1} > x`` and ``S_{j0} < x``: an interval ends there; at a
    submission instant ``x = S_i`` (``i`` its last index, ``i0`` its first) it was zero
    before ``x`` and is not after exactly when ``B_{i0-1} < x`` and ``B_i > x``: an interval
    starts there (no instant does both). Two sorts by (tenant, time) of n values (radix by
    tenant; ``by_start`` is ``order_by(codes, start, sorting(start, start_order))`` where the
    caller has it) and a few passes; a run with a start before its submission or a NaN goes
    to the reference."""
    if not bool(np.all(start >= submit)):
        return busy_runs_by_events(codes, submit, start, start_order)
    if by_start is None:
        by_start = order_by(codes, start, sorting(start, start_order))
    by_submit = order_by(codes, submit, sorting(submit))
    c, s, b = codes[by_submit], submit[by_submit], start[by_start]
    n = c.size
    idx = np.arange(n)
    same_next = np.zeros(n, dtype=bool)  # position j + 1 is the same tenant's
    same_next[:-1] = c[1:] == c[:-1]
    s_last = ~same_next  # j is the last of its submission instant within the tenant
    s_last[:-1] |= s[1:] != s[:-1]
    b_last = ~same_next
    b_last[:-1] |= b[1:] != b[:-1]
    s_first = np.ones(n, dtype=bool)
    s_first[1:] = s_last[:-1]
    b_first = np.ones(n, dtype=bool)
    b_first[1:] = b_last[:-1]
    s_next = np.full(n, np.inf)  # S_{j+1} within the tenant
    s_next[:-1] = s[1:]
    s_next[~same_next] = np.inf
    b_prev = np.full(n, -np.inf)  # B_{j-1} within the tenant
    b_prev[1:] = b[:-1]
    b_prev[np.flatnonzero(~same_next[:-1]) + 1] = -np.inf
    b_j0 = np.maximum.accumulate(np.where(b_first, idx, 0))
    s_i0 = np.maximum.accumulate(np.where(s_first, idx, 0))
    closes = b_last & (s_next > b) & (s[b_j0] < b)
    opens = s_last & (b_prev[s_i0] < s) & (b > s)
    return (np.asarray(c[opens], dtype=np.int64), np.asarray(s[opens], dtype=np.float64),
            np.asarray(b[closes], dtype=np.float64))


def busy_runs_by_events(
    codes: Ints, submit: Floats, start: Floats, start_order: Ints | None = None
) -> tuple[Ints, Floats, Floats]:
    """Per tenant, the maximal intervals ``[p, q)`` over which it had a queued task: the
    reference of ``_busy_runs``, which finds the same from each tenant's sorted submissions
    and starts without sorting the 2n events.

    A task is queued over ``[submit, start)``; events at one instant are applied together, so
    an interval ends at the first instant after which the tenant's queued count is zero.
    Returns (tenant code, p, q) of every interval: one sort of the 2n events by (tenant,
    time), as a merge of the submissions and the starts in time order (``start_order``,
    when given, and a trace in submission order spare their sorts) and a radix sort.
    """
    n = codes.size
    ev_code = np.concatenate((codes, codes))
    ev_t = np.concatenate((submit, start))
    ev_step = np.concatenate((np.ones(n, np.int64), -np.ones(n, np.int64)))
    runs = np.concatenate((sorting(submit), n + sorting(start, start_order)))
    order = order_by(ev_code, ev_t, runs[np.argsort(ev_t[runs], kind="stable")])
    c, t = ev_code[order], ev_t[order]
    # every tenant's steps sum to zero, so the running total is each tenant's own count
    count = np.cumsum(ev_step[order])
    last = np.ones(c.size, dtype=bool)
    last[:-1] = (c[1:] != c[:-1]) | (t[1:] != t[:-1])
    g_code, g_t, positive = c[last], t[last], count[last] > 0
    before = np.concatenate(([False], positive[:-1]))
    opens, closes = positive & ~before, ~positive & before
    return g_code[opens], g_t[opens], g_t[closes]


def _window_lags(
    codes: Ints, n_tenants: int, run: RunArrays, edges: Floats, native: bool = True
) -> tuple[Floats, Ints]:
    """Per window ``[lo, hi)``: the service lag (largest minus smallest service received in it)
    among the tenants backlogged throughout it, and how many those were.

    A tenant is backlogged throughout a window when one of its busy runs ``[p, q)`` has
    ``p <= lo`` and ``hi <= q``; the windows of a run are a contiguous range found by two
    binary searches. Service by time ``x`` is ``sum_{start<=x}(x - start) - sum_{end<=x}(x -
    end)`` over the tenant's tasks, from per-tenant prefix sums (extended precision) found by
    one binary search over (tenant, time rank) keys. Cost O((n + P) log n) where P is the
    number of (tenant, window) pairs that qualify, at most tenants x windows; the pairs are
    handled in chunks so memory stays O(n + chunk). Where numpy's ``longdouble`` is x87's,
    ``desched.structures.lags_kernel`` walks the points once in native code with the same
    extended-precision operations (``native=False``: this numpy loop, its reference).
    """
    lo, hi = edges[:-1], edges[1:]
    n_windows = lo.size
    most = np.full(n_windows, -np.inf)
    least = np.full(n_windows, np.inf)
    backlogged = np.zeros(n_windows, dtype=np.int64)
    start_order = sorting(run.start_s, run.start_order)
    by_start = order_by(codes, run.start_s, start_order)
    run_code, p, q = _busy_runs(codes, run.submit_s, run.start_s, start_order, by_start)
    first = np.searchsorted(lo, p, side="left")
    stop = np.searchsorted(hi, q, side="right")
    keep = stop > first
    run_code, first, stop = run_code[keep], first[keep], stop[keep]
    if run_code.size == 0:
        return np.zeros(n_windows), backlogged
    end_order = sorting(run.end_s, run.end_order)
    # np.unique's values, from three runs in order merged by one stable sort
    values = np.sort(np.concatenate((run.start_s[start_order], run.end_s[end_order], edges)),
                     kind="stable")
    values = values[np.concatenate(([True], values[1:] != values[:-1]))]
    ranks = values.size
    edge_rank = np.searchsorted(values, edges)
    counts = np.bincount(codes, minlength=n_tenants)
    seg0 = np.concatenate(([0], np.cumsum(counts)[:-1]))

    def side(times: Floats, order: Ints) -> tuple[Ints, npt.NDArray[np.longdouble]]:
        ts = times[order]
        key = codes[order].astype(np.int64) * ranks + np.searchsorted(values, ts)
        prefix = np.concatenate(([0.0], np.cumsum(ts.astype(np.longdouble))))
        return key, prefix

    start_key, start_sum = side(run.start_s, by_start)
    end_key, end_sum = side(run.end_s, order_by(codes, run.end_s, end_order))
    compiled = lags_kernel.window_lags() if native else None
    if compiled is not None:
        lags_kernel.accumulate(compiled, run_code, first, stop, seg0, counts, start_key,
                               start_sum, end_key, end_sum, edges, edge_rank, ranks, most,
                               least, backlogged)
        lag = np.where(backlogged >= 2, most - least, 0.0)
        return np.asarray(lag, dtype=np.float64), backlogged
    edges_ld = edges.astype(np.longdouble)

    def service_at(k: Ints, e: Ints) -> npt.NDArray[np.longdouble]:
        # started minus ended, each ``below * x - (prefix[at] - prefix[first])``; the same
        # extended-precision operations as a running total from 0 would do (neither term is
        # -0), in place
        x = edges_ld[e]
        qkey = k * ranks + edge_rank[e]
        s0 = seg0[k]
        terms = []
        for key, prefix in ((start_key, start_sum), (end_key, end_sum)):
            at = np.searchsorted(key, qkey, side="right")
            term = (at - s0).astype(np.longdouble)
            term *= x
            term -= np.subtract(prefix[at], prefix[s0])
            terms.append(term)
        return np.subtract(terms[0], terms[1], out=terms[0])

    points = stop - first + 1  # edges first..stop of each run
    ends = np.cumsum(points)
    lo_run = 0
    while lo_run < run_code.size:
        base = ends[lo_run - 1] if lo_run else 0
        hi_run = max(int(np.searchsorted(ends, base + PAIR_CHUNK, side="right")), lo_run + 1)
        span = points[lo_run:hi_run]
        which = np.repeat(np.arange(lo_run, hi_run), span)
        offset = np.arange(which.size) - np.repeat(np.cumsum(span) - span, span)
        edge = first[which] + offset
        service = service_at(run_code[which], edge)
        # service in window e = S(e + 1) - S(e), within one run (drop each run's last edge)
        inner = offset < (span - 1)[which - lo_run]
        got = np.asarray(service[1:] - service[:-1], dtype=np.float64)[inner[:-1]]
        win = edge[:-1][inner[:-1]]
        np.maximum.at(most, win, got)
        np.minimum.at(least, win, got)
        backlogged += np.bincount(win, minlength=n_windows)
        lo_run = hi_run
    lag = np.where(backlogged >= 2, most - least, 0.0)
    return np.asarray(lag, dtype=np.float64), backlogged


DENSE_CELLS = 1 << 20
DENSE_CELLS_PER_TASK = 4
"""``_window_jain`` counts tasks per (window, tenant) cell in an array while the cells number
at most ``DENSE_CELLS`` plus this many per task, else it sorts the tasks' keys."""


def _window_jain(
    codes: Ints, n_tenants: int, slow: Floats, window_of: Ints, n_windows: int
) -> Floats:
    """Per window, Jain's index over the per-tenant mean slowdown of the tasks submitted in it
    (NaN for a window without submissions): a count per (window, tenant) cell, or, where
    the cells far outnumber the tasks, one sort of the tasks' (window, tenant) keys (the
    same sums: each adds its tasks in position order)."""
    key = window_of.astype(np.int64) * n_tenants + codes
    cells = n_windows * n_tenants
    if cells <= DENSE_CELLS_PER_TASK * key.size + DENSE_CELLS:
        tasks = np.bincount(key, minlength=cells)
        pairs = np.flatnonzero(tasks)
        mean = np.bincount(key, weights=slow, minlength=cells)[pairs] / tasks[pairs]
    else:
        pairs, inverse = np.unique(key, return_inverse=True)
        mean = np.bincount(inverse, weights=slow) / np.bincount(inverse)
    win = pairs // n_tenants
    total = np.bincount(win, weights=mean, minlength=n_windows)
    squares = np.bincount(win, weights=mean * mean, minlength=n_windows)
    members = np.bincount(win, minlength=n_windows)
    safe = np.where(squares > 0, squares, 1.0) * np.maximum(members, 1)
    value = np.where(squares > 0, total * total / safe, 1.0)
    return np.where(members > 0, value, math.nan)


def whole_run(
    run: RunArrays, workers: int, mean_slow: Floats, max_service_lag_s: float
) -> dict[str, Any]:
    """The whole-run figures of a summary, in its key order: ``mean_slow`` is the per-tenant
    mean slowdown (for Jain's index) and ``max_service_lag_s`` the largest window lag."""
    wait, resp, slow = run.wait_s, run.response_s, run.slowdown
    makespan = float(run.end_s.max() - run.submit_s.min())
    return {
        "tasks": int(wait.size),
        "mean_wait_s": float(wait.mean()),
        "p99_wait_s": _p(wait, 99),
        "mean_response_s": float(resp.mean()),
        "p50_response_s": _p(resp, 50),
        "p99_response_s": _p(resp, 99),
        "mean_slowdown": float(slow.mean()),
        "mean_bounded_slowdown": float(run.bounded_slowdown.mean()),
        "jain_slowdown": jain(mean_slow),
        "max_service_lag_s": max_service_lag_s,
        "utilization": float(run.duration_s.sum() / (workers * makespan)) if makespan > 0 else 0.0,
        "makespan_s": makespan,
    }


def summarize(run: RunArrays, workers: int, window_s: float | None = None) -> RunMetrics:
    """The metrics of DESIGN.md for a finished run.

    Returns the whole-run figures, ``per_tenant`` (tenant -> tasks, mean and p99 wait, mean
    slowdown, service) and ``windows`` (per window: tasks submitted, Jain's index over the
    per-tenant mean slowdown of tasks submitted in it, the service lag among tenants
    backlogged throughout it, and how many such tenants there were), with ``window_s`` and
    ``windows_count`` (see ``window_edges``). Cost O(n log n + P log n), P the (tenant,
    window) pairs with the tenant backlogged throughout the window, whatever the window
    length; ``desched.metrics_naive.summarize`` is the loop-by-loop reference.
    """
    wait, slow = run.wait_s, run.slowdown
    tenants, codes = run.tenant_codes()
    n_tenants = tenants.size
    counts = np.bincount(codes, minlength=n_tenants)
    mean_slow = np.bincount(codes, weights=slow, minlength=n_tenants) / counts
    mean_wait = np.bincount(codes, weights=wait, minlength=n_tenants) / counts
    p99_wait = _group_percentile(codes, wait, counts, 99)
    service = np.bincount(codes, weights=run.duration_s, minlength=n_tenants)
    per_tenant = {
        str(name): TenantMetrics(
            tasks=c, mean_wait_s=mw, p99_wait_s=pw, mean_slowdown=ms, service_s=sv,
        )
        for name, c, mw, pw, ms, sv in zip(
            tenants.tolist(), counts.tolist(), mean_wait.tolist(), p99_wait.tolist(),
            mean_slow.tolist(), service.tolist(),
        )
    }
    edges = window_edges(run.submit_s, run.end_s, window_s)
    n_windows = edges.size - 1
    window_of = np.clip(np.searchsorted(edges, run.submit_s, side="right") - 1, 0, n_windows - 1)
    submitted = np.bincount(window_of, minlength=n_windows)
    jain_w = _window_jain(codes, n_tenants, slow, window_of, n_windows)
    lag, backlogged = _window_lags(codes, n_tenants, run, edges)
    windows = [
        WindowMetrics(
            start_s=a, end_s=b, tasks=c, jain_slowdown=j, service_lag_s=g,
            backlogged_tenants=m,
        )
        for a, b, c, j, g, m in zip(
            edges[:-1].tolist(), edges[1:].tolist(), submitted.tolist(), jain_w.tolist(),
            lag.tolist(), backlogged.tolist(),
        )
    ]
    return RunMetrics(
        **whole_run(run, workers, mean_slow, float(lag.max()) if lag.size else 0.0),
        window_s=float(edges[1] - edges[0]),
        windows_count=int(n_windows),
        per_tenant=per_tenant,
        windows=windows,
    )


def window_service_lags(run: RunArrays, edges: Floats) -> tuple[Floats, Ints]:
    """Per window ``[edges[j], edges[j + 1])``: the service lag (largest minus smallest
    service received in it) among the tenants of ``run`` backlogged throughout it (0 with
    fewer than two), and how many those were; the rule and cost of ``summarize``'s
    per-window lag. The live service's operator page calls it on the tasks it knows now."""
    names, codes = run.tenant_codes()
    return _window_lags(codes, len(names), run, np.asarray(edges, dtype=np.float64))
