"""Kernel source, continued (``desched.kernels.source``): ``ifs-predicted`` and
``hrrn-predicted``, whose policies keep heaps inside tenants and a kinetic tournament.

Compiled together with ``source.py`` (one module, one namespace); CPython runs it with the
helpers imported from there.
"""

from __future__ import annotations

import math

from desched.kernels.arrays import F64, I64
from desched.kernels.source import (
    by_backlog_down,
    by_backlog_up,
    key_less,
    nextafter,
    sift_down,
    task_pop,
    task_push,
)

__all__ = ["F64", "I64", "math"]


def task_delete(k1: F64, k2: F64, ids: I64, base: int, size: int, x: int) -> int:
    """Remove entry ``x`` of the min-heap stored at ``base``; returns the new size."""
    size -= 1
    if x == size:
        return size
    x1 = k1[base + size]
    x2 = k2[base + size]
    xi = ids[base + size]
    j = x
    while j > 0:
        parent = (j - 1) >> 1
        if key_less(k1, k2, ids, base + parent, x1, x2, xi):
            break
        k1[base + j] = k1[base + parent]
        k2[base + j] = k2[base + parent]
        ids[base + j] = ids[base + parent]
        j = parent
    if j == x:
        sift_down(k1, k2, ids, base, size, j, x1, x2, xi)
    else:
        k1[base + j] = x1
        k2[base + j] = x2
        ids[base + j] = xi
    return size


# ifs-predicted: per tenant a heap by (predicted, submit, position) in its region (fa, fb,
# ia; ib[k] its size, the tenant's backlog); the tenants by backlog as ifs-memoryless's
# (ic, id_, ig; ``by_backlog_*``) with fe[pos] the smallest prediction of the tenant at pos
# (its heap's top); the largest queued prediction from a heap of (-predicted, submit,
# position) (fc, fd, ie; sc[1] its size) whose entries of tasks that left (if_[i] == 0) are
# dropped at its top; if_[n:] the stack of a tie search; ih, fg the groups the first pass
# visited and their scores; sc[3] 1 where every prediction is finite and not negative;
# prm = w_backlog, w_short -----------------------------------------------------------------


def ifsp_init(n: int, nt: int, pred: F64, sc: I64, ib: I64, ic: I64, id_: I64, if_: I64,
              ig: I64) -> None:
    sc[1] = 0
    sc[3] = 1
    for k in range(nt):
        ib[k] = 0
        ic[k] = k
        id_[k] = k
    for i in range(n):
        if_[i] = 0
        p = pred[i]
        if not (p >= 0.0 and p < math.inf):
            sc[3] = 0
    for b in range(n + 1):
        ig[b] = 0


def ifsp_push(i: int, t: float, tenant: I64, submit: F64, pred: F64, tstart: I64, sc: I64,
              ia: I64, ib: I64, ic: I64, id_: I64, ie: I64, if_: I64, ig: I64, fa: F64,
              fb: F64, fc: F64, fd: F64, fe: F64) -> None:
    k = tenant[i]
    q = by_backlog_up(ic, id_, ig, fe, k, ib[k])
    ib[k] = task_push(fa, fb, ia, tstart[k], ib[k], pred[i], submit[i], i)
    fe[q] = fa[tstart[k]]
    sc[1] = task_push(fc, fd, ie, 0, sc[1], -pred[i], submit[i], i)
    if_[i] = 1


def shortness(p: float, p_max: float) -> float:
    return 1.0 - p / p_max if p_max > 0.0 else 0.0


