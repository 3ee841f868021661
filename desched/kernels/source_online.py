"""Predictions made during a kernel run, as ``desched.bench.online.OnlineLabels`` makes them.

At each arrival the task's feature row is its static row (``ost``, ``nf`` values per task)
with the tenant-history values (``desched.models.features.HISTORY``) of the tasks that had
finished strictly before it in this run, several at one instant taken in task order; the
compiled forests (lleaves' entry points, by address) then write ``pred``, ``p50`` and ``p90``
before the policy sees the task. The state lives in two arrays, ``ol`` (int64) and ``of_``
(float64), laid out by ``desched.bench.online.kernel_state``: a header (``H_*``: counts,
forest addresses, and the offsets of the regions) and the regions themselves:

- per tenant (``nt``) and per (tenant, task type) pair (``np``) of the run: a ring of the
  last ``w`` finished durations (``of_``), how many it holds and where the next goes, and
  per tenant how many finished (``ol``);
- the pair of each task, the seed history (tenant, pair and duration of the training tasks
  finished before the run, in end order; -1 where the run has no such tenant or pair);
- the completions not yet applied, a heap by (end, task) (``ol`` the tasks, ``of_`` the
  ends), the row being predicted and the forest's output cell.

``ost`` outlives the run: one per case and table (``desched.bench.online.KernelPlan``), it
holds the static rows and a memo of the predictions by task and history values (``H_SLOTS``
per task, the 4 values and the 3 predictions, NaN where not made yet, then each task's count
of entries made). A forest is a pure function of its row, so a prediction found there has
the bits a forest call would give; the runs of one case (policies, parameter grids, tuners'
trials) see the same histories often, and a single row's walk through a forest of hundreds
of trees costs far more than a look-up (its code does not stay in the cache).

The float operations are those of ``TenantHistory.values`` and ``OnlineLabels.arrive``,
operand for operand (a sum from 0.0 in ring order, ``/ count``, ``/ 2``, ``exp`` of a log
target, ``max`` with ``MIN_PREDICTION_S``): tests/test_online_labels.py checks the kernel's
predictions and start times bit for bit against the Python loop with ``OnlineLabels``.
"""

from __future__ import annotations

import ctypes
import math

from desched.kernels.arrays import F64, I64

H_ON = 0
H_NF = 1
H_AT = 2
H_W = 3
H_NS = 4
H_HEAP = 5
H_FOREST = 6  # 6, 7, 8: pred, p50, p90 (0: not predicted)
H_LOG = 9  # 9, 10, 11: 1 where that forest's output is log seconds
H_PAIR = 12
H_TCOUNT = 13
H_TPOS = 14
H_TDONE = 15
H_PCOUNT = 16
H_PPOS = 17
H_HEAPI = 18
H_STENANT = 19
H_SPAIR = 20
H_TRING = 21
H_PRING = 22
H_HEAPT = 23
H_SDUR = 24
H_ROW = 25
H_OUT = 26
H_SLOTS = 27  # memo entries per task in ost (0: no memo)
H_MKEY = 28  # ost offsets: the memo's history values, predictions, entry counts
H_MVAL = 29
H_MFILL = 30
HEADER = 32
MIN_PREDICTION_S = 1e-6  # desched.trace.MIN_PREDICTION_S


def exp(x: float) -> float:
    return math.exp(x)


def isnan(x: float) -> bool:
    return math.isnan(x)


def call_forest(address: int, x: F64, at: int, out: F64, at_out: int) -> int:
    """CPython's stand-in for the compiler's builtin (``desched.structures.kernelc``)."""
    entry = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32,
                             ctypes.c_int32)(address)
    entry(x.ctypes.data + 8 * at, out.ctypes.data + 8 * at_out, 0, 1)
    return 0


def ring_put(ol: I64, of_: F64, counts: int, positions: int, ring: int, w: int, k: int,
             d: float) -> None:
    """Append ``d`` to ring ``k`` (of ``w`` values at ``of_[ring + k * w]``)."""
    pos = ol[positions + k]
    of_[ring + k * w + pos] = d
    pos += 1
    if pos == w:
        pos = 0
    ol[positions + k] = pos
    if ol[counts + k] < w:
        ol[counts + k] += 1


def ring_mean(ol: I64, of_: F64, counts: int, positions: int, ring: int, w: int,
              k: int) -> float:
    """The mean of ring ``k``'s values, summed from 0.0 oldest first (NaN when empty)."""
    c = ol[counts + k]
    if c == 0:
        return math.nan
    j = ol[positions + k] - c
    if j < 0:
        j += w
    s = 0.0
    for _ in range(c):
        s += of_[ring + k * w + j]
        j += 1
        if j == w:
            j = 0
    return float(s / c)


def online_record(k: int, p: int, d: float, ol: I64, of_: F64) -> None:
    """A task of tenant ``k`` and pair ``p`` finished after every one recorded before."""
    w = ol[H_W]
    if k >= 0:
        ring_put(ol, of_, ol[H_TCOUNT], ol[H_TPOS], ol[H_TRING], w, k, d)
        ol[ol[H_TDONE] + k] += 1
    if p >= 0:
        ring_put(ol, of_, ol[H_PCOUNT], ol[H_PPOS], ol[H_PRING], w, p, d)


def online_init(ol: I64, of_: F64) -> None:
    """Apply the seed history."""
    for s in range(ol[H_NS]):
        online_record(ol[ol[H_STENANT] + s], ol[ol[H_SPAIR] + s], of_[ol[H_SDUR] + s], ol, of_)


