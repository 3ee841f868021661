"""A compiler of a small typed subset of Python to native code, through llvmlite.

The simulation kernels (``desched.kernels``) are written as plain Python functions over
numpy arrays, so that they read like the rest of the code and can run, slowly, under
CPython itself; this module translates them to LLVM IR and compiles them with llvmlite
(already a dependency, through lleaves; numba would need an older numpy). The subset:

- functions with annotated parameters: ``int`` (int64), ``float`` (double), ``bool`` and
  the array aliases ``I64`` / ``F64`` (``numpy`` int64 / float64 arrays, passed as raw
  pointers); the return annotation is one of those scalars or ``None``;
- locals take the type of their first assignment (or their annotation); module-level
  ``NAME = literal`` constants, ``math.inf``, ``math.nan``, ``True``, ``False``;
- ``if``/``elif``/``else``, ``while``, ``for x in range(...)``, ``break``, ``continue``,
  ``return``; assignments to names and array elements, augmented assignments;
- arithmetic with Python's semantics where they matter: ``/`` is true division in double,
  ``//`` and ``%`` floor as Python's do, ``and``/``or`` short-circuit, ``a if c else b``
  evaluates one side; comparisons of doubles are IEEE (``!=`` is true on NaN, as in Python);
  ``min``/``max`` of two values return the first unless the second is strictly
  smaller/larger (CPython's rule); ``round`` rounds half to even, ``int`` truncates;
- calls of other functions of the module, ``isnan``, ``nextafter``, ``exp`` and ``log1p``
  (the C library's, which CPython's ``math.nextafter``, ``math.exp`` and ``math.log1p``
  call for the arguments the kernels pass: finite, no overflow, ``log1p`` of a non-zero),
  ``sqrt`` (IEEE's correctly rounded square root, as ``math.sqrt``) and
  ``call_f64_loop(address, x, out, n)`` (a numpy ufunc inner loop over ``n`` doubles, so
  that a kernel computes ``np.exp2`` or ``np.exp`` with numpy's own bits, which are not
  always the C library's) and ``call_forest(address, x, at, out, at_out)`` (a forest compiled
  by lleaves, ``void forest_root(double *x, double *out, int32 start, int32 end)``, on the
  one row ``x[at:]``, its raw output written to ``out[at_out]``).

No fast-math flag is ever set, so LLVM neither reorders nor fuses float operations: every
double a kernel computes is the one CPython computes from the same source. Compiled machine
code is cached under ``__pycache__`` beside the kernel module, keyed by the IR's hash, the
llvmlite version and the host CPU, so a fresh process pays only for loading it.
"""

from __future__ import annotations

import ast
import ctypes
import hashlib
import math
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ARRAY_TYPES = {"I64": "i64", "F64": "f64"}
BUILTINS = frozenset({"float", "int", "bool", "round", "min", "max", "isnan", "nextafter",
                      "exp", "log1p", "sqrt", "call_f64_loop", "call_forest"})
"""Names the compiler translates itself; a module may define them for CPython (skipped)."""
SCALAR_TYPES = {"int": "i64", "float": "f64", "bool": "bool", "None": "void"}


class KernelSyntaxError(Exception):
    """The kernel source uses Python outside the compiled subset (the message names the line)."""


@dataclass(frozen=True, slots=True)
class Signature:
    """A function's parameter names and types (``i64``, ``f64``, ``bool``, ``*i64``,
    ``*f64``) and its return type (``void`` for None)."""

    params: tuple[tuple[str, str], ...]
    ret: str


def _annotation(node: ast.expr | None, where: str) -> str:
    if node is None:
        raise KernelSyntaxError(f"{where}: every parameter and the return need an annotation")
    name = str(node.value) if isinstance(node, ast.Constant) else ast.unparse(node)
    if name in ARRAY_TYPES:
        return "*" + ARRAY_TYPES[name]
    if name in SCALAR_TYPES:
        return SCALAR_TYPES[name]
    raise KernelSyntaxError(f"{where}: unsupported type {name!r}")


