"""Kernel source, continued (``desched.kernels.source``): ``boost-lanes``,
``boost-predicted``'s kernel (``desched.kernels.source_boost``) with the first-come lane of
``desched.policies.boost_lanes``.

State beyond ``boost-predicted``'s: ``ib[i]`` 1 while task ``i`` runs having been dispatched
out of first-come order, ``sc[3]`` how many such tasks run, ``sc[4]`` a pointer into
``arrival``. The oldest queued task, the smallest ``(submit_s, position)``, is the first
queued one in ``arrival`` (a stable sort by submit time): the loop pushes tasks in that
order and never pushes one again, so every task before the pointer has been dispatched and
the pointer only moves forward (O(1) amortised per decision). ``W`` is ``prm[1]`` or, where
that is 0, ``sc[10]`` (the most tasks running at once) at least 1, read before the
dispatch; the lane is open when ``sc[3] >= ceil(W / 2)``, i.e. ``2 sc[3] >= W``.
"""

from __future__ import annotations

import math

from desched.kernels.arrays import F64, I64
from desched.kernels.source_boost import boost_init, boost_pop, boost_push, est_dispatched

__all__ = ["F64", "I64", "math"]


def lanes_init(n: int, sc: I64, ib: I64, ic: I64) -> None:
    boost_init(n, sc, ic)
    sc[3] = 0
    sc[4] = 0
    for i in range(n):
        ib[i] = 0


def lanes_push(i: int, t: float, n: int, submit: F64, pred: F64, p50: F64, p90: F64, prm: F64,
               sc: I64, sg: F64, ia: I64, ic: I64, fa: F64, fb: F64, fc: F64, fe: F64) -> None:
    boost_push(i, t, n, submit, pred, p50, p90, prm, sc, sg, ia, ic, fa, fb, fc, fe)


def lanes_pop(t: float, n: int, arrival: I64, submit: F64, prm: F64, sc: I64, sg: F64,
              ia: I64, ib: I64, ic: I64, fa: F64, fb: F64, fc: F64, fd: F64, fe: F64,
              ff: F64, out: F64) -> int:
    """The oldest queued task while the lane is open, else ``boost-predicted``'s choice;
    a winner that is not the oldest joins the running out-of-order tasks."""
    while ic[arrival[sc[4]]] == 0:
        sc[4] += 1
    first = arrival[sc[4]]
    workers = int(prm[1])
    if workers == 0:
        workers = max(sc[10], 1)
    i = first
    if 2 * sc[3] >= workers:
        out[0] = submit[i] - fc[i]
        out[1] = fc[i]
        ic[i] = 0
        est_dispatched(i, n, submit, prm, sc, sg, fd, fe, ff)
    else:
        i = boost_pop(t, n, submit, prm, sc, sg, ia, ic, fa, fb, fc, fd, fe, ff, out)
        if i != first:
            ib[i] = 1
            sc[3] += 1
    return int(i)


def lanes_complete(i: int, t: float, sc: I64, ib: I64) -> None:
    sc[9] -= 1
    if ib[i] == 1:
        ib[i] = 0
        sc[3] -= 1