def ifsp_pop(t: float, n: int, submit: F64, pred: F64, tstart: I64, prm: F64, sc: I64,
             ia: I64, ib: I64, ic: I64, id_: I64, ie: I64, if_: I64, ig: I64, ih: I64,
             fa: F64, fb: F64, fc: F64, fd: F64, fe: F64, fg: F64, out: F64) -> int:
    """The best score over every backlogged tenant's head, then, among the queued tasks
    with that score (a tenant's others only where rounding ties them with its head: a
    search of its heap pruned where the score drops), the earliest ``(submit, position)``.

    The tenants are visited by group of equal backlog, the largest first (``ifs_pop``), and
    both passes stop at the first group whose bound ``w_backlog * (b / max b) + w_short``
    is below the best score (so far, then final): with non-negative weights and
    predictions, ``shortness <= 1`` and every rounded step is monotone, so no task of that
    group or a later one reaches the best. Within a group the head score does not increase
    with the head's prediction, so the first pass scores only the group's smallest (and
    keeps each visited group's score, ``ih``, ``fg``) and the second searches only a group
    whose smallest scored the best."""
    while if_[ie[0]] == 0:
        sc[1] = task_pop(fc, fd, ie, 0, sc[1])
    p_max = -fc[0]
    w1 = prm[0]
    w2 = prm[1]
    ns = ig[0]
    maxb = float(ib[ic[0]])
    prune = sc[3] == 1 and w1 >= 0.0 and w2 >= 0.0
    best = -math.inf
    groups = 0
    g = 0
    while g < ns:
        b = ib[ic[g]]
        end = ig[b - 1]
        nb = float(b) / maxb
        if prune:
            if w1 * nb + w2 < best:
                break
            low = fe[g]
            for j in range(g + 1, end):
                low = min(low, fe[j])
            score = w1 * nb + w2 * shortness(low, p_max)
            best = max(best, score)
            ih[groups] = g
            fg[groups] = score
            groups += 1
        else:
            for j in range(g, end):
                score = w1 * nb + w2 * shortness(fe[j], p_max)
                best = max(best, score)
        g = end
    win = -1
    win_s = 0.0
    win_nb = 0.0
    win_k = 0
    win_x = 0
    g = 0
    c = 0
    while (c < groups) if prune else (g < ns):
        if prune:
            g = ih[c]
            c += 1
            if fg[c - 1] != best:
                continue
        b = ib[ic[g]]
        end = ig[b - 1]
        nb = float(b) / maxb
        for j in range(g, end):
            if w1 * nb + w2 * shortness(fe[j], p_max) != best:
                continue
            k = ic[j]
            base = tstart[k]
            top = 1
            if_[n] = 0
            while top > 0:
                top -= 1
                x = if_[n + top]
                if w1 * nb + w2 * shortness(fa[base + x], p_max) != best:
                    continue
                i = ia[base + x]
                s = submit[i]
                if win < 0 or s < win_s or (s == win_s and i < win):
                    win = i
                    win_s = s
                    win_nb = nb
                    win_k = k
                    win_x = x
                for child in range(2 * x + 1, 2 * x + 3):
                    if child < b:
                        if_[n + top] = child
                        top += 1
        g = end
    k = win_k
    b = ib[k]
    ib[k] = task_delete(fa, fb, ia, tstart[k], b, win_x)
    if b > 1:
        fe[id_[k]] = fa[tstart[k]]
    by_backlog_down(ic, id_, ig, fe, k, b)
    if_[win] = 0
    out[0] = best
    out[1] = win_nb
    out[2] = shortness(pred[win], p_max)
    return win


def ifsp_complete(i: int, t: float) -> None:
    pass


# hrrn-predicted: the kinetic tournament of desched.structures.kinetic: sc[1] leaves (a
# power of two, doubled when full, as there), ia = win, fa = melt (2 cap nodes), ib / ic the
# repair's stack and order, id_ the item (task) of a leaf slot, ie the slot of a task, if_
# the free slots (sc[2] of them, the last freed first); the same comparisons and
# certificates, so the same winner at every query ---------------------------------------------

REL_MARGIN = 1e-9


def hrrn_init(n: int, sc: I64, ia: I64, fa: F64, id_: I64, if_: I64) -> None:
    cap = 16
    sc[1] = cap
    for j in range(2 * cap):
        ia[j] = -1
        fa[j] = math.inf
    for slot in range(cap):
        id_[slot] = -1
        if_[slot] = cap - 1 - slot
    sc[2] = cap


def hrrn_mark(fa: F64, node: int) -> None:
    while node > 0 and fa[node] != -math.inf:
        fa[node] = -math.inf
        node >>= 1


def hrrn_grow(sc: I64, ia: I64, fa: F64, id_: I64, if_: I64) -> None:
    """Double the leaves: every internal node is marked for the next repair."""
    old = sc[1]
    cap = 2 * old
    sc[1] = cap
    for node in range(cap):
        ia[node] = -1
        fa[node] = -math.inf
    fa[0] = math.inf
    for slot in range(cap):
        ia[cap + slot] = slot if slot < old and id_[slot] >= 0 else -1
        fa[cap + slot] = math.inf
    for slot in range(old, cap):
        id_[slot] = -1
    for j in range(old):
        if_[j] = cap - 1 - j
    sc[2] = old


def hrrn_push(i: int, t: float, sc: I64, ia: I64, fa: F64, id_: I64, ie: I64,
              if_: I64) -> None:
    if sc[2] == 0:
        hrrn_grow(sc, ia, fa, id_, if_)
    sc[2] -= 1
    slot = if_[sc[2]]
    id_[slot] = i
    ie[i] = slot
    node = sc[1] + slot
    ia[node] = slot
    hrrn_mark(fa, node >> 1)