class _Module:
    """Translates the functions of one source module into one LLVM module."""

    def __init__(self, tree: ast.Module, filename: str) -> None:
        from llvmlite import ir

        self.ir = ir
        self.filename = filename
        self.tree = tree
        self.module = ir.Module(name=Path(filename).stem)
        self.types: dict[str, Any] = {
            "i64": ir.IntType(64), "f64": ir.DoubleType(), "bool": ir.IntType(1),
            "void": ir.VoidType(),
        }
        self.types["*i64"] = self.types["i64"].as_pointer()
        self.types["*f64"] = self.types["f64"].as_pointer()
        self.constants: dict[str, int | float | bool] = {}
        self.defs: dict[str, ast.FunctionDef] = {}
        self.signatures: dict[str, Signature] = {}
        self.functions: dict[str, Any] = {}
        for node in self.tree.body:
            if isinstance(node, ast.FunctionDef) and node.name not in BUILTINS:
                self.defs[node.name] = node
            elif (isinstance(node, ast.Assign) and len(node.targets) == 1
                  and isinstance(node.targets[0], ast.Name)):
                try:
                    value = ast.literal_eval(node.value)
                except ValueError:
                    continue
                if isinstance(value, (int, float, bool)):
                    self.constants[node.targets[0].id] = value
        for name, fn in self.defs.items():
            where = f"{filename}:{fn.lineno} {name}"
            params = tuple((a.arg, _annotation(a.annotation, where)) for a in fn.args.args)
            sig = Signature(params, _annotation(fn.returns, where))
            self.signatures[name] = sig
            fnty = ir.FunctionType(self.types[sig.ret], [self.types[t] for _, t in params])
            self.functions[name] = ir.Function(self.module, fnty, name=name)
        f64 = self.types["f64"]
        self.externals = {
            "nextafter": ir.Function(self.module, ir.FunctionType(f64, [f64, f64]),
                                     name="nextafter"),
            "exp": ir.Function(self.module, ir.FunctionType(f64, [f64]), name="exp"),
            "log1p": ir.Function(self.module, ir.FunctionType(f64, [f64]), name="log1p"),
            "rint": self.module.declare_intrinsic("llvm.rint", [f64]),
            "sqrt": self.module.declare_intrinsic("llvm.sqrt", [f64]),
        }

    def compile(self, exported: Sequence[str]) -> str:
        for name, fn in self.defs.items():
            if name not in exported:
                self.functions[name].linkage = "internal"
            _Function(self, fn).emit()
        return str(self.module)


