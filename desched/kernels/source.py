"""The simulation kernels' source: the event loop and the policies' rules over arrays.

This module is the input of ``desched.structures.kernelc`` (a typed subset of Python,
compiled with llvmlite); it is also plain Python that CPython runs on numpy arrays. The
event loop ``sim_template`` follows DESIGN.md's semantics exactly as ``desched.simulator``
does; it calls ``policy_init``, ``policy_push``, ``policy_pop`` and ``policy_complete``,
which ``desched.kernels`` binds to one policy's functions (``<prefix>_init``, ...), passing
the loop's arrays of the same names. Each policy keeps its state in the generic arrays
``ia .. ih`` (int64) and ``fa .. fg`` (float64), sized by its ``desched.kernels.KernelSpec``,
and the scalars ``sc`` (int64; ``sc[14]`` an error the policy object would raise) and
``sg`` (float64); ``out`` receives the winner's score and
parts. Every float expression is the one the policy object (``desched.policies``) evaluates,
operand for operand, so the decisions are the same bit for bit (tests/test_kernels.py).

Common inputs: tasks by position (``submit``, ``duration``, ``pred``, its quantiles ``p50``
and ``p90`` (NaN where absent), ``tenant``), tenant
weights (``weight``, 1.0 when unset: ``x / 1.0`` is ``x``), the positions in arrival order
(``arrival``, a stable sort by ``submit``, and ``arrival_t``, their times, then ``inf``) and
the same grouped by tenant (``ttask``, tenant ``k``'s from ``tstart[k]`` to
``tstart[k + 1]``): a tenant whose tasks are served in ``(submit_s, position)`` order serves
them exactly in that order, so its queue is a counter into ``ttask``.
"""

from __future__ import annotations

import math

from desched.kernels.arrays import F64, I64
from desched.kernels.source_online import online_arrive, online_complete, online_init
from desched.structures.exp2 import exp2d

REBASE_HALF_LIVES = 64.0
"""ifs-counter's reference values are rebuilt once this many half-lives old
(``ifs_decayed_max``)."""
CANDIDATE_MARGIN = 0.9999999990686774
"""1 - 2^-30: a tenant whose reference value is below the largest times this cannot hold the
largest decayed service (``ifs_decayed_max``)."""
TINY = 1.499696813895631e-241
"""2^-800: under it the reference's error bounds are not relied on."""


UNITS_PER_S = 1000  # guarded-sjf's work unit (desched.policies.guarded_sjf)


def isnan(x: float) -> bool:
    return math.isnan(x)


def nextafter(x: float, y: float) -> float:
    return math.nextafter(x, y)


def log1p(x: float) -> float:
    return math.log1p(x)


def sqrt(x: float) -> float:
    return math.sqrt(x)


def run_push(rend: F64, rw: I64, ri: I64, size: int, end: float, w: int, i: int) -> int:
    """Push ``(end, w, i)`` on the heap of running tasks, ordered by ``(end, worker)``."""
    j = size
    while j > 0:
        parent = (j - 1) >> 1
        if end < rend[parent] or (end == rend[parent] and w < rw[parent]):
            rend[j] = rend[parent]
            rw[j] = rw[parent]
            ri[j] = ri[parent]
            j = parent
        else:
            break
    rend[j] = end
    rw[j] = w
    ri[j] = i
    return size + 1


def run_pop(rend: F64, rw: I64, ri: I64, size: int) -> int:
    """Remove the top of the heap of running tasks; returns the new size."""
    size -= 1
    end = rend[size]
    w = rw[size]
    i = ri[size]
    j = 0
    while True:
        c = 2 * j + 1
        if c >= size:
            break
        if c + 1 < size and (rend[c + 1] < rend[c] or (rend[c + 1] == rend[c]
                                                       and rw[c + 1] < rw[c])):
            c += 1
        if rend[c] < end or (rend[c] == end and rw[c] < w):
            rend[j] = rend[c]
            rw[j] = rw[c]
            ri[j] = ri[c]
            j = c
        else:
            break
    rend[j] = end
    rw[j] = w
    ri[j] = i
    return size


