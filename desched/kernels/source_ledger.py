"""Kernel source, continued (``desched.kernels.source``): ``boost-ledger``, ``boost-lanes``'
kernel (``desched.kernels.source_lanes``) with the per-tenant overtaking ledger and its guard
of ``desched.policies.boost_ledger``.

State beyond ``boost-lanes``': per tenant ``k`` (``nt`` of them) ``id_[k]`` its queued
tasks, ``id_[nt + k]`` the number of its backlog period, ``id_[2 nt + k]`` a pointer into
``ttask`` at its oldest queued task (its *head*), ``id_[3 nt + k]`` 1 while it is flagged,
``fg[2 k]`` its ledger, ``fg[2 k + 1]`` a ledger below which it cannot be owed (below) and
``fg[2 nt + k]`` the start of its backlog period; ``sc[5]`` the periods numbered so far, and
a tenant without a queued task has period number ``ENDED``. The loop pushes tasks in
``(submit_s, position)`` order and never again, so a tenant's queued tasks are those of its
run of ``ttask`` (the same order) that were pushed and not dispatched, and its head changes
only when the head itself is dispatched (the pointer then moves forward over dispatched
ones, O(1) amortised).

The backlogged tenants ``id_[4 nt:]`` (``sc[6]`` of them) are kept sorted by their heads'
``(submit_s, position)``: a tenant whose period starts has the newest head (its push is the
latest), so it goes at the end, and a tenant whose head is dispatched moves forward to its
new head's place (a binary search, then a shift of the tenants it passes). The tenants a
dispatch overtakes, those whose head is older than the task, are then a prefix of that
order, found by a binary search and charged without a test each.

The owed tenants are found among the *flagged* ones (``id_[5 nt:]``, ``sc[15]`` of them)
without a visit of the others, exactly: a tenant that is not owed at ``(now, W)`` stays not
owed while its ledger does not change, since ``now`` and ``W`` (the most tasks seen running
at once, or the fixed count) never decrease, ``L / W`` never grows as ``W`` does and
``ALPHA x (now - since)`` never shrinks as ``now`` grows (each rounded operation is monotone;
``ALPHA >= 0``). A tenant's bound ``fg[2 k + 1]`` is ``fl(fl(ALPHA x (now - since)) x W) x
(1 - 2^-40)`` (0 under 1e-290) at some ``(now, W)`` no later than the next decision's: a
ledger below it gives ``fl(L / W) < ALPHA x (now - since)``, with a margin that covers the
three roundings, then and at every later decision. When its ledger changes (a charge, a
correction) to a value at or above its bound, the bound is recomputed at the current
``(now, W)``; a ledger still at or above it flags the tenant. At each decision every
flagged tenant is tested by the rule's own operations: the owed ones compete, the others
leave the flags with the bound of that decision. A period starts with ledger 0 and bound 0.

Each running task holds a charge slot (one per worker: at most ``workers`` run at once;
``ie[i]`` task ``i``'s slot, ``ie[n + s]`` how many tenants slot ``s`` charged,
``ie[n + workers:]`` the free slots, ``sc[7]`` of them): the tenants it was charged to
(``ig`` at ``s nt``), the periods numbered when it was dispatched (``ih[s]``) and its label
(``fg[3 nt + s]``). At its completion a charged tenant is still in the same backlog period
exactly when its period number is no later than the dispatch's count (a period that started
after it has a larger number; a tenant without a queued task has ``ENDED``). ``prm[5]`` is
``ALPHA``.

Cost per decision: ``boost-lanes``' plus O(log B) for the binary searches (B the backlogged
tenants), the shift of the tenants a moved head passes, one add per overtaken tenant and a
test per flagged one; O(charged tenants) per completion. Every float operation of the
ledger, the owed test and the completion is the policy object's: ``L += c + θ``,
``L += duration - (c + θ)`` and ``L / W >= ALPHA x (now - since)``.
"""

from __future__ import annotations

import math

from desched.kernels.arrays import F64, I64
from desched.kernels.source_boost import boost_pop, est_dispatched
from desched.kernels.source_lanes import lanes_complete, lanes_init, lanes_push

__all__ = ["F64", "I64", "math"]