class _Function:
    """Code generation for one function: locals live in entry-block stack slots, which
    LLVM's mem2reg promotes to registers."""

    def __init__(self, mod: _Module, node: ast.FunctionDef) -> None:
        self.mod = mod
        self.ir = mod.ir
        self.node = node
        self.sig = mod.signatures[node.name]
        self.fn = mod.functions[node.name]
        self.vars: dict[str, tuple[Any, str]] = {}
        self.loops: list[tuple[Any, Any]] = []  # (continue block, break block)
        self.entry = self.fn.append_basic_block("entry")  # stack slots only
        self.body = self.fn.append_basic_block("body")
        self.b = self.ir.IRBuilder(self.body)

    def err(self, node: ast.AST, msg: str) -> KernelSyntaxError:
        line = getattr(node, "lineno", self.node.lineno)
        return KernelSyntaxError(f"{self.mod.filename}:{line} ({self.node.name}): {msg}")

    def slot(self, name: str, ty: str) -> Any:
        """The stack slot of local ``name``, made in the entry block on first use."""
        if name in self.vars:
            return self.vars[name][0]
        ptr = self.ir.IRBuilder(self.entry).alloca(self.mod.types[ty], name=name)
        self.vars[name] = (ptr, ty)
        return ptr

    def emit(self) -> None:
        for (name, ty), arg in zip(self.sig.params, self.fn.args):
            arg.name = name + ".arg"
            self.b.store(arg, self.slot(name, ty))
        self.block(self.node.body)
        self.ir.IRBuilder(self.entry).branch(self.body)
        if not self.b.block.is_terminated:
            ret = self.sig.ret
            if ret == "void":
                self.b.ret_void()
            else:
                self.b.ret(self.ir.Constant(self.mod.types[ret], 0))

    # statements

    def block(self, body: Sequence[ast.stmt]) -> None:
        for stmt in body:
            if self.b.block.is_terminated:  # code after break/continue/return
                self.b.position_at_end(self.fn.append_basic_block("dead"))
            self.stmt(stmt)

    def stmt(self, s: ast.stmt) -> None:
        b = self.b
        if isinstance(s, ast.Assign):
            if len(s.targets) != 1:
                raise self.err(s, "one target per assignment")
            self.assign(s.targets[0], *self.expr(s.value))
        elif isinstance(s, ast.AnnAssign):
            if not isinstance(s.target, ast.Name) or s.value is None:
                raise self.err(s, "annotated assignment of a name with a value")
            ty = _annotation(s.annotation, f"{self.mod.filename}:{s.lineno}")
            self.slot(s.target.id, ty)
            self.assign(s.target, *self.expr(s.value))
        elif isinstance(s, ast.AugAssign):
            value = self.binop(s.op, self.expr(s.target), self.expr(s.value), s)
            self.assign(s.target, *value)
        elif isinstance(s, ast.If):
            cond = self.truth(s.test)
            if s.orelse:
                with b.if_else(cond) as (then, other):
                    with then:
                        self.block(s.body)
                    with other:
                        self.block(s.orelse)
            else:
                with b.if_then(cond):
                    self.block(s.body)
        elif isinstance(s, ast.While):
            if s.orelse:
                raise self.err(s, "no else on loops")
            head = self.fn.append_basic_block("while")
            body = self.fn.append_basic_block("while.body")
            done = self.fn.append_basic_block("while.end")
            b.branch(head)
            b.position_at_end(head)
            b.cbranch(self.truth(s.test), body, done)
            b.position_at_end(body)
            self.loops.append((head, done))
            self.block(s.body)
            self.loops.pop()
            if not b.block.is_terminated:
                b.branch(head)
            b.position_at_end(done)
        elif isinstance(s, ast.For):
            self.for_range(s)
        elif isinstance(s, ast.Break):
            b.branch(self.loops[-1][1])
        elif isinstance(s, ast.Continue):
            b.branch(self.loops[-1][0])
        elif isinstance(s, ast.Return):
            if s.value is None:
                b.ret_void()
            else:
                b.ret(self.coerce(*self.expr(s.value), self.sig.ret, s))
        elif isinstance(s, ast.Expr):
            if not isinstance(s.value, ast.Call):
                if isinstance(s.value, ast.Constant) and isinstance(s.value.value, str):
                    return  # a docstring
                raise self.err(s, "only calls as expression statements")
            self.expr(s.value)
        elif isinstance(s, ast.Pass):
            pass
        else:
            raise self.err(s, f"unsupported statement {type(s).__name__}")

    def for_range(self, s: ast.For) -> None:
        b = self.b
        it = s.iter
        if (not isinstance(s.target, ast.Name) or not isinstance(it, ast.Call)
                or not isinstance(it.func, ast.Name) or it.func.id != "range" or s.orelse):
            raise self.err(s, "loops are `for NAME in range(...)`")
        args = [self.coerce(*self.expr(a), "i64", s) for a in it.args]
        one = self.ir.Constant(self.mod.types["i64"], 1)
        start, stop, step = (
            (self.ir.Constant(self.mod.types["i64"], 0), args[0], one) if len(args) == 1
            else (args[0], args[1], one) if len(args) == 2 else tuple(args)
        )
        step_node = it.args[2] if len(it.args) == 3 else None
        negative = isinstance(step_node, ast.UnaryOp) and isinstance(step_node.op, ast.USub)
        counter = self.slot("." + s.target.id + str(s.lineno), "i64")
        var = self.slot(s.target.id, "i64")
        b.store(start, counter)
        head = self.fn.append_basic_block("for")
        body = self.fn.append_basic_block("for.body")
        nxt = self.fn.append_basic_block("for.next")
        done = self.fn.append_basic_block("for.end")
        b.branch(head)
        b.position_at_end(head)
        j = b.load(counter)
        b.cbranch(b.icmp_signed(">" if negative else "<", j, stop), body, done)
        b.position_at_end(body)
        b.store(j, var)
        self.loops.append((nxt, done))
        self.block(s.body)
        self.loops.pop()
        if not b.block.is_terminated:
            b.branch(nxt)
        b.position_at_end(nxt)
        b.store(b.add(b.load(counter), step), counter)
        b.branch(head)
        b.position_at_end(done)

    def assign(self, target: ast.expr, value: Any, ty: str) -> None:
        if isinstance(target, ast.Name):
            if target.id in self.vars:
                ptr, have = self.vars[target.id]
                self.b.store(self.coerce(value, ty, have, target), ptr)
            else:
                self.b.store(value, self.slot(target.id, ty))
        elif isinstance(target, ast.Subscript):
            ptr, elem = self.element(target)
            self.b.store(self.coerce(value, ty, elem, target), ptr)
        else:
            raise self.err(target, "assign to a name or an array element")

    # expressions: each returns (value, type)

    def truth(self, node: ast.expr) -> Any:
        return self.to_bool(*self.expr(node), node)

    def to_bool(self, value: Any, ty: str, node: ast.AST) -> Any:
        b = self.b
        if ty == "bool":
            return value
        if ty == "i64":
            return b.icmp_signed("!=", value, self.ir.Constant(value.type, 0))
        if ty == "f64":
            return b.fcmp_unordered("!=", value, self.ir.Constant(value.type, 0.0))
        raise self.err(node, "an array is not a truth value")

    def coerce(self, value: Any, ty: str, want: str, node: ast.AST) -> Any:
        if ty == want:
            return value
        b = self.b
        if want == "f64" and ty == "i64":
            return b.sitofp(value, self.mod.types["f64"])
        if want == "f64" and ty == "bool":
            return b.uitofp(value, self.mod.types["f64"])
        if want == "i64" and ty == "bool":
            return b.zext(value, self.mod.types["i64"])
        if want == "bool":
            return self.to_bool(value, ty, node)
        raise self.err(node, f"cannot use a {ty} as a {want}")

    def element(self, node: ast.Subscript) -> tuple[Any, str]:
        base, ty = self.expr(node.value)
        if not ty.startswith("*"):
            raise self.err(node, "only arrays are subscripted")
        index = self.coerce(*self.expr(node.slice), "i64", node)
        return self.b.gep(base, [index]), ty[1:]

    def const(self, value: Any, node: ast.AST) -> tuple[Any, str]:
        types = self.mod.types
        if isinstance(value, bool):
            return self.ir.Constant(types["bool"], int(value)), "bool"
        if isinstance(value, int):
            return self.ir.Constant(types["i64"], value), "i64"
        if isinstance(value, float):
            return self.ir.Constant(types["f64"], value), "f64"
        raise self.err(node, f"unsupported constant {value!r}")

    def expr(self, node: ast.expr) -> tuple[Any, str]:
        b = self.b
        if isinstance(node, ast.Constant):
            return self.const(node.value, node)
        if isinstance(node, ast.Name):
            if node.id in self.vars:
                ptr, ty = self.vars[node.id]
                return b.load(ptr), ty
            if node.id in self.mod.constants:
                return self.const(self.mod.constants[node.id], node)
            raise self.err(node, f"unknown name {node.id!r}")
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "math":
                if node.attr == "inf":
                    return self.const(math.inf, node)
                if node.attr == "nan":
                    return self.const(math.nan, node)
            raise self.err(node, "only math.inf and math.nan as attributes")
        if isinstance(node, ast.Subscript):
            ptr, ty = self.element(node)
            return b.load(ptr), ty
        if isinstance(node, ast.BinOp):
            return self.binop(node.op, self.expr(node.left), self.expr(node.right), node)
        if isinstance(node, ast.UnaryOp):
            value, ty = self.expr(node.operand)
            if isinstance(node.op, ast.Not):
                return b.xor(self.to_bool(value, ty, node),
                             self.ir.Constant(self.mod.types["bool"], 1)), "bool"
            if isinstance(node.op, ast.USub):
                if ty == "f64":
                    return b.fneg(value), "f64"
                return b.neg(self.coerce(value, ty, "i64", node)), "i64"
            raise self.err(node, "unsupported unary operator")
        if isinstance(node, ast.Compare):
            return self.compare(node)
        if isinstance(node, ast.BoolOp):
            return self.boolop(node)
        if isinstance(node, ast.IfExp):
            return self.ifexp(node)
        if isinstance(node, ast.Call):
            return self.call(node)
        raise self.err(node, f"unsupported expression {type(node).__name__}")

    def binop(self, op: ast.operator, left: tuple[Any, str], right: tuple[Any, str],
              node: ast.AST) -> tuple[Any, str]:
        b = self.b
        (lv, lt), (rv, rt) = left, right
        if isinstance(op, ast.Div):
            return b.fdiv(self.coerce(lv, lt, "f64", node), self.coerce(rv, rt, "f64", node)), "f64"
        if "f64" in (lt, rt):
            x, y = self.coerce(lv, lt, "f64", node), self.coerce(rv, rt, "f64", node)
            fops = {ast.Add: b.fadd, ast.Sub: b.fsub, ast.Mult: b.fmul}
            if type(op) not in fops:
                raise self.err(node, f"unsupported float operator {type(op).__name__}")
            return fops[type(op)](x, y), "f64"
        x, y = self.coerce(lv, lt, "i64", node), self.coerce(rv, rt, "i64", node)
        iops = {ast.Add: b.add, ast.Sub: b.sub, ast.Mult: b.mul, ast.LShift: b.shl,
                ast.RShift: b.ashr, ast.BitAnd: b.and_, ast.BitOr: b.or_, ast.BitXor: b.xor}
        if type(op) in iops:
            return iops[type(op)](x, y), "i64"
        if isinstance(op, (ast.FloorDiv, ast.Mod)):
            zero = self.ir.Constant(x.type, 0)
            q, r = b.sdiv(x, y), b.srem(x, y)
            off = b.and_(b.icmp_signed("!=", r, zero),
                         b.xor(b.icmp_signed("<", r, zero), b.icmp_signed("<", y, zero)))
            if isinstance(op, ast.FloorDiv):
                return b.sub(q, b.zext(off, x.type)), "i64"
            return b.select(off, b.add(r, y), r), "i64"
        raise self.err(node, f"unsupported operator {type(op).__name__}")

    def cmp(self, op: ast.cmpop, left: tuple[Any, str], right: tuple[Any, str],
            node: ast.AST) -> Any:
        b = self.b
        sym = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==",
               ast.NotEq: "!="}.get(type(op))
        if sym is None:
            raise self.err(node, f"unsupported comparison {type(op).__name__}")
        (lv, lt), (rv, rt) = left, right
        if "f64" in (lt, rt):
            x, y = self.coerce(lv, lt, "f64", node), self.coerce(rv, rt, "f64", node)
            if sym == "!=":
                return b.fcmp_unordered("!=", x, y)
            return b.fcmp_ordered(sym, x, y)
        if lt == rt == "bool":
            return b.icmp_unsigned(sym, lv, rv)
        return b.icmp_signed(sym, self.coerce(lv, lt, "i64", node),
                             self.coerce(rv, rt, "i64", node))

    def compare(self, node: ast.Compare) -> tuple[Any, str]:
        left = self.expr(node.left)
        result = None
        for op, comp in zip(node.ops, node.comparators):
            right = self.expr(comp)
            c = self.cmp(op, left, right, node)
            result = c if result is None else self.b.and_(result, c)
            left = right
        return result, "bool"

    def boolop(self, node: ast.BoolOp) -> tuple[Any, str]:
        b = self.b
        is_and = isinstance(node.op, ast.And)
        done = self.fn.append_basic_block("bool.end")
        incoming = []
        for k, value in enumerate(node.values):
            v = self.truth(value)
            if k == len(node.values) - 1:
                incoming.append((v, b.block))
                b.branch(done)
                break
            nxt = self.fn.append_basic_block("bool.next")
            incoming.append((v, b.block))
            if is_and:
                b.cbranch(v, nxt, done)
            else:
                b.cbranch(v, done, nxt)
            b.position_at_end(nxt)
        b.position_at_end(done)
        phi = b.phi(self.mod.types["bool"])
        for v, block in incoming:
            phi.add_incoming(v, block)
        return phi, "bool"

    def ifexp(self, node: ast.IfExp) -> tuple[Any, str]:
        b = self.b
        cond = self.truth(node.test)
        then_bb = self.fn.append_basic_block("ifexp.then")
        else_bb = self.fn.append_basic_block("ifexp.else")
        done = self.fn.append_basic_block("ifexp.end")
        b.cbranch(cond, then_bb, else_bb)
        b.position_at_end(then_bb)
        tv, tt = self.expr(node.body)
        then_end = b.block
        b.position_at_end(else_bb)
        ev, et = self.expr(node.orelse)
        else_end = b.block
        ty = "f64" if "f64" in (tt, et) else tt
        b.position_at_end(then_end)
        tv = self.coerce(tv, tt, ty, node)
        b.branch(done)
        b.position_at_end(else_end)
        ev = self.coerce(ev, et, ty, node)
        b.branch(done)
        b.position_at_end(done)
        phi = b.phi(self.mod.types[ty])
        phi.add_incoming(tv, then_end)
        phi.add_incoming(ev, else_end)
        return phi, ty

    def call(self, node: ast.Call) -> tuple[Any, str]:
        b = self.b
        if not isinstance(node.func, ast.Name) or node.keywords:
            raise self.err(node, "calls are NAME(args) without keywords")
        name = node.func.id
        args = [self.expr(a) for a in node.args]
        types = self.mod.types
        if name == "float":
            return self.coerce(*args[0], "f64", node), "f64"
        if name == "int":
            v, t = args[0]
            if t == "f64":
                return b.fptosi(v, types["i64"]), "i64"
            return self.coerce(v, t, "i64", node), "i64"
        if name == "bool":
            return self.to_bool(*args[0], node), "bool"
        if name == "round":
            v = self.coerce(*args[0], "f64", node)
            return b.fptosi(b.call(self.mod.externals["rint"], [v]), types["i64"]), "i64"
        if name in ("min", "max"):
            (av, at), (bv, bt) = args
            ty = "f64" if "f64" in (at, bt) else "i64"
            x, y = self.coerce(av, at, ty, node), self.coerce(bv, bt, ty, node)
            second = self.cmp(ast.Lt() if name == "min" else ast.Gt(), (y, ty), (x, ty), node)
            return b.select(second, y, x), ty
        if name == "isnan":
            v = self.coerce(*args[0], "f64", node)
            return b.fcmp_unordered("uno", v, v), "bool"
        if name == "nextafter":
            x, y = (self.coerce(v, t, "f64", node) for v, t in args)
            return b.call(self.mod.externals["nextafter"], [x, y]), "f64"
        if name in ("exp", "log1p", "sqrt"):
            (v, t), = args
            return b.call(self.mod.externals[name], [self.coerce(v, t, "f64", node)]), "f64"
        if name == "call_f64_loop":
            return self.call_loop(node, args)
        if name == "call_forest":
            return self.call_forest(node, args)
        if name not in self.mod.functions:
            raise self.err(node, f"unknown function {name!r}")
        sig = self.mod.signatures[name]
        if len(args) != len(sig.params):
            raise self.err(node, f"{name} takes {len(sig.params)} arguments")
        values = [self.coerce(v, t, want, node) for (v, t), (_, want) in zip(args, sig.params)]
        return b.call(self.mod.functions[name], values), sig.ret

    def call_forest(self, node: ast.Call, args: list[tuple[Any, str]]) -> tuple[Any, str]:
        """``call_forest(address, x, at, out, at_out)``: lleaves' entry point on one row."""
        ir, b, types = self.ir, self.b, self.mod.types
        if [t for _, t in args] != ["i64", "*f64", "i64", "*f64", "i64"]:
            raise self.err(node, "call_forest(address: int, x: F64, at: int, out: F64, "
                                 "at_out: int)")
        (addr, _), (x, _), (at, _), (out, _), (at_out, _) = args
        f64p = types["f64"].as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [f64p, f64p, i32, i32])
        fn = b.inttoptr(addr, fnty.as_pointer())
        b.call(fn, [b.gep(x, [at]), b.gep(out, [at_out]), ir.Constant(i32, 0),
                    ir.Constant(i32, 1)])
        return ir.Constant(types["i64"], 0), "i64"

    def call_loop(self, node: ast.Call, args: list[tuple[Any, str]]) -> tuple[Any, str]:
        """``call_f64_loop(address, x, out, n)``: a numpy ufunc loop ``void(char **args,
        npy_intp *dimensions, npy_intp *steps, void *data)`` over ``n`` contiguous doubles."""
        ir, b, types = self.ir, self.b, self.mod.types
        (addr, at), (x, xt), (out, ot), (n, nt) = args
        if (at, xt, ot, nt) != ("i64", "*f64", "*f64", "i64"):
            raise self.err(node, "call_f64_loop(address: int, x: F64, out: F64, n: int)")
        i8p = ir.IntType(8).as_pointer()
        i64 = types["i64"]
        fnty = ir.FunctionType(ir.VoidType(), [i8p.as_pointer(), i64.as_pointer(),
                                               i64.as_pointer(), i8p])
        fn = b.inttoptr(addr, fnty.as_pointer())
        at_b = ir.IRBuilder(self.entry)
        ptrs = at_b.alloca(i8p, 2)
        dims = at_b.alloca(i64, 1)
        steps = at_b.alloca(i64, 2)
        b.store(b.bitcast(x, i8p), b.gep(ptrs, [ir.Constant(i64, 0)]))
        b.store(b.bitcast(out, i8p), b.gep(ptrs, [ir.Constant(i64, 1)]))
        b.store(n, dims)
        b.store(ir.Constant(i64, 8), b.gep(steps, [ir.Constant(i64, 0)]))
        b.store(ir.Constant(i64, 8), b.gep(steps, [ir.Constant(i64, 1)]))
        b.call(fn, [ptrs, dims, steps, ir.Constant(i8p, None)])
        return ir.Constant(i64, 0), "i64"


