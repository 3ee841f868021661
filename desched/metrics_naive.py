"""The naive twin of ``desched.metrics.summarize``: the original per-tenant, per-window loops.

Kept as the reference that ``tests/test_metrics_fast.py`` checks the fast version against on
random runs. It does O(n) work per window (and per tenant), so it is only for tests and for
small runs. It uses the same windows (``desched.metrics.window_edges``) as the fast version.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from desched.metrics import (
    Floats,
    RunArrays,
    RunMetrics,
    TenantMetrics,
    WindowMetrics,
    jain,
    whole_run,
    window_edges,
)


def _p(x: Floats, q: float) -> float:
    return float(np.percentile(x, q)) if x.size else math.nan


def service_by(start: Floats, end: Floats, at: Floats) -> Floats:
    """Service (busy seconds) received by times ``at`` from runs ``[start, end)``.

    ``sum_i clip(x - start_i, 0, end_i - start_i) = sum_{start_i<=x}(x - start_i)
    - sum_{end_i<=x}(x - end_i)``, evaluated with prefix sums.
    """
    s = np.sort(start)
    e = np.sort(end)
    cs = np.concatenate(([0.0], np.cumsum(s)))
    ce = np.concatenate(([0.0], np.cumsum(e)))
    ns = np.searchsorted(s, at, side="right")
    ne = np.searchsorted(e, at, side="right")
    return np.asarray((ns * at - cs[ns]) - (ne * at - ce[ne]), dtype=np.float64)


def backlogged_throughout(
    submit: Floats, start: Floats, lo: Floats, hi: Floats
) -> npt.NDArray[np.bool_]:
    """Whether a tenant had a queued task at every instant of each window ``[lo, hi)``.

    A task is queued over ``[submit, start)``. The queued count is a step function; the window
    qualifies when the count is positive at ``lo`` and does not drop to zero before ``hi``.
    """
    times = np.concatenate((submit, start))
    steps = np.concatenate((np.ones(submit.size), -np.ones(start.size)))
    order = np.argsort(times, kind="stable")
    times, steps = times[order], steps[order]
    uniq, first = np.unique(times, return_index=True)
    count_after = np.cumsum(steps)[np.r_[first[1:] - 1, times.size - 1]]
    zero = count_after <= 0
    zeros_before = np.concatenate(([0], np.cumsum(zero)))
    at_lo = np.searchsorted(uniq, lo, side="right") - 1
    positive_at_lo = np.where(at_lo >= 0, count_after[np.maximum(at_lo, 0)] > 0, False)
    first_after_lo = np.searchsorted(uniq, lo, side="right")
    first_at_hi = np.searchsorted(uniq, hi, side="left")
    zeros_inside = zeros_before[first_at_hi] - zeros_before[first_after_lo]
    return np.asarray(positive_at_lo & (zeros_inside == 0), dtype=np.bool_)


def summarize(run: RunArrays, workers: int, window_s: float | None = None) -> RunMetrics:
    """The same figures as ``desched.metrics.summarize``, one tenant and one window at a time."""
    wait, slow = run.wait_s, run.slowdown
    tenant = run.tenant if run.tenant_names is None else run.tenant_names[run.tenant]
    tenants, codes = np.unique(tenant, return_inverse=True)
    per_tenant: dict[str, TenantMetrics] = {}
    mean_slow = np.zeros(tenants.size)
    by_tenant = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[by_tenant], np.arange(tenants.size + 1))
    edges = window_edges(run.submit_s, run.end_s, window_s)
    lo, hi = edges[:-1], edges[1:]
    service_at = np.zeros((tenants.size, edges.size))
    backlogged = np.zeros((tenants.size, lo.size), dtype=bool)
    for k, name in enumerate(tenants):
        idx = by_tenant[bounds[k] : bounds[k + 1]]
        mean_slow[k] = float(slow[idx].mean())
        per_tenant[str(name)] = TenantMetrics(
            tasks=int(idx.size),
            mean_wait_s=float(wait[idx].mean()),
            p99_wait_s=_p(wait[idx], 99),
            mean_slowdown=mean_slow[k],
            service_s=float(run.duration_s[idx].sum()),
        )
        service_at[k] = service_by(run.start_s[idx], run.end_s[idx], edges)
        backlogged[k] = backlogged_throughout(run.submit_s[idx], run.start_s[idx], lo, hi)
    service_in = np.diff(service_at, axis=1)
    window_of = np.clip(np.searchsorted(edges, run.submit_s, side="right") - 1, 0, lo.size - 1)
    windows = []
    for w in range(lo.size):
        mask = backlogged[:, w]
        lag = float(np.ptp(service_in[mask, w])) if mask.sum() >= 2 else 0.0
        in_w = window_of == w
        if in_w.any():
            sums = np.bincount(codes[in_w], weights=slow[in_w], minlength=tenants.size)
            counts = np.bincount(codes[in_w], minlength=tenants.size)
            jain_w = jain(sums[counts > 0] / counts[counts > 0])
        else:
            jain_w = math.nan
        windows.append(
            WindowMetrics(
                start_s=float(lo[w]),
                end_s=float(hi[w]),
                tasks=int(in_w.sum()),
                jain_slowdown=jain_w,
                service_lag_s=lag,
                backlogged_tenants=int(mask.sum()),
            )
        )
    max_lag = max((w.service_lag_s for w in windows), default=0.0)
    return RunMetrics(
        **whole_run(run, workers, mean_slow, max_lag),  # the per-window parts are this file's
        window_s=float(edges[1] - edges[0]),
        windows_count=int(lo.size),
        per_tenant=per_tenant,
        windows=windows,
    )