def int_push(h: I64, size: int, v: int) -> int:
    """Push ``v`` on a min-heap of integers."""
    j = size
    while j > 0:
        parent = (j - 1) >> 1
        if v < h[parent]:
            h[j] = h[parent]
            j = parent
        else:
            break
    h[j] = v
    return size + 1


def int_pop(h: I64, size: int) -> int:
    """Remove the top of a min-heap of integers; returns the new size."""
    size -= 1
    v = h[size]
    j = 0
    while True:
        c = 2 * j + 1
        if c >= size:
            break
        if c + 1 < size and h[c + 1] < h[c]:
            c += 1
        if h[c] < v:
            h[j] = h[c]
            j = c
        else:
            break
    h[j] = v
    return size


def key_less(k1: F64, k2: F64, ids: I64, a: int, x1: float, x2: float, xi: int) -> bool:
    """Whether entry ``a`` is before ``(x1, x2, xi)`` (tuples compared in order)."""
    return bool(k1[a] < x1 or (k1[a] == x1 and (k2[a] < x2 or (k2[a] == x2 and ids[a] < xi))))


def task_push(k1: F64, k2: F64, ids: I64, base: int, size: int,
              x1: float, x2: float, xi: int) -> int:
    """Push ``(x1, x2, xi)`` on the min-heap stored at ``base`` (a tenant's region)."""
    j = size
    while j > 0:
        parent = (j - 1) >> 1
        if key_less(k1, k2, ids, base + parent, x1, x2, xi):
            break
        k1[base + j] = k1[base + parent]
        k2[base + j] = k2[base + parent]
        ids[base + j] = ids[base + parent]
        j = parent
    k1[base + j] = x1
    k2[base + j] = x2
    ids[base + j] = xi
    return size + 1


def task_pop(k1: F64, k2: F64, ids: I64, base: int, size: int) -> int:
    """Remove the top of the min-heap stored at ``base``; returns the new size."""
    size -= 1
    sift_down(k1, k2, ids, base, size, 0, k1[base + size], k2[base + size], ids[base + size])
    return size


def sift_down(k1: F64, k2: F64, ids: I64, base: int, size: int, at: int,
              x1: float, x2: float, xi: int) -> None:
    """Place ``(x1, x2, xi)`` in the min-heap of ``size`` entries stored at ``base``, from
    position ``at`` down (its entries below ``at`` already heaps)."""
    j = at
    while True:
        c = 2 * j + 1
        if c >= size:
            break
        if c + 1 < size and key_less(k1, k2, ids, base + c + 1, k1[base + c], k2[base + c],
                                     ids[base + c]):
            c += 1
        if key_less(k1, k2, ids, base + c, x1, x2, xi):
            k1[base + j] = k1[base + c]
            k2[base + j] = k2[base + c]
            ids[base + j] = ids[base + c]
            j = c
        else:
            break
    k1[base + j] = x1
    k2[base + j] = x2
    ids[base + j] = xi


# the dense list of backlogged tenants: sc[0] slots, ic[slot] -> tenant, id_[tenant] -> slot


def slot_add(sc: I64, ic: I64, id_: I64, k: int) -> None:
    s = sc[0]
    ic[s] = k
    id_[k] = s
    sc[0] = s + 1


def slot_remove(sc: I64, ic: I64, id_: I64, k: int) -> None:
    s = id_[k]
    last = sc[0] - 1
    moved = ic[last]
    ic[s] = moved
    id_[moved] = s
    id_[k] = -1
    sc[0] = last


# the event loop ----------------------------------------------------------------------------


def policy_init(n: int) -> None:  # bound per policy
    pass


def policy_push(i: int, t: float) -> None:  # bound per policy
    pass


def policy_pop(t: float) -> int:  # bound per policy
    return 0


def policy_complete(i: int, t: float) -> None:  # bound per policy
    pass