def pending_less(ol: I64, of_: F64, a: int, b: int) -> bool:
    """Heap slot ``a`` before slot ``b``: by end, then task."""
    ta = of_[ol[H_HEAPT] + a]
    tb = of_[ol[H_HEAPT] + b]
    return bool(ta < tb or (ta == tb and ol[ol[H_HEAPI] + a] < ol[ol[H_HEAPI] + b]))


def pending_swap(ol: I64, of_: F64, a: int, b: int) -> None:
    ti = ol[H_HEAPT]
    ii = ol[H_HEAPI]
    t = of_[ti + a]
    of_[ti + a] = of_[ti + b]
    of_[ti + b] = t
    i = ol[ii + a]
    ol[ii + a] = ol[ii + b]
    ol[ii + b] = i


def online_complete(i: int, t: float, ol: I64, of_: F64) -> None:
    """Task ``i`` finished at ``t``: pending until an arrival after ``t``."""
    j = ol[H_HEAP]
    ol[H_HEAP] = j + 1
    of_[ol[H_HEAPT] + j] = t
    ol[ol[H_HEAPI] + j] = i
    while j > 0:
        parent = (j - 1) >> 1
        if not pending_less(ol, of_, j, parent):
            break
        pending_swap(ol, of_, j, parent)
        j = parent


def pending_pop(ol: I64, of_: F64) -> int:
    """Remove the first pending completion; returns its task."""
    top = ol[ol[H_HEAPI]]
    size = ol[H_HEAP] - 1
    ol[H_HEAP] = size
    pending_swap(ol, of_, 0, size)
    j = 0
    while True:
        c = 2 * j + 1
        if c >= size:
            break
        if c + 1 < size and pending_less(ol, of_, c + 1, c):
            c += 1
        if not pending_less(ol, of_, c, j):
            break
        pending_swap(ol, of_, j, c)
        j = c
    return int(top)


def online_arrive(i: int, t: float, tenant: I64, duration: F64, pred: F64, p50: F64, p90: F64,
                  ol: I64, of_: F64, ost: F64) -> None:
    """Task ``i`` arrives at ``t``: apply the completions that ended before ``t``, then
    predict from its row."""
    pair = ol[H_PAIR]
    while ol[H_HEAP] > 0 and of_[ol[H_HEAPT]] < t:
        j = pending_pop(ol, of_)
        online_record(tenant[j], ol[pair + j], duration[j], ol, of_)
    nf = ol[H_NF]
    row = ol[H_ROW]
    for f in range(nf):
        of_[row + f] = ost[i * nf + f]
    k = tenant[i]
    w = ol[H_W]
    if ol[ol[H_TCOUNT] + k] > 0:
        at = row + ol[H_AT]
        of_[at] = ring_mean(ol, of_, ol[H_TCOUNT], ol[H_TPOS], ol[H_TRING], w, k)
        c = ol[ol[H_TCOUNT] + k]
        last = ol[ol[H_TPOS] + k] - 1
        if last < 0:
            last += w
        base = ol[H_TRING] + k * w
        if c > 1:
            before = last - 1
            if before < 0:
                before += w
            of_[at + 1] = (of_[base + before] + of_[base + last]) / 2
        else:
            of_[at + 1] = of_[base + last]
        of_[at + 2] = ring_mean(ol, of_, ol[H_PCOUNT], ol[H_PPOS], ol[H_PRING], w,
                                ol[pair + i])
        of_[at + 3] = float(ol[ol[H_TDONE] + k])
    slot = memo_slot(i, row + ol[H_AT], ol, of_, ost)
    out = ol[H_OUT]
    for m in range(3):
        address = ol[H_FOREST + m]
        if address != 0:
            v = math.nan if slot < 0 else ost[ol[H_MVAL] + 3 * slot + m]
            if isnan(v):
                call_forest(address, of_, row, of_, out)
                raw = of_[out]
                v = exp(raw) if ol[H_LOG + m] == 1 else raw
                v = max(v, MIN_PREDICTION_S)
                if slot >= 0:
                    ost[ol[H_MVAL] + 3 * slot + m] = v
            if m == 0:
                pred[i] = v
            elif m == 1:
                p50[i] = v
            else:
                p90[i] = v


def same(a: float, b: float) -> bool:
    """Equal, NaN equal to NaN."""
    return a == b or (isnan(a) and isnan(b))


def memo_slot(i: int, at: int, ol: I64, of_: F64, ost: F64) -> int:
    """Task ``i``'s memo entry for the history values at ``of_[at:at + 4]``: the one made
    for them, else a new one (the oldest replaced once ``H_SLOTS`` are made); -1 without a
    memo."""
    slots = ol[H_SLOTS]
    if slots == 0:
        return -1
    made = int(ost[ol[H_MFILL] + i])
    base = i * slots
    for s in range(min(made, slots)):
        key = ol[H_MKEY] + 4 * (base + s)
        if (same(ost[key], of_[at]) and same(ost[key + 1], of_[at + 1])
                and same(ost[key + 2], of_[at + 2]) and same(ost[key + 3], of_[at + 3])):
            return int(base + s)
    slot = base + made % slots
    ost[ol[H_MFILL] + i] = float(made + 1)
    key = ol[H_MKEY] + 4 * slot
    for j in range(4):
        ost[key + j] = of_[at + j]
    for m in range(3):
        ost[ol[H_MVAL] + 3 * slot + m] = math.nan
    return int(slot)