def translate(
    tree: ast.Module, filename: str, exported: Sequence[str]
) -> tuple[str, dict[str, Signature]]:
    """LLVM IR of the functions in ``tree`` (a parsed module) and the signatures of
    ``exported`` ones."""
    mod = _Module(tree, filename)
    missing = [e for e in exported if e not in mod.signatures]
    if missing:
        raise KernelSyntaxError(f"{filename}: no function {missing[0]!r}")
    text = mod.compile(exported)
    return text, {e: mod.signatures[e] for e in exported}


_CTYPES = {"i64": ctypes.c_int64, "f64": ctypes.c_double, "bool": ctypes.c_bool,
           "*i64": ctypes.c_void_p, "*f64": ctypes.c_void_p, "void": None}
_ENGINES: list[Any] = []  # keep the engines (and so the machine code) alive


def _cache_dir(filename: str) -> Path | None:
    folder = Path(os.environ.get("DESCHED_KERNEL_CACHE", Path(filename).parent / "__pycache__"))
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return folder if os.access(folder, os.W_OK) else None


def compile_functions(
    tree: ast.Module, filename: str, exported: Sequence[str]
) -> dict[str, Callable[..., Any]]:
    """Compile ``exported`` functions of ``tree`` (a parsed module) to native code and return
    ctypes callables (arrays are passed as addresses: ``arr.ctypes.data``)."""
    text, sigs = translate(tree, filename, exported)
    return native(text, sigs, filename)