def hrrn_repair(now: float, submit: F64, pred: F64, ia: I64, ib: I64, ic: I64, id_: I64,
                fa: F64) -> None:
    """Re-evaluate every node with ``melt <= now``, children before parents."""
    lo = 1.0 - REL_MARGIN
    hi = 1.0 + REL_MARGIN
    lo2 = 1.0 - 2.0 * REL_MARGIN
    hi2 = 1.0 + 2.0 * REL_MARGIN
    top = 1
    ib[0] = 1
    count = 0
    while top > 0:
        top -= 1
        node = ib[top]
        ic[count] = node
        count += 1
        left = 2 * node
        if fa[left] <= now:
            ib[top] = left
            top += 1
        if fa[left + 1] <= now:
            ib[top] = left + 1
            top += 1
    for r in range(count - 1, -1, -1):
        node = ic[r]
        left = 2 * node
        a = ia[left]
        b = ia[left + 1]
        if a < 0:
            ia[node] = b
            fa[node] = fa[left + 1]
            continue
        if b < 0:
            ia[node] = a
            fa[node] = fa[left]
            continue
        sa = submit[id_[a]]
        pa = pred[id_[a]]
        sb = submit[id_[b]]
        pb = pred[id_[b]]
        ra = ((now - sa) + pa) / pa
        rb = ((now - sb) + pb) / pb
        pw = pb
        fw = rb
        pl = pa
        fl = ra
        if ra > rb or (ra == rb and (sa < sb or (sa == sb and id_[a] < id_[b]))):
            ia[node] = a
            pw = pa
            fw = ra
            pl = pb
            fl = rb
        else:
            ia[node] = b
        cert = math.inf
        if pw == pl:
            cert = math.inf
        elif now < sa or now < sb or fw == math.inf:
            cert = nextafter(now, math.inf)
        else:
            gap = lo * fw - hi * fl
            if gap > 0.0:
                closing = hi2 / pl - lo2 / pw
                if closing > 0.0:
                    cert = now + gap / closing
                    if not cert > now:
                        cert = nextafter(now, math.inf)
                elif closing <= 0.0:
                    cert = math.inf
                else:
                    cert = nextafter(now, math.inf)
            else:
                cert = nextafter(now, math.inf)
        fa[node] = min(min(cert, fa[left]), fa[left + 1])


def hrrn_pop(t: float, submit: F64, pred: F64, sc: I64, ia: I64, ib: I64, ic: I64, id_: I64,
             ie: I64, if_: I64, fa: F64, out: F64) -> int:
    if fa[1] <= t:
        hrrn_repair(t, submit, pred, ia, ib, ic, id_, fa)
    i = id_[ia[1]]
    p = pred[i]
    out[0] = ((t - submit[i]) + p) / p
    out[1] = p
    slot = ie[i]
    id_[slot] = -1
    if_[sc[2]] = slot
    sc[2] += 1
    node = sc[1] + slot
    ia[node] = -1
    hrrn_mark(fa, node >> 1)
    return int(i)


def hrrn_complete(i: int, t: float) -> None:
    pass


# fsp-predicted: the queue a heap by (finish, submit, position) (fa, fb, ia; sc[1] its size),
# the virtual system a heap of finishes (fc; fd 0.0 and ib the task for its ties, which no
# decision reads; sc[2] its size), sc[3] the tasks running, sc[4] the most at once; fe[0] the
# virtual clock V, fe[1] its real time; prm[0] the workers parameter (0: sc[4], at least 1)


def fsp_init(n: int, sc: I64, fe: F64) -> None:
    for j in range(1, 5):
        sc[j] = 0
    fe[0] = 0.0
    fe[1] = 0.0


def fsp_advance(now: float, prm: F64, sc: I64, ib: I64, fc: F64, fd: F64, fe: F64) -> None:
    w = prm[0]
    if w == 0.0:
        w = float(max(sc[4], 1))
    v = fe[0]
    t = fe[1]
    while True:
        if sc[2] == 0:
            t = now
            break
        n = float(sc[2])
        rate = 1.0 if n <= w else w / n
        g = fc[0]
        dt = (g - v) / rate
        partial = t + dt > now
        if partial:
            v = v + (now - t) * rate
            t = now
        else:
            v = g
            t = t + dt
        while sc[2] > 0 and fc[0] <= v:
            sc[2] = task_pop(fc, fd, ib, 0, sc[2])
        if partial:
            break
    fe[0] = v
    fe[1] = t


def fsp_push(i: int, t: float, pred: F64, submit: F64, prm: F64, sc: I64, ia: I64, ib: I64,
             fa: F64, fb: F64, fc: F64, fd: F64, fe: F64) -> None:
    fsp_advance(t, prm, sc, ib, fc, fd, fe)
    p = pred[i]
    s = p if (p >= 0.0 and p < math.inf) else 0.0
    g = fe[0] + s
    sc[2] = task_push(fc, fd, ib, 0, sc[2], g, 0.0, i)
    sc[1] = task_push(fa, fb, ia, 0, sc[1], g, submit[i], i)


def fsp_pop(t: float, prm: F64, sc: I64, ia: I64, ib: I64, fa: F64, fb: F64, fc: F64,
            fd: F64, fe: F64, out: F64) -> int:
    fsp_advance(t, prm, sc, ib, fc, fd, fe)
    i = ia[0]
    out[0] = fa[0]
    sc[1] = task_pop(fa, fb, ia, 0, sc[1])
    sc[3] += 1
    sc[4] = max(sc[4], sc[3])
    return int(i)


def fsp_complete(i: int, t: float, sc: I64) -> None:
    sc[3] -= 1
