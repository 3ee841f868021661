"""A compiled scan for the IFS family: the winning slot in one call instead of ~20 numpy calls.

The IFS scores of the backlogged tenants' head tasks are a few float operations per tenant;
on tens of tenants numpy spends nearly all its time in per-call overhead. This module builds
one small native function with llvmlite (already a dependency, through lleaves) that does
both passes (the maxima, then the scores and the argmax with the tie-break) and returns the
winning slot, its score and parts. It evaluates the very IEEE operations of the numpy code,
in the same order, with no fast-math flags (no reassociation, no fused multiply-add), so
the result is bit for bit the numpy one; ``tests/test_ifs_kernel.py`` checks that on random
and tied inputs, and the policies' fast == naive tests check the decisions.

Modes (``score`` per slot ``j``; ``nb = B[j] / max B``):

- ``MEMORYLESS``: ``w1 * nb + w2 * nw`` with ``nw = (now - H[j]) / (now - min H)`` (0 when
  that span is not positive);
- ``COUNTER``: ``(w1 * nb + w2 * nw) - w3 * ns`` with ``ns = X[j] / max X`` (0 when that
  maximum is not positive), ``X`` the decayed service computed by the caller;
- ``PREDICTED``: ``w1 * nb + w2 * ns`` with ``ns = 1.0 - X[j] / c`` (0 when ``c``, the
  largest queued prediction, is not positive).

Ties on the score go to the smaller ``H`` then the smaller ``P`` (head submit, position);
the number of slots that share the best score is returned too. If llvmlite cannot build
the function, ``kernel()`` returns None and the policies keep their numpy path.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

MEMORYLESS, COUNTER, PREDICTED = 0, 1, 2
OUT_SLOTS = 5  # score, part 1, part 2, part 3, ties

# (address of int64[5], address of double[4], n, now) -> winning slot; see Call
Kernel = Callable[[int, int, int, float], int]
_SIGNATURE = ctypes.CFUNCTYPE(
    ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_double
)
_ENGINE: list[object] = []  # keeps the JIT engine (and so the code) alive
# attributes a policy keeps for the kernel: raw addresses of its own arrays, which a copy
# (deepcopy, pickle) must not carry over, since they would point into the original's memory
CACHE_FIELDS = ("_call_of", "_call")


class KernelCacheState:
    """Mixin: copies and pickles of a policy leave out its kernel addresses (rebuilt on
    first use)."""

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        for name in CACHE_FIELDS:
            state.pop(name, None)
        return state


def _build_ir() -> str:
    """One function per mode, ``ifs_pick_<mode>``, each with only its own operations."""
    from llvmlite import ir

    module = ir.Module(name="desched_ifs")
    for mode in (MEMORYLESS, COUNTER, PREDICTED):
        _emit(ir, module, mode)
    return str(module)


def _emit(ir: Any, module: Any, mode: int) -> None:
    f64, i64 = ir.DoubleType(), ir.IntType(64)
    p64 = f64.as_pointer()
    pi64 = i64.as_pointer()
    # few arguments (ctypes converts each one at a cost): ints = addresses of [B, H, P, X,
    # out], floats = [c, w1, w2, w3] (written only when they change), then n and now
    fnty = ir.FunctionType(i64, [pi64, p64, i64, f64])
    fn = ir.Function(module, fnty, name=f"ifs_pick_{mode}")
    ints, floats, n, now = fn.args
    zero_f = ir.Constant(f64, 0.0)
    one_f = ir.Constant(f64, 1.0)
    zero_i, one_i = ir.Constant(i64, 0), ir.Constant(i64, 1)

    entry = fn.append_basic_block("entry")
    b = ir.IRBuilder(entry)

    def arg_int(k: int) -> Any:
        return b.load(b.gep(ints, [ir.Constant(i64, k)]))

    def arg_float(k: int) -> Any:
        return b.load(b.gep(floats, [ir.Constant(i64, k)]))

    bb = b.inttoptr(arg_int(0), p64)
    hh = b.inttoptr(arg_int(1), p64)
    pp = b.inttoptr(arg_int(2), pi64)
    xx = b.inttoptr(arg_int(3), p64)
    out = b.inttoptr(arg_int(4), p64)
    c, w1, w2, w3 = (arg_float(k) for k in range(4))
    # pass 1: max B, min H, max X from slot 0 on (n >= 1 is the caller's precondition)
    maxb = b.alloca(f64)
    minh = b.alloca(f64)
    maxx = b.alloca(f64)
    k = b.alloca(i64)
    b.store(b.load(bb), maxb)
    b.store(b.load(hh), minh)
    b.store(b.load(xx), maxx)
    b.store(one_i, k)
    loop1 = fn.append_basic_block("loop1")
    body1 = fn.append_basic_block("body1")
    done1 = fn.append_basic_block("done1")
    b.branch(loop1)
    b.position_at_end(loop1)
    j = b.load(k)
    b.cbranch(b.icmp_signed("<", j, n), body1, done1)
    b.position_at_end(body1)
    vb = b.load(b.gep(bb, [j]))
    old = b.load(maxb)
    b.store(b.select(b.fcmp_ordered(">", vb, old), vb, old), maxb)
    if mode != PREDICTED:
        vh = b.load(b.gep(hh, [j]))
        old = b.load(minh)
        b.store(b.select(b.fcmp_ordered("<", vh, old), vh, old), minh)
    if mode == COUNTER:
        vx = b.load(b.gep(xx, [j]))
        old = b.load(maxx)
        b.store(b.select(b.fcmp_ordered(">", vx, old), vx, old), maxx)
    b.store(b.add(j, one_i), k)
    b.branch(loop1)

    b.position_at_end(done1)
    span = b.fsub(now, b.load(minh))  # the largest wait
    span_pos = b.fcmp_ordered(">", span, zero_f)
    top_x = b.load(maxx)
    x_pos = b.fcmp_ordered(">", top_x, zero_f)
    c_pos = b.fcmp_ordered(">", c, zero_f)
    top_b = b.load(maxb)

    def parts(j: Any) -> tuple[Any, Any, Any, Any]:
        """nb, the second part, the third part (0 unless COUNTER) and the score of slot j."""
        nb = b.fdiv(b.load(b.gep(bb, [j])), top_b)
        if mode == PREDICTED:
            vx = b.load(b.gep(xx, [j]))
            second = b.select(c_pos, b.fsub(one_f, b.fdiv(vx, c)), zero_f)
            return nb, second, zero_f, b.fadd(b.fmul(w1, nb), b.fmul(w2, second))
        vh = b.load(b.gep(hh, [j]))
        nw = b.select(span_pos, b.fdiv(b.fsub(now, vh), span), zero_f)
        two = b.fadd(b.fmul(w1, nb), b.fmul(w2, nw))
        if mode == MEMORYLESS:
            return nb, nw, zero_f, two
        ns = b.select(x_pos, b.fdiv(b.load(b.gep(xx, [j])), top_x), zero_f)
        return nb, nw, ns, b.fsub(two, b.fmul(w3, ns))

    best_s = b.alloca(f64)
    best_j = b.alloca(i64)
    best_h = b.alloca(f64)  # the best slot's H and P, carried so as not to reload them
    best_p = b.alloca(i64)
    ties = b.alloca(i64)
    b.store(ir.Constant(f64, float("-inf")), best_s)
    b.store(zero_i, best_j)
    b.store(b.load(hh), best_h)
    b.store(b.load(pp), best_p)
    b.store(zero_i, ties)
    b.store(zero_i, k)
    loop2 = fn.append_basic_block("loop2")
    body2 = fn.append_basic_block("body2")
    done2 = fn.append_basic_block("done2")
    b.branch(loop2)
    b.position_at_end(loop2)
    j = b.load(k)
    b.cbranch(b.icmp_signed("<", j, n), body2, done2)

    b.position_at_end(body2)
    score = parts(j)[3]
    cur = b.load(best_s)
    cur_j = b.load(best_j)
    vh = b.load(b.gep(hh, [j]))
    vp = b.load(b.gep(pp, [j]))
    cur_h = b.load(best_h)
    cur_p = b.load(best_p)
    equal = b.fcmp_ordered("==", score, cur)
    greater = b.fcmp_ordered(">", score, cur)
    earlier = b.or_(
        b.fcmp_ordered("<", vh, cur_h),
        b.and_(b.fcmp_ordered("==", vh, cur_h), b.icmp_signed("<", vp, cur_p)),
    )
    better = b.or_(greater, b.and_(equal, earlier))
    b.store(b.select(better, score, cur), best_s)
    b.store(b.select(better, j, cur_j), best_j)
    b.store(b.select(better, vh, cur_h), best_h)
    b.store(b.select(better, vp, cur_p), best_p)
    count = b.load(ties)
    b.store(b.select(equal, b.add(count, one_i), b.select(greater, one_i, count)), ties)
    b.store(b.add(j, one_i), k)
    b.branch(loop2)

    b.position_at_end(done2)
    w = b.load(best_j)
    nb, second, third, _ = parts(w)
    b.store(b.load(best_s), b.gep(out, [zero_i]))
    b.store(nb, b.gep(out, [one_i]))
    b.store(second, b.gep(out, [ir.Constant(i64, 2)]))
    b.store(third, b.gep(out, [ir.Constant(i64, 3)]))
    b.store(b.sitofp(b.load(ties), f64), b.gep(out, [ir.Constant(i64, 4)]))
    b.ret(w)


class Picker:
    """The compiled functions, by mode (``picker[mode]``)."""

    def __init__(self, functions: Sequence[Kernel]) -> None:
        self.functions = functions

    def __getitem__(self, mode: int) -> Kernel:
        return self.functions[mode]


class Call:
    """The argument blocks of one policy's calls: ``ints`` = addresses of B, H, P, X and
    ``out``; ``floats`` = c, w1, w2, w3; ``out`` = score, part 1, part 2, part 3, ties
    (``OUT_SLOTS``)."""

    def __init__(self, function: Kernel, b: int, h: int, p: int, x: int) -> None:
        self.function = function
        self.out = (ctypes.c_double * OUT_SLOTS)()
        self.ints = (ctypes.c_int64 * 5)(b, h, p, x, ctypes.addressof(self.out))
        self.floats = (ctypes.c_double * 4)()
        self.constants = (0.0, 0.0, 0.0, 0.0)
        self.ints_at = ctypes.addressof(self.ints)
        self.floats_at = ctypes.addressof(self.floats)

    def __call__(self, n: int, now: float, constants: tuple[float, float, float, float]) -> int:
        """The winning slot among the first ``n`` at ``now`` with ``constants`` = (c, w1, w2,
        w3); its score and parts land in ``out``."""
        if constants != self.constants:
            self.constants = constants
            f = self.floats
            f[0], f[1], f[2], f[3] = constants
        return self.function(self.ints_at, self.floats_at, n, now)


@cache
def kernel() -> Picker | None:
    """The compiled ``ifs_pick_<mode>`` functions, or None where llvmlite cannot build them."""
    try:
        import llvmlite.binding as llvm

        if hasattr(llvm, "initialize"):
            try:
                llvm.initialize()
            except RuntimeError:  # newer llvmlite initialises itself
                pass
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        target = llvm.Target.from_default_triple().create_target_machine(opt=2)
        module = llvm.parse_assembly(_build_ir())
        module.verify()
        # promote the stack slots to registers and simplify the loops (no fast-math flags in
        # the IR, so no pass may reorder or fuse the float operations)
        tuning = llvm.PipelineTuningOptions(speed_level=2, size_level=0)
        builder = llvm.PassBuilder(target, tuning)
        builder.getModulePassManager().run(module, builder)
        engine = llvm.create_mcjit_compiler(module, target)
        engine.finalize_object()
        addresses = [engine.get_function_address(f"ifs_pick_{m}")
                     for m in (MEMORYLESS, COUNTER, PREDICTED)]
    except Exception:  # noqa: BLE001 (any failure to build means: use numpy)
        return None
    _ENGINE.append(engine)
    functions = [_SIGNATURE(a) for a in addresses]
    return Picker(functions)