def sim_template(n: int, workers: int, nt: int, arrival: I64, arrival_t: F64, submit: F64,
                 duration: F64, pred: F64, p50: F64, p90: F64, tenant: I64, weight: F64,
                 ttask: I64, tstart: I64, prm: F64, start: F64, worker: I64, d_task: I64,
                 d_score: F64, d_parts: F64, d_qlen: I64, d_backlog: I64, tq: I64, nparts: int,
                 rend: F64, rw: I64, ri: I64, idle: I64, out: F64, sc: I64,
                 sg: F64, ia: I64, ib: I64, ic: I64, id_: I64, ie: I64, if_: I64, ig: I64,
                 ih: I64, fa: F64, fb: F64, fc: F64, fd: F64, fe: F64, ff: F64,
                 fg: F64, ol: I64, of_: F64, ost: F64) -> int:
    """Run the ``n`` tasks on ``workers`` workers; returns the number of decisions (``n``
    unless the policy lost a task). At each instant: completions at ``t`` (in (end,
    worker) order) free their workers and reach the policy, arrivals at ``t`` join in
    trace order, then the lowest idle worker polls while the queue is not empty. Each
    decision records the queue length and the winner's tenant backlog before its pop
    (``tq``: queued tasks per tenant). Where ``ol[0]`` is 1 each arrival's predictions are
    made before the policy sees it (``desched.kernels.source_online``)."""
    online = ol[0] == 1
    if online:
        online_init(ol, of_)
    policy_init(n)
    for w in range(workers):
        idle[w] = w
    isize = workers
    rsize = 0
    queued = 0
    na = 0
    next_submit = arrival_t[0]
    decided = 0
    while True:
        if rsize > 0:
            t = rend[0]
            t = min(t, next_submit)
        elif next_submit < math.inf:
            t = next_submit
        else:
            break
        while rsize > 0 and rend[0] == t:
            w = rw[0]
            i = ri[0]
            rsize = run_pop(rend, rw, ri, rsize)
            isize = int_push(idle, isize, w)
            policy_complete(i, t)
            if online:
                online_complete(i, t, ol, of_)
        while next_submit == t:
            i = arrival[na]
            na += 1
            next_submit = arrival_t[na]
            if online:
                online_arrive(i, t, tenant, duration, pred, p50, p90, ol, of_, ost)
            policy_push(i, t)
            tq[tenant[i]] += 1
            queued += 1
        while isize > 0 and queued > 0:
            i = policy_pop(t)
            w = idle[0]
            isize = int_pop(idle, isize)
            d_task[decided] = i
            d_score[decided] = out[0]
            d_qlen[decided] = queued
            k = tenant[i]
            d_backlog[decided] = tq[k]
            tq[k] -= 1
            for p in range(nparts):
                d_parts[decided * nparts + p] = out[1 + p]
            queued -= 1
            start[i] = t
            worker[i] = w
            rsize = run_push(rend, rw, ri, rsize, t + duration[i], w, i)
            decided += 1
    return decided


# fifo: the queue is the arrival order (sc[1]: the next to start) ---------------------------


def fifo_init(n: int, sc: I64) -> None:
    sc[1] = 0


def fifo_push(i: int, t: float) -> None:
    pass


def fifo_pop(t: float, arrival: I64, submit: F64, sc: I64, out: F64) -> int:
    i = arrival[sc[1]]
    sc[1] += 1
    out[0] = t - submit[i]
    return int(i)


def fifo_complete(i: int, t: float) -> None:
    pass


# sjf-oracle / sjf-predicted: one heap by (value, submit, position); prm[0] 0: duration,
# 1: predicted; fa, fb, ia the heap, sc[1] its size -----------------------------------------


def sjf_init(n: int, sc: I64) -> None:
    sc[1] = 0


def sjf_push(i: int, t: float, prm: F64, duration: F64, pred: F64, submit: F64, sc: I64,
             fa: F64, fb: F64, ia: I64) -> None:
    v = duration[i] if prm[0] == 0.0 else pred[i]
    sc[1] = task_push(fa, fb, ia, 0, sc[1], v, submit[i], i)