BOUND_MARGIN = 0.9999999999990905
"""1 - 2^-40: the owed bound's margin over the three roundings of ``ALPHA x (now - since)``,
its product with ``W`` and ``L / W`` (module docstring)."""
BOUND_FLOOR = 1e-290
"""Under it the owed bound is 0 (subnormal products round with an absolute error)."""
ENDED = 4611686018427387904
"""2^62: the period number of a tenant without a queued task (larger than any period's)."""


def ledger_init(n: int, nt: int, workers: int, tstart: I64, sc: I64, ib: I64, ic: I64,
                id_: I64, ie: I64) -> None:
    lanes_init(n, sc, ib, ic)
    sc[5] = 0
    sc[6] = 0
    sc[7] = workers
    sc[15] = 0
    for k in range(nt):
        id_[k] = 0
        id_[nt + k] = ENDED
        id_[2 * nt + k] = tstart[k]
        id_[3 * nt + k] = 0
    for i in range(n):
        ie[i] = -1
    for s in range(workers):
        ie[n + s] = 0
        ie[n + workers + s] = workers - 1 - s


def ledger_flag(k: int, nt: int, sc: I64, id_: I64) -> None:
    """Flag tenant ``k`` for the next decision's owed test (once)."""
    if id_[3 * nt + k] == 0:
        id_[3 * nt + k] = 1
        id_[5 * nt + sc[15]] = k
        sc[15] += 1


def ledger_bound(k: int, t: float, w: int, alpha: float, nt: int, fg: F64) -> float:
    """The ledger below which tenant ``k`` cannot be owed at ``(t, w)`` or later."""
    bound = alpha * (t - fg[2 * nt + k]) * float(w) * BOUND_MARGIN
    return bound if bound >= BOUND_FLOOR else 0.0


def ledger_raise(k: int, led: float, t: float, w: int, alpha: float, nt: int, sc: I64,
                 id_: I64, fg: F64) -> None:
    """Tenant ``k``'s ledger became ``led``, at or above its bound: the bound at ``(t, w)``
    (no decision comes earlier or with fewer workers seen) where the ledger is under it,
    else a flag for the next decision."""
    bound = ledger_bound(k, t, w, alpha, nt, fg)
    if led < bound:
        fg[2 * k + 1] = bound
    else:
        ledger_flag(k, nt, sc, id_)


def ledger_push(i: int, t: float, n: int, nt: int, tenant: I64, submit: F64, pred: F64,
                p50: F64, p90: F64, prm: F64, ttask: I64, sc: I64, sg: F64, ia: I64, ic: I64,
                id_: I64, fa: F64, fb: F64, fc: F64, fe: F64, fg: F64) -> None:
    """``boost-lanes``' push; a tenant without a queued task starts a backlog period, with
    task ``i`` (the newest queued task) as its head at the end of the order."""
    lanes_push(i, t, n, submit, pred, p50, p90, prm, sc, sg, ia, ic, fa, fb, fc, fe)
    k = tenant[i]
    if id_[k] == 0:
        fg[2 * k] = 0.0
        fg[2 * k + 1] = 0.0
        fg[2 * nt + k] = t
        sc[5] += 1
        id_[nt + k] = sc[5]
        ledger_head(k, nt, ttask, ic, id_)
        b = sc[6]
        id_[4 * nt + b] = k
        sc[6] = b + 1
    id_[k] += 1


def ledger_head(k: int, nt: int, ttask: I64, ic: I64, id_: I64) -> int:
    """Tenant ``k``'s head: its pointer moved forward over dispatched tasks to its oldest
    queued task, which it returns."""
    p = id_[2 * nt + k]
    while ic[ttask[p]] == 0:
        p += 1
    id_[2 * nt + k] = p
    return int(ttask[p])


def ledger_rank(x: int, lo: int, hi: int, nt: int, submit: F64, ttask: I64,
                id_: I64) -> int:
    """The first place in ``[lo, hi)`` of the order whose tenant's head is not older than
    task ``x`` (``hi`` if none): a binary search by ``(submit_s, position)``."""
    sx = submit[x]
    while lo < hi:
        m = (lo + hi) // 2
        h = ttask[id_[2 * nt + id_[4 * nt + m]]]
        if submit[h] < sx or (submit[h] == sx and h < x):
            lo = m + 1
        else:
            hi = m
    return lo