def native(text: str, sigs: dict[str, Signature], filename: str) -> dict[str, Callable[..., Any]]:
    """Machine code for the LLVM IR ``text`` (from ``translate``) and ctypes callables of the
    functions in ``sigs``. The object code is cached on disk (module docstring); a cache
    that cannot be read or written is skipped."""
    import llvmlite
    import llvmlite.binding as llvm

    try:
        llvm.initialize()
    except RuntimeError:  # newer llvmlite initialises itself
        pass
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_default_triple()
    cpu = llvm.get_host_cpu_name()
    machine = target.create_target_machine(cpu=cpu, opt=3)
    key = hashlib.sha256("\0".join((text, llvmlite.__version__, llvm.get_process_triple(),
                                    cpu, llvm.get_host_cpu_features().flatten())).encode())
    folder = _cache_dir(filename)
    cached = folder / f"kernel-{key.hexdigest()[:24]}.o" if folder is not None else None
    loaded = cached.read_bytes() if cached is not None and cached.exists() else None
    if loaded is not None:
        # the cached object goes into an engine of an empty module: parsing the IR again
        # would cost ten times the load
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), machine)
        engine.add_object_file(llvm.ObjectFileRef.from_data(loaded))
    else:
        module = llvm.parse_assembly(text)
        module.verify()
        tuning = llvm.PipelineTuningOptions(speed_level=3, size_level=0)
        builder = llvm.PassBuilder(machine, tuning)
        builder.getModulePassManager().run(module, builder)
        engine = llvm.create_mcjit_compiler(module, machine)

        def notify(_module: Any, buffer: bytes) -> None:
            if cached is not None:
                _write_atomic(cached, buffer)

        engine.set_object_cache(notify, lambda _module: None)
    engine.finalize_object()
    _ENGINES.append(engine)
    out: dict[str, Callable[..., Any]] = {}
    for name, sig in sigs.items():
        argtypes: list[Any] = [_CTYPES[t] for _, t in sig.params]
        proto = ctypes.CFUNCTYPE(_CTYPES[sig.ret], *argtypes)
        out[name] = proto(engine.get_function_address(name))
    return out