def sjf_pop(t: float, sc: I64, fa: F64, fb: F64, ia: I64, out: F64) -> int:
    i = ia[0]
    out[0] = fa[0]
    sc[1] = task_pop(fa, fb, ia, 0, sc[1])
    return int(i)


def sjf_complete(i: int, t: float) -> None:
    pass


# ifs-memoryless / ifs-counter: per tenant ia[k] tasks arrived, ib[k] served (its queue is
# ttask[tstart[k] + ib[k] : tstart[k] + ia[k]], backlog ia[k] - ib[k]); the tenants by
# backlog, largest first (``by_backlog_*``: ic[pos] -> tenant, id_[tenant] -> pos, ig[b] the
# tenants whose backlog exceeds b, so ic[:ig[0]] are the backlogged ones), fe[pos] the head
# submit of the tenant at pos; if_[i] 1 once task i left the queue and sc[2] the first task in
# arrival order that has not (the oldest queued); prm = w_backlog, w_wait, w_service,
# half_life_s, counter (0/1); ifs-counter keeps per tenant fa = S_k, fb = t_k and ff[k] its
# decayed service (by exp2d, desched.structures.exp2) at the reference time ff[nt], which
# holds while ff[nt + 1] is 1 (ifs_decayed_max) ------------------------------------------------


def by_backlog_swap(ic: I64, id_: I64, fe: F64, p: int, q: int) -> None:
    """Swap the tenants at positions ``p`` and ``q`` with their head submits."""
    a = ic[p]
    b = ic[q]
    ic[p] = b
    ic[q] = a
    id_[b] = p
    id_[a] = q
    h = fe[p]
    fe[p] = fe[q]
    fe[q] = h


def by_backlog_up(ic: I64, id_: I64, ig: I64, fe: F64, k: int, b: int) -> int:
    """Tenant ``k``'s backlog goes from ``b`` to ``b + 1``: it moves to the front of its
    group (the last position of group ``b + 1``); returns its position."""
    q = ig[b]
    by_backlog_swap(ic, id_, fe, id_[k], q)
    ig[b] = q + 1
    return int(q)


def by_backlog_down(ic: I64, id_: I64, ig: I64, fe: F64, k: int, b: int) -> None:
    """Tenant ``k``'s backlog goes from ``b`` to ``b - 1``: it moves to the back of its group
    (the first position of group ``b - 1``)."""
    q = ig[b - 1] - 1
    by_backlog_swap(ic, id_, fe, id_[k], q)
    ig[b - 1] = q


def ifs_init(n: int, nt: int, sc: I64, ia: I64, ib: I64, ic: I64, id_: I64, if_: I64, ig: I64,
             fa: F64, fb: F64, ff: F64) -> None:
    sc[2] = 0
    ff[nt] = 0.0
    ff[nt + 1] = 0.0
    for k in range(nt):
        ia[k] = 0
        ib[k] = 0
        ic[k] = k
        id_[k] = k
        fa[k] = 0.0
        fb[k] = 0.0
    for i in range(n):
        if_[i] = 0
    for b in range(n + 1):
        ig[b] = 0


def ifs_push(i: int, t: float, tenant: I64, submit: F64, ia: I64, ib: I64, ic: I64, id_: I64,
             ig: I64, fe: F64) -> None:
    k = tenant[i]
    b = ia[k] - ib[k]
    q = by_backlog_up(ic, id_, ig, fe, k, b)
    if b == 0:
        fe[q] = submit[i]  # i is its tenant's head: its tasks arrive in ttask's order
    ia[k] += 1


