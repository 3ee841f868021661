"""Compiled simulation kernels: the event loop and a policy's rule in one native loop.

``desched.simulator.simulate`` runs a policy object under a Python event loop: the
reference, and the only engine for a policy without a kernel or a run with concurrency caps
or priority levels (``desched.controls.Gate``). For the policies in ``KERNELS`` the same
run is one call of native code compiled from ``desched.kernels.source`` (a typed subset of
Python, ``desched.structures.kernelc``): the same semantics, the same float operations, so
the start times, workers, scores and parts are bit-identical to the Python loop's
(tests/test_kernels.py, on generated traces with ties, bursts and tenant weights). Tenant
weights, rate limits (shaped submit times), quantile predictions (``predicted_p50_s``,
``predicted_p90_s``, for the Boost policies) and predictions made at each arrival from what had
finished in the run (the judge's, ``desched.kernels.source_online``; a policy reads a task's
predictions at its push or later) are supported; caps and priorities are not.

Cost: the first use in a process loads the compiled code, from the cache under
``desched/kernels/__pycache__`` (about 0.01 s of CPU), or compiles it there (about 0.6 s,
once per machine and source version; ``DESCHED_KERNEL_CACHE`` moves the folder); a run is
O(n log n) for the events plus the policy's cost per decision, with no Python per task. Per
decision: fifo O(1); sjf-*, guarded-sjf O(log n); round-robin O(log m); the IFS family a
visit of the K backlogged tenants by group of equal backlog, largest first, that stops at
the first group whose exact bound is below the best score (on a burst it scores a small
fraction of them; ifs-counter compares every backlogged tenant's decayed service at a
reference time and computes the current one for the few that could be the largest or win,
and ifs-predicted adds O(log n) for its heaps); vtc and fair-sjf scan the K
backlogged tenants (the policy objects keep a heap, O(log K)), cheap for the thousand
tenants of the scenarios; hrrn-predicted the kinetic tournament's amortised O(log^2 n);
fsp-predicted O(log n) plus O(log n) per task leaving its virtual system (two heaps);
boost-predicted O(log n) amortised (two heaps, entries of started tasks dropped at the
tops), boost-now the same plus O(queue) each time a dispatch moves γ (the heap rebuilt under
it), boost-lanes the same plus O(1) amortised for the oldest queued task (a pointer over
the arrival order, ``desched.kernels.source_lanes``), boost-ledger boost-lanes' plus O(log B)
binary searches in the B backlogged tenants kept in the order of their oldest queued tasks
(the overtaken ones are a prefix of it), one add per overtaken tenant, a test per tenant
flagged since the last decision (the others cannot be owed:
``desched.kernels.source_ledger``) and O(charged tenants) per completion, and fair-boost
vtc's scan plus O(log m) in the tenant, both plus the γ estimate's O(window x 40) every
``window`` dispatches (and at the 2nd, 4th, 8th, ...), which computes
``desched.structures.exp2.expd`` (compiled from the policy objects' own source) and sums
exactly as ``math.fsum`` does (``desched.kernels.source_boost``), so that γ has the policy
object's bits.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from desched.policies.base import Policy
from desched.structures import exp2

SOURCE = Path(__file__).with_name("source.py")
SOURCES = (SOURCE, *(Path(__file__).with_name(f"source_{part}.py")
                     for part in ("predicted", "boost", "lanes", "ledger", "online")))
"""The kernel source files, compiled as one module (their imports are left out)."""
SHARED = (Path(exp2.__file__), ("series", "pow2", "exp2d", "expd"))
"""A module whose functions named here (with its constants) are compiled with the kernels:
the policy objects call the same source (``exp2d``: ifs-counter's decay)."""
STATE_ARRAYS = ("ia", "ib", "ic", "id_", "ie", "if_", "ig", "ih", "fa", "fb", "fc", "fd", "fe",
                "ff", "fg")
ENGINE_PYTHON = "python"


@dataclass(frozen=True, slots=True)
class KernelSpec:
    """How one policy runs as a kernel: its functions' prefix in ``source.py``, its
    parameters as the ``prm`` array, the sizes of its state arrays (by the task count ``n``,
    the tenant count ``nt`` and the parameters; unlisted arrays get one element) and, where
    some depend on the worker count too, ``by_workers`` (by ``n``, ``nt`` and the workers:
    those sizes replace ``sizes``')."""

    prefix: str
    prm: Callable[[Any], list[float]]
    sizes: Callable[[int, int, Any], dict[str, int]]
    by_workers: Callable[[int, int, int], dict[str, int]] | None = None


def _ifs_prm(counter: bool) -> Callable[[Any], list[float]]:
    def prm(p: Any) -> list[float]:
        if counter:
            return [p.w_backlog, p.w_wait, p.w_service, p.half_life_s, 1.0]
        return [p.w_backlog, p.w_wait, 0.0, 1.0, 0.0]
    return prm


def _per_tenant(n: int, nt: int, p: Any = None) -> dict[str, int]:
    return {"ia": nt, "ib": nt, "ic": nt, "id_": nt}


def _ifs_sizes(n: int, nt: int, p: Any = None) -> dict[str, int]:
    return {**_per_tenant(n, nt), "if_": n, "ig": n + 1, "fa": nt, "fb": nt, "fc": nt, "fd": nt,
            "fe": nt, "ff": nt + 2}


def _vtc_sizes(n: int, nt: int, p: Any = None) -> dict[str, int]:
    return {"ia": n, "ib": nt, "ic": nt, "id_": nt, "fa": n, "fb": n, "fc": nt}


def _sjf_sizes(n: int, nt: int, p: Any = None) -> dict[str, int]:
    return {"ia": n, "fa": n, "fb": n}


def _gsjf_sizes(n: int, nt: int, p: Any = None) -> dict[str, int]:
    return {"ia": n, "ib": n, "ic": n, "fa": n, "fb": n, "fc": n, "fd": n, "fe": n}


def _ifsp_sizes(n: int, nt: int, p: Any = None) -> dict[str, int]:
    return {"ia": n, "ib": nt, "ic": nt, "id_": nt, "ie": n, "if_": 2 * n + 1, "ig": n + 1,
            "ih": nt, "fa": n, "fb": n, "fc": n, "fd": n, "fe": nt, "fg": nt}


def _fsp_sizes(n: int, nt: int, p: Any = None) -> dict[str, int]:
    return {"ia": n, "ib": n, "fa": n, "fb": n, "fc": n, "fd": n, "fe": 2}


def _hrrn_sizes(n: int, nt: int, p: Any = None) -> dict[str, int]:
    cap = max(16, 1 << max(0, (n - 1).bit_length()))  # the most the tree grows to
    return {"ia": 2 * cap, "ib": 2 * cap, "ic": 2 * cap, "fa": 2 * cap, "id_": cap, "ie": n,
            "if_": cap}


def _estimator_sizes(n: int, p: Any) -> dict[str, int]:
    """The γ estimate's arrays (``source_boost``): labels, the window's ring, ``fsum``'s
    partials, the window in order and the ``exp`` loop's buffers."""
    w = int(p.window)
    return {"fd": w, "fe": 2 * n + 6 * w + 1, "ff": w}


def _boost_sizes(n: int, nt: int, p: Any) -> dict[str, int]:
    return {"ia": 2 * n, "ic": n, "fa": 2 * n, "fb": 2 * n, "fc": n, **_estimator_sizes(n, p)}


def _lanes_sizes(n: int, nt: int, p: Any) -> dict[str, int]:
    return {**_boost_sizes(n, nt, p), "ib": n}


def _ledger_sizes(n: int, nt: int, workers: int) -> dict[str, int]:
    """``boost-ledger``'s tenants (``id_``, ``fg``) and one charge slot per worker (``ie``,
    ``ig``, ``ih``, ``fg``): ``desched.kernels.source_ledger``."""
    return {"id_": 6 * nt, "fg": 3 * nt + workers, "ie": n + 2 * workers, "ig": workers * nt,
            "ih": workers}


def _fboost_sizes(n: int, nt: int, p: Any) -> dict[str, int]:
    return {**_vtc_sizes(n, nt), **_estimator_sizes(n, p)}


def _boost_prm(p: Any) -> list[float]:
    return [float(p.window), float(p.workers), p.max_load, p.scale,
            getattr(p, "sympathy", 0.0)]


def _ledger_prm(p: Any) -> list[float]:
    from desched.policies.boost_ledger import BoostLedger

    return [*_boost_prm(p), BoostLedger.ALPHA]


KERNELS: dict[str, KernelSpec] = {
    "fifo": KernelSpec("fifo", lambda p: [], lambda n, nt, p: {}),
    "sjf-oracle": KernelSpec("sjf", lambda p: [0.0], _sjf_sizes),
    "sjf-predicted": KernelSpec("sjf", lambda p: [1.0], _sjf_sizes),
    "ifs-memoryless": KernelSpec("ifs", _ifs_prm(False), _ifs_sizes),
    "ifs-counter": KernelSpec("ifs", _ifs_prm(True), _ifs_sizes),
    "vtc": KernelSpec("vtc", lambda p: [0.0], _vtc_sizes),
    "fair-sjf": KernelSpec("vtc", lambda p: [1.0], _vtc_sizes),
    "round-robin": KernelSpec("rr", lambda p: [], lambda n, nt, p: {"ia": nt, "ib": nt, "ic": nt}),
    "guarded-sjf": KernelSpec("gsjf", lambda p: [p.beta, p.a], _gsjf_sizes),
    "ifs-predicted": KernelSpec("ifsp", lambda p: [p.w_backlog, p.w_short], _ifsp_sizes),
    "hrrn-predicted": KernelSpec("hrrn", lambda p: [], _hrrn_sizes),
    "boost-predicted": KernelSpec("boost", _boost_prm, _boost_sizes),
    "boost-now": KernelSpec("now", lambda p: [*_boost_prm(p), float(p.rekey_depth),
                                              float(p.rekey_spread)], _boost_sizes),
    "fair-boost": KernelSpec("fboost", _boost_prm, _fboost_sizes),
    "boost-lanes": KernelSpec("lanes", _boost_prm, _lanes_sizes),
    "boost-ledger": KernelSpec("ledger", _ledger_prm, _lanes_sizes, _ledger_sizes),
    "fsp-predicted": KernelSpec("fsp", lambda p: [float(p.workers)], _fsp_sizes),
}
"""Policy name -> its kernel. Only the registered fast class of that name runs here."""


def kernel_name(policy: Policy) -> str | None:
    """The ``KERNELS`` key that runs ``policy``, or None (a naive twin, a subclass, a policy
    without a kernel)."""
    from desched.policies import REGISTRY

    name = getattr(policy, "name", None)
    if name in KERNELS and type(policy) is REGISTRY.get(name):
        return str(name)
    return None


def _bind(template: ast.FunctionDef, prefix: str,
          defs: dict[str, ast.FunctionDef]) -> ast.FunctionDef:
    """``sim_<prefix>``: the template with ``policy_<x>(args)`` calls bound to
    ``<prefix>_<x>(args, *the template's names of its remaining parameters)``."""
    fn = copy.deepcopy(template)
    fn.name = f"sim_{prefix}"

    class Bind(ast.NodeTransformer):
        def visit_Call(self, node: ast.Call) -> ast.AST:
            self.generic_visit(node)
            if isinstance(node.func, ast.Name) and node.func.id.startswith("policy_"):
                target = f"{prefix}_{node.func.id.removeprefix('policy_')}"
                params = [a.arg for a in defs[target].args.args]
                rest = [ast.Name(p, ast.Load()) for p in params[len(node.args):]]
                return ast.Call(ast.Name(target, ast.Load()), [*node.args, *rest], [])
            return node

    return ast.fix_missing_locations(Bind().visit(fn))  # type: ignore[no-any-return]


_LOCK = threading.Lock()


@cache
def compiled() -> dict[str, Callable[..., int]] | None:
    """The ``sim_<prefix>`` functions, compiled (or loaded from the cache); None where
    llvmlite cannot build them (the simulator then runs the Python loop)."""
    from desched.structures import kernelc

    prefixes = sorted({spec.prefix for spec in KERNELS.values()})

    def build() -> tuple[ast.Module, list[str]]:
        tree = ast.Module(body=[], type_ignores=[])
        for path in SOURCES:
            tree.body += ast.parse(path.read_text(), str(path)).body
        shared_path, names = SHARED
        tree.body += [node for node in ast.parse(shared_path.read_text(), str(shared_path)).body
                      if isinstance(node, ast.Assign)
                      or (isinstance(node, ast.FunctionDef) and node.name in names)]
        defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        for prefix in prefixes:
            tree.body.append(_bind(defs["sim_template"], prefix, defs))
        return tree, [f"sim_{p}" for p in prefixes]

    with _LOCK:
        try:
            import llvmlite

            digest = hashlib.sha256()
            for part in (*(p.read_bytes() for p in (*SOURCES, SHARED[0])),
                         Path(kernelc.__file__).read_bytes(),
                         llvmlite.__version__.encode(), " ".join(prefixes).encode()):
                digest.update(part)
            text, sigs = kernelc.cached_translation(digest.hexdigest()[:24], str(SOURCE), build)
            return kernelc.native(text, sigs, str(SOURCE))
        except Exception:  # noqa: BLE001 (no native code: the Python loop runs instead)
            return None


@dataclass(slots=True)
class KernelRun:
    """What a kernel run gives: start, worker by task; the decisions in order (task, score,
    parts as an (n, len(components)) array, queue length and the winner's tenant backlog
    before the pop)."""

    start_s: npt.NDArray[np.float64]
    worker: npt.NDArray[np.int64]
    task: npt.NDArray[np.int64]
    score: npt.NDArray[np.float64]
    parts: npt.NDArray[np.float64]
    queue_len: npt.NDArray[np.int64]
    tenant_backlog: npt.NDArray[np.int64]
    predicted: tuple[npt.NDArray[np.float64], ...] = ()
    """``predicted_s``, ``predicted_p50_s``, ``predicted_p90_s`` as the run ended: with
    ``online`` state, the predictions it made at each arrival."""


def available(name: str) -> bool:
    """Whether policy ``name`` has a kernel that can run in this process."""
    spec = KERNELS.get(name)
    return spec is not None and compiled() is not None


def run(
    name: str,
    params: Any,
    n_parts: int,
    workers: int,
    submit: npt.NDArray[np.float64],
    duration: npt.NDArray[np.float64],
    predicted: npt.NDArray[np.float64],
    tenant: npt.NDArray[np.int64],
    weight: npt.NDArray[np.float64],
    predicted_p50: npt.NDArray[np.float64] | None = None,
    predicted_p90: npt.NDArray[np.float64] | None = None,
    online: tuple[npt.NDArray[np.int64], npt.NDArray[np.float64],
                  npt.NDArray[np.float64]] | None = None,
) -> KernelRun:
    """Simulate the tasks (arrays by position; ``tenant`` codes ``0..len(weight)-1``;
    quantile predictions NaN where absent, all absent by default) under policy ``name``
    with ``params`` on ``workers`` workers. ``online``: the state of predictions made at
    each arrival (``desched.bench.online.OnlineLabels.kernel_state``; they overwrite the
    prediction arrays). Precondition: ``available(name)``. Raises what the policy object
    would have raised where ``math.fsum`` overflows (Boost's estimate)."""
    functions = compiled()
    assert functions is not None
    spec = KERNELS[name]
    n = submit.size
    nt = max(1, weight.size)
    submit = np.ascontiguousarray(submit, dtype=np.float64)
    duration = np.ascontiguousarray(duration, dtype=np.float64)
    predicted = np.ascontiguousarray(predicted, dtype=np.float64)
    p50 = np.ascontiguousarray(np.full(n, math.nan) if predicted_p50 is None else predicted_p50,
                               dtype=np.float64)
    p90 = np.ascontiguousarray(np.full(n, math.nan) if predicted_p90 is None else predicted_p90,
                               dtype=np.float64)
    tenant = np.ascontiguousarray(tenant, dtype=np.int64)
    weight = np.ascontiguousarray(weight if weight.size else np.ones(1), dtype=np.float64)
    arrival = np.argsort(submit, kind="stable").astype(np.int64)
    arrival_t = np.append(submit[arrival], math.inf)
    # codes 0..nt-1: below 65,536 of them a 16-bit key, which numpy's stable sort radix-sorts
    key = tenant[arrival].astype(np.uint16) if nt <= 1 << 16 else tenant[arrival]
    ttask = arrival[np.argsort(key, kind="stable")]
    tstart = np.zeros(nt + 1, dtype=np.int64)
    np.cumsum(np.bincount(tenant, minlength=nt), out=tstart[1:])
    prm = np.array([*spec.prm(params), 0.0], dtype=np.float64)
    start = np.full(n, math.nan)
    worker = np.full(n, -1, dtype=np.int64)
    d_task = np.zeros(n, dtype=np.int64)
    d_score = np.zeros(n, dtype=np.float64)
    d_parts = np.zeros(max(1, n * n_parts), dtype=np.float64)
    d_qlen = np.zeros(n, dtype=np.int64)
    d_backlog = np.zeros(n, dtype=np.int64)
    tq = np.zeros(nt, dtype=np.int64)
    # A worker past the n-th never gets a task (the lowest idle worker polls, and at most n
    # run at once): the run is that of n workers, without arrays of the size asked for.
    workers = min(workers, max(n, 1))
    rend = np.zeros(workers, dtype=np.float64)
    rw = np.zeros(workers, dtype=np.int64)
    ri = np.zeros(workers, dtype=np.int64)
    idle = np.zeros(workers, dtype=np.int64)
    out = np.zeros(8, dtype=np.float64)
    sc = np.zeros(16, dtype=np.int64)
    sg = np.zeros(16, dtype=np.float64)
    sizes = spec.sizes(n, nt, params)
    if spec.by_workers is not None:
        sizes.update(spec.by_workers(n, nt, workers))
    state = [np.zeros(max(1, sizes.get(a, 1)), dtype=np.int64 if a[0] == "i" else np.float64)
             for a in STATE_ARRAYS]
    if online is None:
        online = (np.zeros(1, dtype=np.int64), np.zeros(1), np.zeros(1))
    else:
        predicted, p50, p90 = predicted.copy(), p50.copy(), p90.copy()
    arrays = [arrival, arrival_t, submit, duration, predicted, p50, p90, tenant, weight, ttask,
              tstart, prm, start, worker, d_task, d_score, d_parts, d_qlen, d_backlog, tq]
    tail = [rend, rw, ri, idle, out, sc, sg, *state, *online]
    decided = functions[f"sim_{spec.prefix}"](
        n, workers, nt, *(a.ctypes.data for a in arrays), n_parts,
        *(a.ctypes.data for a in tail))
    if sc[14] == 1:  # what the policy object's math.fsum raises (source_boost.fsum)
        raise OverflowError("intermediate overflow in fsum")
    if sc[14] == 2:
        raise ValueError("-inf + inf in fsum")
    if decided != n:
        raise RuntimeError(f"kernel {name}: {decided} decisions for {n} tasks")
    return KernelRun(start, worker, d_task, d_score, d_parts[: n * n_parts].reshape(n, n_parts),
                     d_qlen, d_backlog, (predicted, p50, p90))
