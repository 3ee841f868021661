"""The per-window service lag's inner loop (``desched.metrics._window_lags``) in native code.

The metric evaluates every backlogged (tenant, window edge) point's service received in
x87 extended precision (numpy's ``longdouble`` on x86-64 Linux): ``below * x - (prefix[at] -
prefix[first])`` for the started tasks minus the same for the ended ones, then each window's
difference rounded to a double, its largest and smallest over the tenants. numpy spends a
dozen passes over the million points of a 1,000-tenant run on that, each through a 16-byte
element, plus two binary searches per point. This module builds one function with llvmlite
that walks the points once, finding ``at`` by a pointer that only moves forward within a
tenant, and does the very x87 operations numpy's loops do, operand for operand (``fild``,
``fld``, ``fmul``, ``fsub``, a rounding ``fstp`` to double; no fast-math flag), so every
lag is numpy's bit for bit (tests/test_metrics_fast.py). It exists only where numpy's
``longdouble`` is the x87 80-bit format and llvmlite builds it; ``window_lags()`` returns
None elsewhere and the metric keeps its numpy loop, the reference.
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np
import numpy.typing as npt

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
LongDoubles = npt.NDArray[np.longdouble]


def x87_longdouble() -> bool:
    """Whether numpy's ``longdouble`` is the x87 80-bit format in 16-byte slots (x86-64,
    outside Windows, where it is a double)."""
    info = np.finfo(np.longdouble)
    return (platform.machine().lower() in ("x86_64", "amd64") and sys.platform != "win32"
            and info.nmant == 63 and info.nexp == 15 and np.dtype(np.longdouble).itemsize == 16)


def _build_ir() -> str:
    """``window_lags(runs, run_code, first, stop, seg0, counts, start_key, start_sum, end_key,
    end_sum, edges, edge_rank, ranks, most, least, backlogged)``; the ``*_sum`` arrays are
    byte addresses of 16-byte x87 slots (llvmlite has no x87 type: its loads are written
    by offset and bitcast, so no data layout is assumed)."""
    from llvmlite import ir

    class X87(ir.Type):  # type: ignore[misc]
        def _to_string(self) -> str:
            return "x86_fp80"

        def __eq__(self, other: object) -> bool:
            return isinstance(other, X87)

        def __hash__(self) -> int:
            return hash("x86_fp80")

    i64, i8p, dbl, x87 = ir.IntType(64), ir.IntType(8).as_pointer(), ir.DoubleType(), X87()
    i64p, dblp = i64.as_pointer(), dbl.as_pointer()
    module = ir.Module(name="lags_kernel")
    names = ("runs", "run_code", "first", "stop", "seg0", "counts", "start_key", "start_sum",
             "end_key", "end_sum", "edges", "edge_rank", "ranks", "most", "least",
             "backlogged")
    types = (i64, i64p, i64p, i64p, i64p, i64p, i64p, i8p, i64p, i8p, dblp, i64p, i64, dblp,
             dblp, i64p)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), types), name="window_lags")
    a = dict(zip(names, fn.args))
    for arg, name in zip(fn.args, names):
        arg.name = name
    entry = fn.append_basic_block("entry")
    b = ir.IRBuilder(entry)

    def var(ty: Any, init: Any, name: str) -> Any:
        slot = b.alloca(ty, name=name)
        b.store(init, slot)
        return slot

    def at(ptr: Any, index: Any) -> Any:
        return b.load(b.gep(ptr, [index]))

    def x87_at(base: Any, index: Any) -> Any:
        addr = b.gep(base, [b.mul(index, ir.Constant(i64, 16))])
        return b.load(b.bitcast(addr, x87.as_pointer()))

    zero, one = ir.Constant(i64, 0), ir.Constant(i64, 1)
    r = var(i64, zero, "r")
    s_at = var(i64, zero, "s_at")
    e_at = var(i64, zero, "e_at")
    prev_k = var(i64, ir.Constant(i64, -1), "prev_k")
    prev_stop = var(i64, zero, "prev_stop")
    e = var(i64, zero, "e")
    prev_s = b.alloca(x87, name="prev_s")

    run_head, run_body, edge_head, edge_body = (fn.append_basic_block(n) for n in (
        "run_head", "run_body", "edge_head", "edge_body"))
    s_walk, s_step, s_done, e_walk, e_step, e_done, record, edge_tail, run_tail, done = (
        fn.append_basic_block(n) for n in ("s_walk", "s_step", "s_done", "e_walk", "e_step",
                                           "e_done", "record", "edge_tail", "run_tail",
                                           "done"))
    b.branch(run_head)

    b.position_at_end(run_head)
    ri = b.load(r)
    b.cbranch(b.icmp_signed("<", ri, a["runs"]), run_body, done)

    b.position_at_end(run_body)
    k = at(a["run_code"], ri)
    s0 = at(a["seg0"], k)
    hi = b.add(s0, at(a["counts"], k))
    e0 = at(a["first"], ri)
    e1 = at(a["stop"], ri)
    # the pointers go on from the tenant's previous run when its edges come later, else
    # they start at the tenant's first key
    resume = b.and_(b.icmp_signed("==", k, b.load(prev_k)),
                    b.icmp_signed(">=", e0, b.load(prev_stop)))
    b.store(b.select(resume, b.load(s_at), s0), s_at)
    b.store(b.select(resume, b.load(e_at), s0), e_at)
    b.store(k, prev_k)
    b.store(e1, prev_stop)
    base_start = x87_at(a["start_sum"], s0)
    base_end = x87_at(a["end_sum"], s0)
    b.store(e0, e)
    b.branch(edge_head)

    b.position_at_end(edge_head)
    ei = b.load(e)
    b.cbranch(b.icmp_signed("<=", ei, e1), edge_body, run_tail)

    b.position_at_end(edge_body)
    q = b.add(b.mul(k, a["ranks"]), at(a["edge_rank"], ei))
    b.branch(s_walk)

    # at = the keys <= q (np.searchsorted(..., side="right")), within the tenant's keys
    for walk, step, walk_done, pointer, keys, nxt in (
            (s_walk, s_step, s_done, s_at, a["start_key"], e_walk),
            (e_walk, e_step, e_done, e_at, a["end_key"], None)):
        b.position_at_end(walk)
        p = b.load(pointer)
        inside = b.icmp_signed("<", p, hi)
        check = fn.append_basic_block(walk.name + "_check")
        b.cbranch(inside, check, walk_done)
        b.position_at_end(check)
        b.cbranch(b.icmp_signed("<=", at(keys, p), q), step, walk_done)
        b.position_at_end(step)
        b.store(b.add(p, one), pointer)
        b.branch(walk)
        b.position_at_end(walk_done)
        if nxt is not None:
            b.branch(nxt)

    # e_done: service at edge e, the same x87 operations as numpy's loops
    x = b.fpext(at(a["edges"], ei), x87)

    def side(pointer: Any, sums: Any, base: Any) -> Any:
        p = b.load(pointer)
        below = b.sitofp(b.sub(p, s0), x87)
        return b.fsub(b.fmul(below, x), b.fsub(x87_at(sums, p), base))

    service = b.fsub(side(s_at, a["start_sum"], base_start), side(e_at, a["end_sum"], base_end))
    b.cbranch(b.icmp_signed("==", ei, e0), edge_tail, record)

    b.position_at_end(record)
    got = b.fptrunc(b.fsub(service, b.load(prev_s)), dbl)
    w = b.sub(ei, one)
    most_w = b.gep(a["most"], [w])
    least_w = b.gep(a["least"], [w])
    # np.maximum / np.minimum keep the held value unless the new one is strictly beyond
    m = b.load(most_w)
    b.store(b.select(b.fcmp_ordered(">", got, m), got, m), most_w)
    lo = b.load(least_w)
    b.store(b.select(b.fcmp_ordered("<", got, lo), got, lo), least_w)
    count_w = b.gep(a["backlogged"], [w])
    b.store(b.add(b.load(count_w), one), count_w)
    b.branch(edge_tail)

    b.position_at_end(edge_tail)
    b.store(service, prev_s)
    b.store(b.add(ei, one), e)
    b.branch(edge_head)

    b.position_at_end(run_tail)
    b.store(b.add(ri, one), r)
    b.branch(run_head)

    b.position_at_end(done)
    b.ret_void()
    return str(module)


@cache
def window_lags() -> Callable[..., None] | None:
    """The compiled function (cached on disk as ``desched.kernels``' are), or None where
    ``longdouble`` is not x87's or llvmlite cannot build it."""
    if not x87_longdouble():
        return None
    try:
        from desched.structures import kernelc

        params = (("runs", "i64"), *((n, "*i64") for n in (
            "run_code", "first", "stop", "seg0", "counts", "start_key", "start_sum", "end_key",
            "end_sum")), ("edges", "*f64"), ("edge_rank", "*i64"), ("ranks", "i64"),
            ("most", "*f64"), ("least", "*f64"), ("backlogged", "*i64"))
        sigs = {"window_lags": kernelc.Signature(params, "void")}
        return kernelc.native(_build_ir(), sigs, __file__)["window_lags"]
    except Exception:  # noqa: BLE001 (no native code: the numpy loop runs instead)
        return None


def accumulate(
    fn: Callable[..., None], run_code: Ints, first: Ints, stop: Ints, seg0: Ints, counts: Ints,
    start_key: Ints, start_sum: LongDoubles, end_key: Ints, end_sum: LongDoubles,
    edges: Floats, edge_rank: Ints, ranks: int, most: Floats, least: Floats,
    backlogged: Ints,
) -> None:
    """Fold every run's points into ``most``, ``least`` and ``backlogged`` (in place), as
    ``_window_lags``' numpy loop does: runs in order, edges ``first[r]..stop[r]`` of each."""
    arrays = [np.ascontiguousarray(v, dtype=np.int64) for v in (
        run_code, first, stop, seg0, counts, start_key)]
    sums = [np.ascontiguousarray(v, dtype=np.longdouble) for v in (start_sum, end_sum)]
    end_keys = np.ascontiguousarray(end_key, dtype=np.int64)
    edge_values = np.ascontiguousarray(edges, dtype=np.float64)
    ranks_of = np.ascontiguousarray(edge_rank, dtype=np.int64)
    for out, dtype in ((most, np.float64), (least, np.float64), (backlogged, np.int64)):
        assert out.dtype == dtype and out.flags.c_contiguous
    fn(arrays[0].size, *(v.ctypes.data for v in arrays), sums[0].ctypes.data,
       end_keys.ctypes.data, sums[1].ctypes.data, edge_values.ctypes.data, ranks_of.ctypes.data,
       int(ranks), most.ctypes.data, least.ctypes.data, backlogged.ctypes.data)