def ifs_pop(t: float, nt: int, arrival: I64, submit: F64, ttask: I64, tstart: I64, prm: F64,
            sc: I64, ia: I64, ib: I64, ic: I64, id_: I64, if_: I64, ig: I64, fa: F64, fb: F64,
            fc: F64, fd: F64, fe: F64, ff: F64, out: F64) -> int:
    """The IFS rule of ``desched.policies.ifs_memoryless`` / ``ifs_counter``: the best
    ``(score, -head submit, -head position)`` over the backlogged tenants' heads, with the
    policy object's operations for every score it computes.

    The maxima need no pass: the largest backlog is the first tenant's, the oldest head is
    the oldest queued task (a tenant's queue is in arrival order), found by a pointer that
    skips the tasks that left. The tenants are visited by group of equal backlog ``b``, the
    largest first, and the visit stops at a group whose bound ``w_backlog * (b / max b) +
    w_wait`` is below the best score so far. The bound is exact, not an estimate: with
    non-negative weights every step of a score is a rounded operation monotone in its
    operands, ``nw = (t - h) / span <= 1`` (``t - h <= span`` before rounding), ``w_wait *
    nw <= w_wait * 1.0`` and ``- w_service * ns <= 0``, so no tenant of that group or a
    smaller one scores even as much as the best: it could not win, nor tie. Within a
    group (without the service term), the score does not increase with the head submit,
    so the group's earliest ``(head submit, head position)`` beats or ties-and-loses-to
    nobody else of it: only that head is scored. Negative weights visit every tenant.
    ifs-counter's largest decayed service is ``ifs_decayed_max``'s, and a visited tenant's
    own is computed only where its floor (``ifs_service_floor``) leaves it a chance."""
    w1 = prm[0]
    w2 = prm[1]
    w3 = prm[2]
    counter = prm[4] != 0.0
    n = ig[0]
    k = ic[0]
    maxb = float(ia[k] - ib[k])
    p = sc[2]
    while if_[arrival[p]] != 0:
        p += 1
    sc[2] = p
    span = t - submit[arrival[p]]
    maxx = 0.0
    hl = prm[3]
    if counter:
        maxx = ifs_decayed_max(t, n, nt, hl, ic, fa, fb, ff)
    prune = w1 >= 0.0 and w2 >= 0.0 and w3 >= 0.0
    f = -1.0  # a factor that takes a reference value below its tenant's ns (ifs_service_floor)
    if counter and prune and maxx >= TINY and ff[nt + 1] == 1.0:
        f = ifs_service_floor(t, nt, hl, maxx, ff)
    earliest = prune and not counter
    best = -math.inf
    best_j = 0
    best_h = 0.0
    best_p = 0
    best_nb = 0.0
    best_nw = 0.0
    best_ns = 0.0
    g = 0
    while g < n:
        k = ic[g]
        b = ia[k] - ib[k]
        end = ig[b - 1]
        nb = float(b) / maxb
        if prune and w1 * nb + w2 < best:
            break
        first = g
        last = end
        if earliest:
            m = g
            mh = fe[g]
            mp = ttask[tstart[k] + ib[k]]
            for j in range(g + 1, end):
                vh = fe[j]
                if vh <= mh:
                    kj = ic[j]
                    head = ttask[tstart[kj] + ib[kj]]
                    if vh < mh or head < mp:
                        m = j
                        mh = vh
                        mp = head
            first = m
            last = m + 1
        for j in range(first, last):
            vh = fe[j]
            nw = (t - vh) / span if span > 0.0 else 0.0
            score = w1 * nb + w2 * nw
            ns = 0.0
            if counter:
                kj = ic[j]
                if f > 0.0:
                    u = ff[kj]
                    if u >= TINY and score - w3 * (u * f) < best:
                        continue  # its score is at most that: it cannot win, nor tie
                ns = fa[kj] * exp2d((fb[kj] - t) / hl) / maxx if maxx > 0.0 else 0.0
                score = score - w3 * ns
            if score > best or (score == best and vh <= best_h):
                kj = ic[j]
                head = ttask[tstart[kj] + ib[kj]]
                if score > best or vh < best_h or head < best_p:
                    best = score
                    best_j = j
                    best_h = vh
                    best_p = head
                    best_nb = nb
                    best_nw = nw
                    best_ns = ns
        g = end
    k = ic[best_j]
    b = ia[k] - ib[k]
    i = ttask[tstart[k] + ib[k]]
    ib[k] += 1
    if_[i] = 1
    if b > 1:
        fe[best_j] = submit[ttask[tstart[k] + ib[k]]]
    by_backlog_down(ic, id_, ig, fe, k, b)
    out[0] = best
    out[1] = best_nb
    out[2] = best_nw
    out[3] = best_ns
    return int(i)


