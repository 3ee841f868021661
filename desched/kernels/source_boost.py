"""Kernel source, continued (``desched.kernels.source``): ``boost-predicted`` and
``fair-boost``, over the online γ estimate of ``desched.policies.boost_predicted``.

Compiled together with ``source.py`` (one module, one namespace); CPython runs it with the
helpers imported from there. The estimator is ``BoostEstimator`` operation for operation:
each task's label ``(c, θ)`` as ``shifted_exponential`` computes it, the boost by
``desched.structures.exp2.expd`` (IEEE operations only: the same bits on every CPU, where
numpy's ``exp`` differs with AVX-512) and the C library's ``log1p`` (CPython's
``math.log1p``), the refresh's ``E[e^(γS)]`` by ``expd`` too and ``math.fsum``'s exact
summation, its special values and its final half-even correction.

Estimator state (both policies): ``fe`` holds each task's ``c`` (``[0, n)``) and ``θ``
(``[n, 2n)``), then the window's ring of labels and submit times (``c``, ``θ``, ``submit``,
``W`` each, oldest at ``sc[12]``, ``sc[11]`` of them), ``fsum``'s partials (``W + 1``) and
the window's ``c`` and ``θ`` oldest first (``W`` each, copied at each refresh); ``fd`` and
``ff`` (``W``) the exponents and their ``expd``; ``sc[8]`` dispatches,
``sc[9]`` running, ``sc[10]`` the most running at once, ``sc[13]`` 1 once γ is known,
``sc[14]`` what CPython would have raised (1: ``OverflowError``, 2: ``ValueError``);
``sg[0]`` γ, ``sg[1]`` the mean size; ``prm = window,
workers, max_load, scale, sympathy``.
"""

from __future__ import annotations

import math

from desched.kernels.arrays import F64, I64
from desched.kernels.source import (
    isnan,
    log1p,
    sift_down,
    sqrt,
    task_pop,
    task_push,
    vtc_enqueue,
    vtc_init,
    vtc_pop,
)
from desched.structures.exp2 import expd

__all__ = ["F64", "I64", "math"]

LN2 = 0.6931471805599453  # math.log(2.0), as desched.policies.boost_predicted (a test checks)
LN5 = 1.6094379124341003
LN10 = 2.302585092994046
MAX_EXPONENT = 700.0
BISECTIONS = 40
BRACKET = 9.094947017729282e-13  # 2.0 ** -BISECTIONS
DOUBLINGS = 2000


def finite(x: float) -> bool:
    return x - x == 0.0


def fabs(x: float) -> float:
    return -x if x < 0.0 else x


def fsum(vals: F64, count: int, p: F64, base: int, sc: I64) -> float:
    """``math.fsum(vals[:count])``, CPython's algorithm (Shewchuk's partials in
    ``p[base:]``, at most ``count`` of them); where CPython raises, ``sc[14]`` is set and
    the sum is NaN."""
    m = 0
    special = 0.0
    inf_sum = 0.0
    for j in range(count):
        x = vals[j]
        xsave = x
        i = 0
        for q in range(m):
            y = p[base + q]
            if fabs(x) < fabs(y):
                t = x
                x = y
                y = t
            hi = x + y
            yr = hi - x
            lo = y - yr
            if lo != 0.0:
                p[base + i] = lo
                i += 1
            x = hi
        m = i
        if x != 0.0:
            if not finite(x):
                if finite(xsave):
                    sc[14] = 1
                    return math.nan
                if not isnan(xsave):
                    inf_sum += xsave
                special += xsave
                m = 0
            else:
                p[base + m] = x
                m += 1
    if special != 0.0:
        if isnan(inf_sum):
            sc[14] = 2
            return math.nan
        return special
    total = 0.0
    if m > 0:
        m -= 1
        total = p[base + m]
        lo = 0.0
        while m > 0:
            x = total
            m -= 1
            y = p[base + m]
            total = x + y
            yr = total - x
            lo = y - yr
            if lo != 0.0:
                break
        if m > 0 and ((lo < 0.0 and p[base + m - 1] < 0.0)
                      or (lo > 0.0 and p[base + m - 1] > 0.0)):
            y = lo * 2.0
            x = total + y
            yr = x - total
            if y == yr:
                total = x
    return total


# the estimator ------------------------------------------------------------------------------


def est_init(sc: I64) -> None:
    """An empty estimate."""
    for j in range(8, 15):
        sc[j] = 0