def cached_translation(
    key: str, filename: str, build: Callable[[], tuple[ast.Module, Sequence[str]]]
) -> tuple[str, dict[str, Signature]]:
    """``translate`` of the module ``build`` returns (its tree and exported names), kept
    under the cache folder by ``key`` (a hash of everything the IR depends on), so that a
    fresh process skips the translation."""
    import json

    folder = _cache_dir(filename)
    ir_path = folder / f"kernel-{key}.ll" if folder is not None else None
    sig_path = folder / f"kernel-{key}.json" if folder is not None else None
    if ir_path is not None and sig_path is not None and ir_path.exists() and sig_path.exists():
        try:
            raw = json.loads(sig_path.read_text())
            sigs = {name: Signature(tuple((p, t) for p, t in v["params"]), v["ret"])
                    for name, v in raw.items()}
            return ir_path.read_text(), sigs
        except (OSError, ValueError, KeyError, TypeError):
            pass
    tree, exported = build()
    text, sigs = translate(tree, filename, exported)
    if ir_path is not None and sig_path is not None:
        _write_atomic(sig_path, json.dumps(
            {n: {"params": list(s.params), "ret": s.ret} for n, s in sigs.items()}).encode())
        _write_atomic(ir_path, text.encode())
    return text, sigs


def _write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` by a rename, so that a concurrent reader sees all or
    nothing; a failure leaves no cache entry."""
    try:
        with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as tmp:
            tmp.write(data)
        os.replace(tmp.name, path)
    except OSError:
        pass