def ifs_complete(i: int, t: float, nt: int, duration: F64, tenant: I64, weight: F64, prm: F64,
                 sc: I64, fa: F64, fb: F64, fc: F64, fd: F64, ff: F64) -> None:
    """ifs-counter's record: ``S_k <- S_k * 2**(-(t - t_k) / h) + duration / weight``; the
    tenant's reference value (``ifs_decayed_max``) follows, or the reference is dropped."""
    if prm[4] == 0.0:
        return
    k = tenant[i]
    hl = prm[3]
    fa[k] = fa[k] * exp2d(-(t - fb[k]) / hl) + duration[i] / weight[k]
    fb[k] = t
    if ff[nt + 1] == 1.0:
        x = (t - ff[nt]) / hl
        u = fa[k] * exp2d(x)
        if x <= REBASE_HALF_LIVES and u < math.inf:
            ff[k] = u
        else:
            ff[nt + 1] = 0.0


def ifs_service_floor(t: float, nt: int, hl: float, maxx: float, ff: F64) -> float:
    """``f`` with ``fl(U_k f) <= ns_k = fl(value_k / maxx)`` for every tenant whose reference
    value ``U_k`` (``ifs_decayed_max``) is at least 2^-800: ``f = fl(fl(exp2d((t0 - t) / h)
    x (1 - 2^-30)) / maxx)``, whose factor ``1 - 2^-30`` covers the reference's and the decay's
    errors (each under 2^-40, ``t - t0 <= 64 h``) and four roundings. With non-negative
    weights a score is then at most ``fl(partial - fl(w_service x fl(U_k f)))`` (every step
    monotone), so a tenant whose bound is below the best score so far cannot win, nor tie,
    and its decayed service is not computed."""
    return exp2d((ff[nt] - t) / hl) * CANDIDATE_MARGIN / maxx


def ifs_rebase(t: float, nt: int, hl: float, fa: F64, fb: F64, ff: F64) -> None:
    """Every tenant's decayed service at ``t`` becomes its reference value (``ff[k]``), ``t``
    the reference time (``ff[nt]``); the reference holds (``ff[nt + 1] = 1``) where every
    value is finite and ``h > 0``."""
    ok = hl > 0.0
    for k in range(nt):
        u = fa[k] * exp2d((fb[k] - t) / hl)
        ff[k] = u
        if not (u < math.inf):
            ok = False
    ff[nt] = t
    ff[nt + 1] = 1.0 if ok else 0.0