def est_label(i: int, n: int, pred: F64, p50: F64, p90: F64, fe: F64) -> None:
    """Task ``i``'s label (``shifted_exponential``), from its predictions as it arrives."""
    p = pred[i]
    q50 = p50[i]
    q90 = p90[i]
    median = q50 if q50 > 0.0 and finite(q50) else p
    c = 0.0
    theta = p
    if finite(q90):
        if q90 <= median:
            c = median
            theta = 0.0
        else:
            theta = (q90 - median) / LN5
            c = median - theta * LN2
            if c < 0.0:
                c = 0.0
                theta = q90 / LN10
    fe[i] = c
    fe[n + i] = theta


def est_boost(i: int, n: int, prm: F64, sc: I64, sg: F64, fe: F64) -> float:
    """``BoostEstimator.boost`` of task ``i``'s label under the current γ."""
    if sc[13] == 0:
        return 0.0
    return label_boost(fe[i], fe[n + i], sg[0], prm[3])


def label_boost(c: float, theta: float, g: float, scale: float) -> float:
    """``BoostEstimator.boost_under`` of the label ``(c, θ)`` under a known ``g``."""
    gt = g * theta
    if gt >= 1.0 or g * c > MAX_EXPONENT:
        return 0.0
    m = expd(g * c) / (1.0 - gt)
    if m == math.inf:
        return 0.0
    if m <= 1.0:
        return math.inf
    return float(scale * (-log1p(-1.0 / m) / g))


def est_excess(g: float, lam: float, n: int, prm: F64, sc: I64, fd: F64, fe: F64,
               ff: F64) -> float:
    """``λ (mean M_l(g) - 1) - g`` over the window's labels (the refresh's copy, oldest
    first)."""
    w = int(prm[0])
    cnt = sc[11]
    pb = 2 * n + 3 * w
    oc = pb + w + 1
    ot = oc + w
    for j in range(cnt):
        fd[j] = fe[oc + j] * g
        ff[j] = expd(fd[j])
    for j in range(cnt):
        gt = fe[ot + j] * g
        if gt >= 1.0 or fd[j] > MAX_EXPONENT:
            ff[j] = math.inf
        else:
            ff[j] = ff[j] / (1.0 - gt)
    return float(lam * (fsum(ff, cnt, fe, pb, sc) / cnt - 1.0) - g)


def est_refresh(n: int, prm: F64, sc: I64, sg: F64, fd: F64, fe: F64, ff: F64) -> None:
    """``BoostEstimator.refresh``: γ by 40 geometric bisections below its bracket."""
    w = int(prm[0])
    cnt = sc[11]
    head = sc[12]
    rc = 2 * n
    rt = rc + w
    rs = rt + w
    pb = rs + w
    oc = pb + w + 1
    ot = oc + w
    lo_s = fe[rs + head]
    hi_s = lo_s
    for j in range(1, cnt):
        s = fe[rs + (head + j) % w]
        lo_s = min(lo_s, s)
        hi_s = max(hi_s, s)
    span = hi_s - lo_s
    for j in range(cnt):
        q = (head + j) % w
        fe[oc + j] = fe[rc + q]
        fe[ot + j] = fe[rt + q]
        fd[j] = fe[rc + q] + fe[rt + q]
    mean_size = fsum(fd, cnt, fe, pb, sc) / cnt
    if cnt < 2 or span <= 0.0 or mean_size <= 0.0:
        return
    workers = int(prm[1])
    if workers == 0:
        workers = max(sc[10], 1)
    lam = (cnt - 1) / span / workers
    rho = lam * mean_size
    if rho >= prm[2]:
        lam = lam * (prm[2] / rho)
    top = fe[ot]
    for j in range(1, cnt):
        x = fe[ot + j]
        if not isnan(top) and (isnan(x) or x > top):
            top = x
    if top > 0.0:
        hi = 1.0 / top
    else:
        hi = 1.0 / mean_size
        for _ in range(DOUBLINGS):
            if est_excess(hi, lam, n, prm, sc, fd, fe, ff) > 0.0:
                break
            hi = hi * 2.0
    lo = hi * BRACKET
    for _ in range(BISECTIONS):
        mid = sqrt(lo * hi)
        if est_excess(mid, lam, n, prm, sc, fd, fe, ff) > 0.0:
            hi = mid
        else:
            lo = mid
    sg[0] = sqrt(lo * hi)
    sg[1] = mean_size
    sc[13] = 1