def ledger_pop(t: float, n: int, nt: int, workers: int, arrival: I64, ttask: I64,
               tenant: I64, submit: F64, prm: F64, sc: I64, sg: F64, ia: I64, ib: I64,
               ic: I64, id_: I64, ie: I64, ig: I64, ih: I64, fa: F64, fb: F64, fc: F64,
               fd: F64, fe: F64, ff: F64, fg: F64, out: F64) -> int:
    """The oldest of the owed tenants' oldest queued tasks if a tenant is owed, else
    ``boost-lanes``' choice; then the dispatch charges every other backlogged tenant whose
    oldest queued task is older than the winner."""
    while ic[arrival[sc[4]]] == 0:
        sc[4] += 1
    first = arrival[sc[4]]
    w = int(prm[1])
    if w == 0:
        w = max(sc[10], 1)
    alpha = prm[5]
    owed = -1
    f = 0
    while f < sc[15]:
        k = id_[5 * nt + f]
        led = fg[2 * k]
        if id_[k] > 0 and led > 0.0 and led / float(w) >= alpha * (t - fg[2 * nt + k]):
            j = ttask[id_[2 * nt + k]]
            if owed < 0 or submit[j] < submit[owed] or (submit[j] == submit[owed]
                                                        and j < owed):
                owed = j
            f += 1
        else:
            fg[2 * k + 1] = ledger_bound(k, t, w, alpha, nt, fg)
            id_[3 * nt + k] = 0
            sc[15] -= 1
            id_[5 * nt + f] = id_[5 * nt + sc[15]]
    i = first
    if owed >= 0 or 2 * sc[3] >= w:
        if owed >= 0:
            i = owed
        out[0] = submit[i] - fc[i]
        out[1] = fc[i]
        ic[i] = 0
        est_dispatched(i, n, submit, prm, sc, sg, fd, fe, ff)
    else:
        i = boost_pop(t, n, submit, prm, sc, sg, ia, ic, fa, fb, fc, fd, fe, ff, out)
    if i != first:
        ib[i] = 1
        sc[3] += 1
    j = tenant[i]
    b = sc[6]
    charge = ledger_rank(i, 0, b, nt, submit, ttask, id_)
    a = -1  # j's place in the order where i is its head (it is then ``charge``)
    if ttask[id_[2 * nt + j]] == i:
        a = charge
    label = fe[i] + fe[n + i]
    sc[7] -= 1
    s = ie[n + workers + sc[7]]
    ie[i] = s
    base = s * nt
    charged = 0
    for q in range(charge):
        k = id_[4 * nt + q]
        if k != j:
            led = fg[2 * k] + label
            fg[2 * k] = led
            ig[base + charged] = k
            charged += 1
            if led >= fg[2 * k + 1]:
                ledger_raise(k, led, t, w, alpha, nt, sc, id_, fg)
    ie[n + s] = charged
    ih[s] = sc[5]
    fg[3 * nt + s] = label
    id_[j] -= 1
    if id_[j] == 0:
        id_[nt + j] = ENDED
        for q in range(a, b - 1):
            id_[4 * nt + q] = id_[4 * nt + q + 1]
        sc[6] = b - 1
    elif a >= 0:
        h = ledger_head(j, nt, ttask, ic, id_)
        c = ledger_rank(h, a + 1, b, nt, submit, ttask, id_)
        for q in range(a, c - 1):
            id_[4 * nt + q] = id_[4 * nt + q + 1]
        id_[4 * nt + c - 1] = j
    return int(i)


def ledger_complete(i: int, t: float, n: int, nt: int, workers: int, duration: F64, prm: F64,
                    sc: I64, ib: I64, id_: I64, ie: I64, ig: I64, ih: I64, fg: F64) -> None:
    """``boost-lanes``' completion; each tenant the task was charged to, still in the same
    backlog period, gets the task's real duration less its label."""
    lanes_complete(i, t, sc, ib)
    s = ie[i]
    base = s * nt
    top = ih[s]
    d = duration[i] - fg[3 * nt + s]
    for c in range(ie[n + s]):
        k = ig[base + c]
        if id_[nt + k] <= top:
            led = fg[2 * k] + d
            fg[2 * k] = led
            if led >= fg[2 * k + 1]:
                w = int(prm[1])
                if w == 0:
                    w = max(sc[10], 1)
                ledger_raise(k, led, t, w, prm[5], nt, sc, id_, fg)
    ie[i] = -1
    ie[n + workers + sc[7]] = s
    sc[7] += 1