def ifs_decayed_max(t: float, n: int, nt: int, hl: float, ic: I64, fa: F64, fb: F64,
                    ff: F64) -> float:
    """The largest decayed service ``fa[k] * exp2d((fb[k] - t) / hl)`` of the ``n``
    backlogged tenants (``ic[:n]``), the value ``max`` finds over all of them, computed for
    few of them.

    All decay alike: with every tenant's value ``U_k`` at a reference time ``t0 <= t`` (a
    rebase; a completion since then sets its tenant's ``U_k`` at ``t0`` from its new counter,
    ``2**((t_k - t0) / h)`` with ``t_k - t0 <= 64 h``), ``U_k = w_k (1 + a_k)`` and the
    value at ``t`` is ``w_k 2**(-(t - t0) / h) (1 + b_k)`` for the same real ``w_k``, with
    ``|a_k|, |b_k| < 2^-40``: ``exp2d`` is within two units in the last place and its
    argument, of magnitude at most 1000 (below, ``exp2d`` is 0), carries a relative error of
    2^-52 (``fl(t_k - t)``, then ``/ h``), which moves ``2**x`` by at most
    ``ln 2 x 1000 x 2^-52``, all while the values are normal numbers. A tenant whose ``U_k``
    is below the largest ``U`` times ``1 - 2^-30`` therefore decays to a value below that
    tenant's: only the others (those at or above the running largest ``U`` times
    ``1 - 2^-30``, a superset) get their value computed. The reference is rebuilt (every
    tenant's value computed) at the first decision, once ``t - t0`` exceeds 64 half-lives,
    after a completion that could not update it, and where the largest ``U`` or the maximum
    found is under 2^-800 (the bounds need normal numbers)."""
    if ff[nt + 1] == 1.0 and (t - ff[nt]) / hl <= REBASE_HALF_LIVES:
        m = 0.0
        maxx = 0.0
        for j in range(n):
            k = ic[j]
            u = ff[k]
            if u >= m * CANDIDATE_MARGIN:
                vx = fa[k] * exp2d((fb[k] - t) / hl)
                if j == 0 or vx > maxx:
                    maxx = vx
                m = max(m, u)
        if m >= TINY and maxx >= TINY:
            return maxx
    ifs_rebase(t, nt, hl, fa, fb, ff)
    maxx = ff[ic[0]]
    for j in range(1, n):
        vx = ff[ic[j]]
        maxx = max(maxx, vx)
    return float(maxx)


# vtc / fair-sjf: per tenant a heap in its region of ttask (fa: first key, fb: submit, ia:
# position; ib[k] its size), fc[k] its counter; slots ic/id_/sc[0]; sc[1] the last tenant
# that left (-1: none); prm[0] 1: order by predicted_s (fair-sjf), 0: by submit_s (vtc) ---


def vtc_init(n: int, nt: int, sc: I64, ib: I64, id_: I64, fc: F64) -> None:
    sc[0] = 0
    sc[1] = -1
    for k in range(nt):
        ib[k] = 0
        id_[k] = -1
        fc[k] = 0.0


def vtc_push(i: int, t: float, tenant: I64, submit: F64, pred: F64, tstart: I64, prm: F64,
             sc: I64, ia: I64, ib: I64, ic: I64, id_: I64, fa: F64, fb: F64, fc: F64) -> None:
    first = pred[i] if prm[0] != 0.0 else submit[i]
    vtc_enqueue(i, first, tenant, submit, tstart, sc, ia, ib, ic, id_, fa, fb, fc)


def vtc_enqueue(i: int, first: float, tenant: I64, submit: F64, tstart: I64, sc: I64, ia: I64,
                ib: I64, ic: I64, id_: I64, fa: F64, fb: F64, fc: F64) -> None:
    """Queue ``i`` in its tenant's heap by ``(first, submit, position)``, lifting the tenant's
    counter if it was not backlogged."""
    k = tenant[i]
    if ib[k] == 0:
        # the lift: to the lowest backlogged counter, else the last leaver's
        if sc[0] > 0:
            floor = fc[ic[0]]
            for j in range(1, sc[0]):
                c = fc[ic[j]]
                floor = min(floor, c)
            fc[k] = max(fc[k], floor)
        elif sc[1] >= 0:
            floor = fc[sc[1]]
            fc[k] = max(fc[k], floor)
        slot_add(sc, ic, id_, k)
    ib[k] = task_push(fa, fb, ia, tstart[k], ib[k], first, submit[i], i)


def vtc_pop(t: float, pred: F64, weight: F64, tstart: I64, sc: I64, ia: I64, ib: I64, ic: I64,
            id_: I64, fa: F64, fb: F64, fc: F64, out: F64) -> int:
    """The least ``(counter, head key, head position)`` among the backlogged tenants."""
    best_k = ic[0]
    for j in range(1, sc[0]):
        k = ic[j]
        a = tstart[k]
        b = tstart[best_k]
        if fc[k] < fc[best_k] or (fc[k] == fc[best_k] and key_less(fa, fb, ia, a, fa[b], fb[b],
                                                                   ia[b])):
            best_k = k
    k = best_k
    base = tstart[k]
    i = ia[base]
    out[0] = fc[k]
    ib[k] = task_pop(fa, fb, ia, base, ib[k])
    if not isnan(pred[i]):
        fc[k] = fc[k] + pred[i] / weight[k]
    if ib[k] == 0:
        slot_remove(sc, ic, id_, k)
        sc[1] = k
    return int(i)