def est_dispatched(i: int, n: int, submit: F64, prm: F64, sc: I64, sg: F64, fd: F64, fe: F64,
                   ff: F64) -> None:
    """``BoostEstimator.dispatched``: the label joins the window; γ re-solved when due."""
    sc[9] += 1
    sc[10] = max(sc[10], sc[9])
    w = int(prm[0])
    slot = sc[12]
    if sc[11] < w:
        slot = (sc[12] + sc[11]) % w
        sc[11] += 1
    else:
        sc[12] = (slot + 1) % w
    rc = 2 * n
    fe[rc + slot] = fe[i]
    fe[rc + w + slot] = fe[n + i]
    fe[rc + 2 * w + slot] = submit[i]
    sc[8] += 1
    d = sc[8]
    if d % w == 0 or (d < w and d & (d - 1) == 0):
        est_refresh(n, prm, sc, sg, fd, fe, ff)


# boost-predicted: by boosted arrival (s - b, submit, position) the heap at 0 of fa, fb, ia;
# by due time (due, submit, position) the heap at n; sc[1], sc[2] their sizes; ic[i] 1 while
# queued (entries of tasks that left are dropped at the tops); fc[i] the boost --------------


def boost_init(n: int, sc: I64, ic: I64) -> None:
    est_init(sc)
    sc[1] = 0
    sc[2] = 0
    for i in range(n):
        ic[i] = 0


def boost_push(i: int, t: float, n: int, submit: F64, pred: F64, p50: F64, p90: F64, prm: F64,
               sc: I64, sg: F64, ia: I64, ic: I64, fa: F64, fb: F64, fc: F64, fe: F64) -> None:
    est_label(i, n, pred, p50, p90, fe)
    boost_enqueue(i, est_boost(i, n, prm, sc, sg, fe), n, submit, prm, sc, sg, ia, ic, fa, fb,
                  fc)


def boost_enqueue(i: int, b: float, n: int, submit: F64, prm: F64, sc: I64, sg: F64, ia: I64,
                  ic: I64, fa: F64, fb: F64, fc: F64) -> None:
    """Task ``i`` queued with boost ``b``: its boosted arrival, and its due time if guarded."""
    s = submit[i]
    sympathy = prm[4]
    d = math.inf if sympathy == 0.0 or sc[13] == 0 else s + sympathy * sg[1]
    fc[i] = b
    ic[i] = 1
    sc[1] = task_push(fa, fb, ia, 0, sc[1], s - b, s, i)
    if d != math.inf:
        sc[2] = task_push(fa, fb, ia, n, sc[2], d, s, i)


def boost_pop(t: float, n: int, submit: F64, prm: F64, sc: I64, sg: F64, ia: I64, ic: I64,
              fa: F64, fb: F64, fc: F64, fd: F64, fe: F64, ff: F64, out: F64) -> int:
    """The earliest due task if one is due, else the smallest boosted arrival."""
    while sc[2] > 0 and ic[ia[n]] == 0:
        sc[2] = task_pop(fa, fb, ia, n, sc[2])
    while ic[ia[0]] == 0:
        sc[1] = task_pop(fa, fb, ia, 0, sc[1])
    i = ia[n] if sc[2] > 0 and fa[n] <= t else ia[0]
    out[0] = submit[i] - fc[i]
    out[1] = fc[i]
    ic[i] = 0
    est_dispatched(i, n, submit, prm, sc, sg, fd, fe, ff)
    return int(i)


def boost_complete(i: int, t: float, sc: I64) -> None:
    sc[9] -= 1


# boost-now: boost-predicted's heaps and estimate, every queued task keyed under the ranking
# γ (sg[2], set once sc[5] is 1); sc[3] the tasks queued, sc[4] the dispatches since the
# ranking γ was last set; prm[5], prm[6] rekey_depth and rekey_spread. Where a dispatch sets
# the ranking γ every queued task's boost (fc) and boosted arrival are recomputed and the heap
# at 0 rebuilt from the queued tasks (the due heap keeps its due times, fixed at push) -------


def now_init(n: int, sc: I64, ic: I64) -> None:
    boost_init(n, sc, ic)
    sc[3] = 0
    sc[4] = 0
    sc[5] = 0


def now_boost(i: int, n: int, prm: F64, sc: I64, sg: F64, fe: F64) -> float:
    """Task ``i``'s boost under the ranking γ (0 before it is set)."""
    if sc[5] == 0:
        return 0.0
    return label_boost(fe[i], fe[n + i], sg[2], prm[3])


