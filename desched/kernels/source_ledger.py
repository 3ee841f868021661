"""Kernel source, continued (``desched.kernels.source``): ``boost-ledger``, ``boost-lanes``'
kernel (``desched.kernels.source_lanes``) with the per-tenant overtaking ledger and its guard
of ``desched.policies.boost_ledger``.

State beyond ``boost-lanes``': per tenant ``k`` (``nt`` of them) ``id_[k]`` its queued
tasks, ``id_[nt + k]`` the number of its backlog period, ``id_[2 nt + k]`` a pointer into
``ttask`` at its oldest queued task, ``id_[3 nt + k]`` its place in the list of backlogged
tenants ``id_[4 nt:]`` (``sc[6]`` of them, in no particular order: the rule reads no order
among tenants), ``fg[k]`` its ledger and ``fg[nt + k]`` the start of its backlog period;
``sc[5]`` the periods numbered so far. The loop pushes tasks in ``(submit_s, position)``
order and never again, so a tenant's queued tasks are those of its run of ``ttask`` (the
same order) that were pushed and not dispatched, and its pointer only moves forward over
dispatched ones, as ``boost-lanes``' pointer over ``arrival`` does. Each running task holds
a charge slot (one per worker: at most ``workers`` run at once; ``ie[i]`` task ``i``'s slot,
``ie[n + s]`` how many tenants slot ``s`` charged, ``ie[n + workers:]`` the free slots,
``sc[7]`` of them): the tenants it was charged to and their periods (``ig``, ``ih`` at
``s nt``) and its label (``fg[2 nt + s]``), for the correction at its completion.
``prm[5]`` is ``ALPHA``.

Cost per decision: ``boost-lanes``' plus a scan of the B backlogged tenants for the owed ones
and one at the dispatch for the overtaken ones (each visit O(1) amortised: the tenant's
pointer), O(charged tenants) per completion. Every float operation is the policy object's:
``L / W >= ALPHA x (now - since)``, ``L += c + θ`` and ``L += duration - (c + θ)``.
"""

from __future__ import annotations

import math

from desched.kernels.source import F64, I64
from desched.kernels.source_boost import boost_pop, est_dispatched
from desched.kernels.source_lanes import lanes_complete, lanes_init, lanes_push

__all__ = ["F64", "I64", "math"]


def ledger_init(n: int, nt: int, workers: int, tstart: I64, pred: F64, p50: F64, p90: F64,
                sc: I64, ib: I64, ic: I64, id_: I64, ie: I64, fe: F64) -> None:
    lanes_init(n, pred, p50, p90, sc, ib, ic, fe)
    sc[5] = 0
    sc[6] = 0
    sc[7] = workers
    for k in range(nt):
        id_[k] = 0
        id_[2 * nt + k] = tstart[k]
    for i in range(n):
        ie[i] = -1
    for s in range(workers):
        ie[n + s] = 0
        ie[n + workers + s] = workers - 1 - s


def ledger_push(i: int, t: float, n: int, nt: int, tenant: I64, submit: F64, prm: F64,
                sc: I64, sg: F64, ia: I64, ic: I64, id_: I64, fa: F64, fb: F64, fc: F64,
                fe: F64, fg: F64) -> None:
    """``boost-lanes``' push; a tenant without a queued task starts a backlog period."""
    lanes_push(i, t, n, submit, prm, sc, sg, ia, ic, fa, fb, fc, fe)
    k = tenant[i]
    if id_[k] == 0:
        fg[k] = 0.0
        fg[nt + k] = t
        sc[5] += 1
        id_[nt + k] = sc[5]
        b = sc[6]
        id_[4 * nt + b] = k
        id_[3 * nt + k] = b
        sc[6] = b + 1
    id_[k] += 1


def ledger_oldest(k: int, nt: int, ttask: I64, ic: I64, id_: I64) -> int:
    """The oldest queued task of backlogged tenant ``k``."""
    p = id_[2 * nt + k]
    while ic[ttask[p]] == 0:
        p += 1
    id_[2 * nt + k] = p
    return int(ttask[p])


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
    for b in range(sc[6]):
        k = id_[4 * nt + b]
        led = fg[k]
        if led > 0.0 and led / float(w) >= alpha * (t - fg[nt + k]):
            j = ledger_oldest(k, nt, ttask, ic, id_)
            if owed < 0 or submit[j] < submit[owed] or (submit[j] == submit[owed]
                                                        and j < owed):
                owed = j
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
    id_[j] -= 1
    if id_[j] == 0:
        last = sc[6] - 1
        b = id_[3 * nt + j]
        k = id_[4 * nt + last]
        id_[4 * nt + b] = k
        id_[3 * nt + k] = b
        sc[6] = last
    label = fe[i] + fe[n + i]
    sc[7] -= 1
    s = ie[n + workers + sc[7]]
    ie[i] = s
    base = s * nt
    charged = 0
    si = submit[i]
    for b in range(sc[6]):
        k = id_[4 * nt + b]
        if k != j:
            o = ledger_oldest(k, nt, ttask, ic, id_)
            if submit[o] < si or (submit[o] == si and o < i):
                fg[k] = fg[k] + label
                ig[base + charged] = k
                ih[base + charged] = id_[nt + k]
                charged += 1
    ie[n + s] = charged
    fg[2 * nt + s] = label
    return int(i)


def ledger_complete(i: int, t: float, n: int, nt: int, workers: int, duration: F64, sc: I64,
                    ib: I64, id_: I64, ie: I64, ig: I64, ih: I64, fg: F64) -> None:
    """``boost-lanes``' completion; each tenant the task was charged to, still in the same
    backlog period, gets the task's real duration less its label."""
    lanes_complete(i, t, sc, ib)
    s = ie[i]
    base = s * nt
    label = fg[2 * nt + s]
    for c in range(ie[n + s]):
        k = ig[base + c]
        if id_[k] > 0 and id_[nt + k] == ih[base + c]:
            fg[k] = fg[k] + (duration[i] - label)
    ie[i] = -1
    ie[n + workers + sc[7]] = s
    sc[7] += 1