def vtc_complete(i: int, t: float, duration: F64, pred: F64, tenant: I64, weight: F64,
                 fc: F64) -> None:
    if isnan(pred[i]):
        k = tenant[i]
        fc[k] = fc[k] + duration[i] / weight[k]


# round-robin: the ring of tenants in ia (sc[1] front, sc[2] length, nt slots); per tenant
# ib[k] arrived, ic[k] served ----------------------------------------------------------------


def rr_init(n: int, nt: int, sc: I64, ib: I64, ic: I64) -> None:
    sc[1] = 0
    sc[2] = 0
    for k in range(nt):
        ib[k] = 0
        ic[k] = 0


def rr_push(i: int, t: float, nt: int, tenant: I64, sc: I64, ia: I64, ib: I64,
            ic: I64) -> None:
    k = tenant[i]
    if ib[k] == ic[k]:
        ia[(sc[1] + sc[2]) % nt] = k
        sc[2] += 1
    ib[k] += 1


def rr_pop(t: float, nt: int, submit: F64, ttask: I64, tstart: I64, sc: I64, ia: I64, ib: I64,
           ic: I64, out: F64) -> int:
    k = ia[sc[1]]
    sc[1] = (sc[1] + 1) % nt
    sc[2] -= 1
    i = ttask[tstart[k] + ic[k]]
    ic[k] += 1
    if ib[k] > ic[k]:
        ia[(sc[1] + sc[2]) % nt] = k
        sc[2] += 1
    out[0] = t - submit[i]
    return int(i)


def rr_complete(i: int, t: float) -> None:
    pass


# guarded-sjf: sc[1] clock, sc[2] pushed work, sc[3] pushed, sc[4] queued work (units),
# sc[5], sc[6] the heap sizes; by deadline fa, fb, ia; by size fc, fd, ib; fe[i] deadline,
# ic[i] 1 while queued; prm = beta, a -------------------------------------------------------


def units(p: float) -> int:
    return max(0, round(p * UNITS_PER_S))


def gsjf_init(n: int, sc: I64, ic: I64) -> None:
    for j in range(1, 7):
        sc[j] = 0
    for i in range(n):
        ic[i] = 0


def gsjf_push(i: int, t: float, pred: F64, submit: F64, prm: F64, sc: I64, ia: I64, ib: I64,
              ic: I64, fa: F64, fb: F64, fc: F64, fd: F64, fe: F64) -> None:
    p = pred[i]
    u = units(p)
    sc[2] += u
    sc[3] += 1
    d = sc[1] + prm[0] * sc[4] + prm[1] * (sc[2] / sc[3])
    fe[i] = d
    sc[4] += u
    ic[i] = 1
    s = submit[i]
    sc[5] = task_push(fa, fb, ia, 0, sc[5], d, s, i)
    sc[6] = task_push(fc, fd, ib, 0, sc[6], p, s, i)


def gsjf_pop(t: float, pred: F64, sc: I64, ia: I64, ib: I64, ic: I64, fa: F64, fb: F64,
             fc: F64, fd: F64, fe: F64, out: F64) -> int:
    while ic[ia[0]] == 0:
        sc[5] = task_pop(fa, fb, ia, 0, sc[5])
    while ic[ib[0]] == 0:
        sc[6] = task_pop(fc, fd, ib, 0, sc[6])
    i = ia[0] if fa[0] <= sc[1] else ib[0]
    late = (sc[1] - fe[i]) / UNITS_PER_S
    out[0] = late
    out[1] = pred[i]
    out[2] = late
    ic[i] = 0
    u = units(pred[i])
    sc[4] -= u
    sc[1] += u
    return int(i)


def gsjf_complete(i: int, t: float) -> None:
    pass