def now_push(i: int, t: float, n: int, submit: F64, pred: F64, p50: F64, p90: F64, prm: F64,
             sc: I64, sg: F64, ia: I64, ic: I64, fa: F64, fb: F64, fc: F64, fe: F64) -> None:
    est_label(i, n, pred, p50, p90, fe)
    sc[3] += 1
    boost_enqueue(i, now_boost(i, n, prm, sc, sg, fe), n, submit, prm, sc, sg, ia, ic, fa, fb,
                  fc)


def now_pop(t: float, n: int, submit: F64, prm: F64, sc: I64, sg: F64, ia: I64, ic: I64,
            fa: F64, fb: F64, fc: F64, fd: F64, fe: F64, ff: F64, out: F64) -> int:
    """``boost_pop``, then the queue rebuilt under the estimator's γ where the dispatch sets
    the ranking γ to it."""
    i = boost_pop(t, n, submit, prm, sc, sg, ia, ic, fa, fb, fc, fd, fe, ff, out)
    sc[3] -= 1
    sc[4] += 1
    q = sc[3]
    moved = sc[13] != sc[5] or (sc[13] == 1 and sg[0] != sg[2])
    spread = int(prm[6])
    if moved and (spread == 0 or q <= int(prm[5]) or sc[4] * spread >= q):
        sg[2] = sg[0]
        sc[5] = sc[13]
        sc[4] = 0
        now_rekey(n, submit, prm, sc, sg, ia, ic, fa, fb, fc, fe)
    return i


def now_rekey(n: int, submit: F64, prm: F64, sc: I64, sg: F64, ia: I64, ic: I64, fa: F64,
              fb: F64, fc: F64, fe: F64) -> None:
    """The heap at 0 holds every queued task once, keyed under the ranking γ."""
    size = 0
    for k in range(sc[1]):
        j = ia[k]
        if ic[j] == 1:
            b = now_boost(j, n, prm, sc, sg, fe)
            fc[j] = b
            fa[size] = submit[j] - b
            fb[size] = submit[j]
            ia[size] = j
            size += 1
    sc[1] = size
    p = (size >> 1) - 1
    while p >= 0:
        sift_down(fa, fb, ia, 0, size, p, fa[p], fb[p], ia[p])
        p -= 1


def now_complete(i: int, t: float, sc: I64) -> None:
    boost_complete(i, t, sc)


# fair-boost: vtc's tenants, heaps and counters (fa: the boosted arrival, fixed at push),
# the predicted charge corrected at completion -----------------------------------------------


def fboost_init(n: int, nt: int, sc: I64, ib: I64, id_: I64, fc: F64) -> None:
    est_init(sc)
    vtc_init(n, nt, sc, ib, id_, fc)


def fboost_push(i: int, t: float, n: int, tenant: I64, submit: F64, pred: F64, p50: F64,
                p90: F64, tstart: I64, prm: F64, sc: I64, sg: F64, ia: I64, ib: I64, ic: I64,
                id_: I64, fa: F64, fb: F64, fc: F64, fe: F64) -> None:
    est_label(i, n, pred, p50, p90, fe)
    first = submit[i] - est_boost(i, n, prm, sc, sg, fe)
    vtc_enqueue(i, first, tenant, submit, tstart, sc, ia, ib, ic, id_, fa, fb, fc)


def fboost_pop(t: float, n: int, submit: F64, pred: F64, weight: F64, tstart: I64, prm: F64,
               sc: I64, sg: F64, ia: I64, ib: I64, ic: I64, id_: I64, fa: F64, fb: F64,
               fc: F64, fd: F64, fe: F64, ff: F64, out: F64) -> int:
    i = vtc_pop(t, pred, weight, tstart, sc, ia, ib, ic, id_, fa, fb, fc, out)
    est_dispatched(i, n, submit, prm, sc, sg, fd, fe, ff)
    return i


def fboost_complete(i: int, t: float, duration: F64, pred: F64, tenant: I64, weight: F64,
                    sc: I64, fc: F64) -> None:
    """``CorrectedCounters.completed``: the duration less the predicted charge."""
    k = tenant[i]
    p = pred[i]
    owed = duration[i] if isnan(p) else duration[i] - p
    fc[k] = fc[k] + owed / weight[k]
    sc[9] -= 1
