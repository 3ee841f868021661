"""``boost-predicted``: γ-Boost on predicted sizes (Yu & Scully, 2024, arXiv 2404.08826).

γ-Boost serves the queued task with the smallest *boosted arrival time* ``A_i - b_i``. For
a task whose size is known only through a label ``l`` (here: its predictions),
``b(l) = (1/γ) ln(M_l / (M_l - 1))`` with ``M_l = E[e^(γS) | L = l]``, and ``γ`` is the
first-come-first-served tail decay rate, the positive root of ``γ = λ (E[e^(γS)] - 1)``. A
task is overtaken only by tasks that arrive within its boost of it, so overtaking is bounded;
a task the labels say may be large gets a small boost.

The estimator (what a live system knows, time only from the caller):

- *Label distribution.* A task's size given its predictions is a shifted exponential
  ``c + Exp(mean θ)`` fitted to its quantile predictions: with ``p50 = predicted_p50_s``
  (``predicted_s`` where absent) and ``p90 = predicted_p90_s`` finite and above ``p50``,
  ``θ = (p90 - p50) / ln 5`` and ``c = p50 - θ ln 2`` (median and 90th percentile matched);
  where that makes ``c < 0``, ``c = 0`` and ``θ = p90 / ln 10`` (the p90 kept: it bounds
  how far the task can have been under-estimated). Without a p90 the label is
  ``Exp(mean predicted_s)`` (``c = 0, θ = predicted_s``); a crossed p90 (``<= p50``)
  makes the label the point ``p50`` (``θ = 0``). ``M_l(γ) = e^(γc) / (1 - γθ)`` for
  ``γθ < 1`` and ``γc <= 700``, infinite (boost 0) otherwise.
- *Arrival rate and size distribution.* The last ``window`` dispatched tasks (a pop or a
  ``take``): ``λ = (n - 1) / (max submit_s - min submit_s) / workers`` over their ``n``
  labels and ``E[e^(γS)]`` the mean of their ``M_l(γ)`` (``desched.structures.exp2.expd``
  per label, the same bits on every CPU, the sum by ``math.fsum``, so that both twins and
  the kernel get the same bits). ``workers`` is the
  parameter, or where it is 0 the most tasks seen dispatched and not yet completed at once.
- *γ.* Re-solved after the 2nd, 4th, 8th, ... dispatch below ``window`` and after every
  ``window``-th one. With ``ρ = λ × mean(c + θ)``, an unstable estimate (``ρ >= max_load``,
  where no positive root exists or it is meaningless) is solved with ``λ`` scaled down to
  ``ρ = max_load``: an overloaded queue ranks as a queue at ``max_load``, far from
  first-come (the documented fallback). The root is bracketed below ``h = min 1/θ`` (or,
  when every label is a point, the first ``h = 2^j / mean(c + θ)`` with ``f(h) > 0``,
  ``f(γ) = λ (mean M_l(γ) - 1) - γ``), then 40 geometric bisections of
  ``[h 2^-40, h]`` (``mid = sqrt(lo × hi)``; ``f(mid) > 0`` moves ``hi``) give
  ``γ = sqrt(lo × hi)``. Until the first estimate every boost is 0 (first-come).
- *Boost and guard.* A task's boost is fixed at its push with the γ of that moment
  (``b = scale × (-log1p(-1/M) / γ)``, infinite where ``M <= 1``; ``scale = 1`` is
  γ-Boost, larger ranks closer to shortest-first); so is its sympathy due time
  ``A_i + sympathy × mean(c + θ)`` (never, where ``sympathy = 0`` or there is no estimate).
  At a decision a queued task that is due (``due <= now``) goes first, the earliest
  ``(due, submit_s, position)``; otherwise the smallest ``(A_i - b_i, submit_s, position)``.

Several workers: λ is per worker, as the issue states (Boost's analysis is for one server;
the guard is the multi-server "sympathy" of the SPLIT line of work).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from desched.policies.base import MAX_WEIGHT, NaivePolicy, Policy, PolicyParams
from desched.structures.exp2 import expd, expd_array, fast_expd
from desched.structures.heaps import LazyWalk, without_task
from desched.trace import TaskTable

LN2, LN5, LN10 = math.log(2.0), math.log(5.0), math.log(10.0)
BISECTIONS = 40
MAX_EXPONENT = 700.0


class BoostEstimatorParams(PolicyParams):
    """Settings of the online γ estimate (module docstring), shared by the Boost policies.

    Default ``scale = 10``, chosen on the development data only: the four bundled logs that
    ``desched.bench.holdout`` does not hold back (LANL-CM5, SDSC-Par, Sandia-Ross,
    LLNL-Thunder; judge protocol, 70 % train, load 0.9) and the scenarios' seed 1, grid
    {1, 3, 5, 10, 20, 30}: the setting that keeps the three promises (p99 <= 1.05x today,
    Jain >= today - 0.02, every tenant <= 2x) on the most logs (2 of 4: LANL, SDSC; 1 and 3
    keep them on none and one) and harms neither ``steady`` nor ``flood`` (1, 3 and 5 lower
    ``flood``'s Jain slightly). No setting keeps them on Sandia-Ross, where first-come order
    itself leaves one tenant 2.7x worse than today's scorer, nor on LLNL-Thunder (Jain).
    """

    window: int = Field(256, ge=2, le=65536, description="dispatched tasks whose labels and "
                        "submit times estimate λ and E[e^(γS)]; γ is re-solved every window")
    workers: int = Field(0, ge=0, description="workers sharing the arrivals (λ per worker); "
                         "0: the most tasks seen running at once")
    max_load: float = Field(0.98, gt=0.0, le=0.999, description="an estimated per-worker load "
                            "at or above this is solved as this load (overload fallback)")
    scale: float = Field(10.0, gt=0.0, le=1e6, description="every boost multiplied by this: "
                         "1 is γ-Boost; larger ranks closer to shortest-first, smaller closer "
                         "to first-come")

    frontier_grid: ClassVar[tuple[Mapping[str, float], ...]] = tuple(
        {"scale": x} for x in (1.0, 4.0, 16.0))


class BoostParams(BoostEstimatorParams):
    """Estimator and guard settings of ``boost-predicted`` (module docstring)."""

    sympathy: float = Field(0.0, ge=0.0, le=MAX_WEIGHT, description="a task waiting longer than this many "
                            "mean predicted sizes goes first, oldest first (0: no guard)")
    """Off by default: on the development logs a guard at 5-20 mean sizes removes most of
    the gain (LANL-CM5 0.23 -> 0.00-0.01) and does not cure Sandia-Ross's worst tenant."""

    frontier_grid: ClassVar[tuple[Mapping[str, float], ...]] = (
        *({"scale": x} for x in (0.25, 1.0, 4.0, 16.0, 64.0)), {"scale": 1.0, "sympathy": 10.0})


# -- the fast estimator ---------------------------------------------------------------------


def shifted_exponential(p: float, p50: float, p90: float) -> tuple[float, float]:
    """``(c, θ)`` of a task's label (module docstring)."""
    median = p50 if p50 > 0 and math.isfinite(p50) else p
    if not math.isfinite(p90):
        return 0.0, p
    if p90 <= median:
        return median, 0.0
    theta = (p90 - median) / LN5
    c = median - theta * LN2
    if c < 0:
        return 0.0, p90 / LN10
    return c, theta


def mgf(c: float, theta: float, g: float) -> float:
    """``E[e^(gS)]`` of the label ``(c, θ)``: infinite past its pole or the float range."""
    gt = g * theta
    if gt >= 1.0 or g * c > MAX_EXPONENT:
        return math.inf
    return fast_expd(g * c) / (1.0 - gt)


def positive_root(excess: Callable[[float], float], hi: float, grow: bool = False) -> float:
    """The root of ``excess`` below ``hi`` (module docstring): ``hi`` doubled first until
    ``excess(hi) > 0`` where ``grow`` (at most 2,000 times), then ``BISECTIONS`` geometric
    bisections of ``[hi 2^-BISECTIONS, hi]``; returns the last interval's geometric mean."""
    if grow:
        for _ in range(2000):
            if excess(hi) > 0:
                break
            hi *= 2.0
    lo = hi * 2.0 ** -BISECTIONS
    for _ in range(BISECTIONS):
        mid = math.sqrt(lo * hi)
        if excess(mid) > 0:
            hi = mid
        else:
            lo = mid
    return math.sqrt(lo * hi)


class BoostEstimator:
    """The online estimate of γ from dispatched tasks (module docstring). O(1) per dispatch
    and completion, plus O(window × 40) every ``window`` dispatches (and at 2, 4, 8, ...)."""

    def __init__(self, tasks: TaskTable, params: BoostEstimatorParams) -> None:
        self.tasks = tasks
        self.params = params
        self.labels: deque[tuple[float, float, float]] = deque(maxlen=params.window)
        self.dispatches = 0
        self.running: set[int] = set()
        self.workers_seen = 0
        self.gamma: float | None = None
        self.mean_size = math.nan

    def label(self, i: int) -> tuple[float, float]:
        t = self.tasks
        return shifted_exponential(t.predicted_s[i], t.predicted_p50_s[i], t.predicted_p90_s[i])

    def boost(self, c: float, theta: float) -> float:
        """Boost of a label under the current γ (0 before the first estimate)."""
        return self.boost_under(c, theta, self.gamma)

    def boost_under(self, c: float, theta: float, g: float | None) -> float:
        """Boost of a label under ``g`` (0 where ``g`` is None: no estimate)."""
        if g is None:
            return 0.0
        m = mgf(c, theta, g)
        if m == math.inf:
            return 0.0
        if m <= 1.0:
            return math.inf
        return self.params.scale * (-math.log1p(-1.0 / m) / g)

    def boosts_under(self, c: np.ndarray, theta: np.ndarray, g: float | None) -> np.ndarray:
        """``boost_under`` of each label ``(c[k], theta[k])``, bit for bit: the same IEEE
        operations element by element (``expd_array`` for ``fast_expd``), ``math.log1p``
        per element (numpy's ``log1p`` differs from the C library's in the last bit)."""
        if g is None:
            return np.zeros(len(c))
        gt, gc = g * theta, g * c
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            m = expd_array(gc) / (1.0 - gt)
            m[(gt >= 1.0) | (gc > MAX_EXPONENT)] = math.inf
            b = np.zeros(len(c))
            zero = m == math.inf
            pole = ~zero & (m <= 1.0)
            rest = ~zero & ~pole
            b[pole] = math.inf
            x = np.fromiter(map(math.log1p, (-1.0 / m[rest]).tolist()), dtype=np.float64,
                            count=int(rest.sum()))
            b[rest] = self.params.scale * (-x / g)
        return b

    def pushed(self, i: int) -> None:
        """A pushed task that was running (a lease that expired) runs no more."""
        self.running.discard(i)

    def completed(self, i: int) -> None:
        self.running.discard(i)

    def dispatched(self, i: int) -> None:
        self.record(i)
        if self.due(self.dispatches):
            self.refresh()

    def record(self, i: int) -> None:
        """Dispatched task ``i`` joins the running ones and the window of labels."""
        self.running.add(i)
        self.workers_seen = max(self.workers_seen, len(self.running))
        c, theta = self.label(i)
        self.labels.append((c, theta, self.tasks.submit_s[i]))
        self.dispatches += 1

    def due(self, count: int) -> bool:
        """Whether γ is re-solved at this ``count``: the 2nd, 4th, 8th, ... below ``window``,
        then every ``window``-th."""
        w = self.params.window
        return count % w == 0 or (count < w and count & (count - 1) == 0)

    def rate(self, mean_size: float) -> float | None:
        """λ per worker from the window's submit times, scaled down to ``max_load`` where
        ``λ × mean_size`` reaches it (module docstring); None while the window has fewer
        than two tasks or spans no time."""
        labels = self.labels
        n = len(labels)
        if n < 2:
            return None
        lo_s = min(x[2] for x in labels)
        span = max(x[2] for x in labels) - lo_s
        if span <= 0:
            return None
        workers = self.params.workers or max(self.workers_seen, 1)
        lam = (n - 1) / span / workers
        rho = lam * mean_size
        if rho >= self.params.max_load:
            lam *= self.params.max_load / rho
        return lam

    def refresh(self) -> None:
        labels = self.labels
        n = len(labels)
        mean_size = math.fsum(x[0] + x[1] for x in labels) / n
        lam = self.rate(mean_size) if mean_size > 0 else None
        if lam is None:
            return
        cs = np.array([x[0] for x in labels])
        thetas = np.array([x[1] for x in labels])

        def excess(g: float) -> float:
            gc, gt = cs * g, thetas * g
            with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
                m = expd_array(gc) / (1.0 - gt)
            m[(gt >= 1.0) | (gc > MAX_EXPONENT)] = np.inf
            return lam * (math.fsum(m.tolist()) / n - 1.0) - g

        top_theta = float(thetas.max())
        if top_theta > 0:
            self.gamma = positive_root(excess, 1.0 / top_theta)
        else:
            self.gamma = positive_root(excess, 1.0 / mean_size, grow=True)
        self.mean_size = mean_size

    def state(self) -> dict[str, Any]:
        names = self.tasks.task_id
        return {
            "gamma": self.gamma,
            "mean_size": None if math.isnan(self.mean_size) else self.mean_size,
            "dispatches": self.dispatches,
            "workers_seen": self.workers_seen,
            "running": sorted(names[i] for i in self.running),
            "labels": [list(x) for x in self.labels],
        }

    def restore(self, state: dict[str, Any]) -> None:
        """``state()`` back; a value out of its range (γ not positive, a negative count, a
        label that is not three finite numbers) raises ``ValueError`` before anything is
        changed."""
        gamma = state["gamma"]
        gamma = None if gamma is None else float(gamma)
        mean = state["mean_size"]
        mean = math.nan if mean is None else float(mean)
        dispatches, seen = int(state["dispatches"]), int(state["workers_seen"])
        labels = [(float(c), float(th), float(s)) for c, th, s in state["labels"]]
        if ((gamma is not None and not (math.isfinite(gamma) and gamma > 0))
                or not (math.isnan(mean) or (math.isfinite(mean) and mean >= 0))
                or dispatches < 0 or seen < 0
                or not all(math.isfinite(x) for label in labels for x in label)):
            raise ValueError("a saved γ estimate out of range")
        position = {tid: i for i, tid in enumerate(self.tasks.task_id)}
        self.gamma, self.mean_size = gamma, mean
        self.dispatches, self.workers_seen = dispatches, seen
        self.running = {position[t] for t in state["running"] if t in position}
        self.labels.clear()
        self.labels.extend(labels)


def keys_state(tasks: TaskTable, keys: dict[int, tuple[float, float, float]]) -> dict[str, Any]:
    """Each queued task's ``[boost, boosted arrival, due]`` by task id (JSON: inf as None)."""
    def j(x: float) -> float | None:
        return None if math.isinf(x) else x
    return {tasks.task_id[i]: [j(b), j(k), j(d)] for i, (b, k, d) in sorted(keys.items())}


def read_keys(tasks: TaskTable, queued: Collection[int], saved: dict[str, Any]
              ) -> dict[int, tuple[float, float, float]]:
    """``keys_state`` back, for the queued tasks it names (None read as the infinity it
    stood for: a boost or boosted arrival of -inf/+inf and a due time of +inf)."""
    out: dict[int, tuple[float, float, float]] = {}
    for i in queued:
        row = saved.get(tasks.task_id[i])
        if row is not None:
            b = math.inf if row[0] is None else float(row[0])
            k = -math.inf if row[1] is None else float(row[1])
            d = math.inf if row[2] is None else float(row[2])
            out[i] = (b, k, d)
    return out


class BoostPredicted(Policy):
    """γ-Boost on predicted sizes (module docstring; Yu & Scully, 2024, arXiv 2404.08826),
    with an optional sympathy guard.

    Rule: a queued task due under the guard (``due <= now``) goes first, earliest
    ``(due, submit_s, position)``; otherwise the smallest ``(submit_s - boost, submit_s,
    position)``. Boost and due time are fixed at push. State (not per tenant: ``clock``):
    the estimator (its window of labels, γ, the running tasks) and each queued task's
    keys, kept across a restart by ``state()``. Cost: O(log n) amortised per push, pop,
    ``take`` and ``remove`` (two heaps with lazy deletion, rebuilt when dead entries
    outnumber live ones twice over) plus the estimator's O(window × 40) every ``window``
    dispatches; ``pop_fitting`` walks both heaps lazily. Score logged: the winner's boosted
    arrival ``submit_s - boost``; part: its boost in seconds.
    """

    name = "boost-predicted"
    summary = ("γ-Boost: smallest boosted arrival submit - b(predicted size label), γ "
               "estimated online; optional oldest-first guard")
    Params = BoostParams
    components = ("boost_s",)
    reads = frozenset({"predicted_s", "predicted_p50_s", "predicted_p90_s"})
    tenant_state = frozenset({"clock"})
    params: BoostParams

    def __init__(self, tasks: TaskTable, params: PolicyParams | None = None) -> None:
        super().__init__(tasks, params)
        self.estimator = BoostEstimator(self.tasks, self.params)
        self.keys: dict[int, tuple[float, float, float]] = {}
        self.by_key: list[tuple[float, float, int]] = []
        self.by_due: list[tuple[float, float, int]] = []
        self.dead = 0
        self.stale: dict[int, int] = {}
        """Heap entries still held for each task that left the queue (lazy deletion): a
        task pushed again (a lease that expired) has them purged first, or its old keys
        would count as live beside its new ones."""

    def __len__(self) -> int:
        return len(self.keys)

    def _purge(self, i: int) -> None:
        """Drop the heap entries left by ``i``'s earlier time in the queue: O(n), on a
        handed-back task only."""
        self.dead -= self.stale.pop(i)
        self.by_key = without_task(self.by_key, i)
        self.by_due = without_task(self.by_due, i)

    def push(self, i: int, now: float) -> None:
        if i in self.stale:
            self._purge(i)
        est = self.estimator
        est.pushed(i)
        s = self.tasks.submit_s[i]
        b = self._boost(i)
        sympathy = self.params.sympathy
        d = math.inf if sympathy == 0.0 or est.gamma is None else s + sympathy * est.mean_size
        self.keys[i] = (b, s - b, d)
        heapq.heappush(self.by_key, (s - b, s, i))
        if d != math.inf:
            heapq.heappush(self.by_due, (d, s, i))

    def _boost(self, i: int) -> float:
        """Task ``i``'s boost at its push: under the estimator's γ of that moment."""
        est = self.estimator
        return est.boost(*est.label(i))

    def _clean(self) -> None:
        keys, stale = self.keys, self.stale
        for heap in (self.by_key, self.by_due):
            while heap and heap[0][2] not in keys:
                i = heapq.heappop(heap)[2]
                self.dead -= 1
                if stale[i] == 1:
                    del stale[i]
                else:
                    stale[i] -= 1

    def _winner(self, now: float) -> int:
        if self.by_due and self.by_due[0][0] <= now:
            return self.by_due[0][2]
        return self.by_key[0][2]

    def pop(self, now: float) -> int:
        i = self._winner(now)
        self.take(i, now)
        return i

    def _leave(self, i: int) -> None:
        _, _, d = self.keys.pop(i)
        entries = 2 if d != math.inf else 1
        self.dead += entries
        self.stale[i] = self.stale.get(i, 0) + entries
        if self.dead > 2 * len(self.keys) + 64:
            keys = self.keys
            self.by_key = [e for e in self.by_key if e[2] in keys]
            self.by_due = [e for e in self.by_due if e[2] in keys]
            heapq.heapify(self.by_key)
            heapq.heapify(self.by_due)
            self.dead = 0
            self.stale.clear()
        else:
            self._clean()

    def take(self, i: int, now: float) -> None:
        b, k, _ = self.keys[i]
        self.score, self.parts = k, (b,)
        self._leave(i)
        self.estimator.dispatched(i)

    def remove(self, i: int, now: float) -> None:
        self._leave(i)

    def complete(self, i: int, now: float, duration_s: float) -> None:
        self.estimator.completed(i)

    def pop_sequence(self, now: float, skip: Collection[int] = ()) -> Iterator[int]:
        """Successive pops at ``now`` by lazy walks of both heaps (keys are fixed at push,
        so the estimator's moves during the pops change no queued task's place)."""
        tenant = self.tasks.tenant
        keys = self.keys
        gone: set[int] = set()
        walks = [LazyWalk(self.by_due, keys), LazyWalk(self.by_key, keys)]
        while len(gone) < len(keys):
            due = walks[0].peek(gone)
            if due is not None and due[0] <= now:
                i = due[2]
            else:
                top = walks[1].peek(gone)
                assert top is not None
                i = top[2]
            gone.add(i)
            if not skip or tenant[i] not in skip:
                yield i

    def pop_fitting(self, now, fits, limit=None):  # type: ignore[no-untyped-def]
        """The lazy walk of ``pop_sequence`` and a ``take`` of the winner."""
        return self.pop_fitting_by_walk(now, fits, limit)

    def state(self) -> dict[str, Any] | None:
        return {"estimator": self.estimator.state(), "keys": keys_state(self.tasks, self.keys)}

    def restore(self, state: dict[str, Any]) -> None:
        self.estimator.restore(state["estimator"])
        self.keys.update(read_keys(self.tasks, list(self.keys), state["keys"]))
        s = self.tasks.submit_s
        self.by_key = [(k, s[i], i) for i, (_, k, _) in self.keys.items()]
        self.by_due = [(d, s[i], i) for i, (_, _, d) in self.keys.items() if d != math.inf]
        heapq.heapify(self.by_key)
        heapq.heapify(self.by_due)
        self.dead = 0
        self.stale.clear()


# -- the naive twin: written from the module docstring again, sharing no code above ---------


def naive_label(tasks: TaskTable, i: int) -> tuple[float, float]:
    """``(c, θ)`` of task ``i``: the shifted exponential through its p50 and p90."""
    p = tasks.predicted_s[i]
    p50 = tasks.predicted_p50_s[i]
    p90 = tasks.predicted_p90_s[i]
    med = p
    if math.isfinite(p50) and p50 > 0:
        med = p50
    if math.isnan(p90) or math.isinf(p90):
        return (0.0, p)
    if not p90 > med:
        return (med, 0.0)
    scale = (p90 - med) / math.log(5.0)
    shift = med - scale * math.log(2.0)
    return (shift, scale) if shift >= 0 else (0.0, p90 / math.log(10.0))


def naive_moment(label: tuple[float, float], g: float) -> float:
    c, theta = label
    if not g * theta < 1.0:
        return math.inf
    if g * c > 700.0:
        return math.inf
    return expd(g * c) / (1.0 - g * theta)


def naive_gamma(history: list[tuple[float, float, float]], workers: int, max_load: float
                ) -> tuple[float, float] | None:
    """``(γ, mean size)`` from the labels and submit times in ``history``, or None."""
    n = len(history)
    submits = sorted(h[2] for h in history)
    if n < 2 or submits[-1] - submits[0] <= 0:
        return None
    mean = math.fsum(h[0] + h[1] for h in history) / n
    if mean <= 0:
        return None
    rate = (n - 1) / (submits[-1] - submits[0]) / workers
    if rate * mean >= max_load:
        rate = rate * (max_load / (rate * mean))

    shift = np.array([h[0] for h in history])
    scale = np.array([h[1] for h in history])

    def f(g: float) -> float:
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            moments = expd_array(g * shift) / (1.0 - g * scale)
        moments[~(g * scale < 1.0) | (g * shift > 700.0)] = np.inf
        return rate * (math.fsum(moments.tolist()) / n - 1.0) - g

    scales = [h[1] for h in history if h[1] > 0]
    if scales:
        return naive_root(f, 1.0 / max(scales), widen=False), mean
    return naive_root(f, 1.0 / mean, widen=True), mean


def naive_root(f: Callable[[float], float], top: float, widen: bool) -> float:
    """The naive twins' root of ``f`` below ``top`` (``top`` doubled first while ``f`` is not
    positive there, where ``widen``), by 40 geometric bisections."""
    tries = 0
    while widen and not f(top) > 0 and tries < 2000:
        top = top * 2.0
        tries += 1
    bottom = top * 2.0 ** -40
    for _ in range(40):
        mid = math.sqrt(bottom * top)
        if f(mid) > 0:
            top = mid
        else:
            bottom = mid
    return math.sqrt(bottom * top)


class NaiveBoostHistory:
    """The naive twins' estimator: every dispatched task's label in a plain list, γ
    re-solved from its last ``window`` entries when due, the running tasks in a list."""

    def __init__(self, tasks: TaskTable, params: BoostEstimatorParams) -> None:
        self.tasks = tasks
        self.params = params
        self.history: list[tuple[float, float, float]] = []
        self.busy: list[int] = []
        self.peak = 0
        self.g: float | None = None
        self.size = math.nan

    def label_of(self, i: int) -> tuple[float, float]:
        return naive_label(self.tasks, i)

    def boost_of(self, i: int) -> float:
        return self.boost_with(i, self.g)

    def boost_with(self, i: int, g: float | None) -> float:
        if g is None:
            return 0.0
        m = naive_moment(self.label_of(i), g)
        if m == math.inf:
            return 0.0
        if m <= 1.0:
            return math.inf
        return self.params.scale * (-math.log1p(-1.0 / m) / g)

    def pushed(self, i: int) -> None:
        if i in self.busy:
            self.busy.remove(i)

    def completed(self, i: int) -> None:
        if i in self.busy:
            self.busy.remove(i)

    def dispatched(self, i: int) -> None:
        self.busy.append(i)
        self.peak = max(self.peak, len(self.busy))
        c, theta = self.label_of(i)
        self.history.append((c, theta, self.tasks.submit_s[i]))
        n, w = len(self.history), self.params.window
        if n % w == 0 or (n < w and n in {2 ** j for j in range(1, 17)}):
            solved = naive_gamma(self.history[-w:], self.params.workers or max(self.peak, 1),
                                 self.params.max_load)
            if solved is not None:
                self.g, self.size = solved

    def state(self) -> dict[str, Any]:
        ids = self.tasks.task_id
        return {
            "gamma": self.g,
            "mean_size": None if math.isnan(self.size) else self.size,
            "dispatches": len(self.history),
            "workers_seen": self.peak,
            "running": sorted(ids[i] for i in self.busy),
            "labels": [list(h) for h in self.history[-self.params.window:]],
        }

    def restore(self, est: dict[str, Any]) -> None:
        self.g = None if est["gamma"] is None else float(est["gamma"])
        self.size = math.nan if est["mean_size"] is None else float(est["mean_size"])
        self.peak = int(est["workers_seen"])
        where = {t: i for i, t in enumerate(self.tasks.task_id)}
        self.busy = [where[t] for t in est["running"] if t in where]
        kept = [(float(a), float(b), float(c)) for a, b, c in est["labels"]]
        self.history = [(0.0, 0.0, 0.0)] * (int(est["dispatches"]) - len(kept)) + kept


def naive_inf(x: float) -> float | None:
    return None if math.isinf(x) else x


class BoostPredictedNaive(NaivePolicy):
    """Reference: the estimator of ``NaiveBoostHistory``; a decision scans the queue for the
    due task with the earliest due time, else the smallest boosted arrival."""

    name = "boost-predicted"
    summary = BoostPredicted.summary
    Params = BoostParams
    components = ("boost_s",)
    reads = frozenset({"predicted_s", "predicted_p50_s", "predicted_p90_s"})
    tenant_state = frozenset({"clock"})
    params: BoostParams

    def __init__(self, tasks: TaskTable, params: PolicyParams | None = None) -> None:
        super().__init__(tasks, params)
        self.est = NaiveBoostHistory(self.tasks, self.params)
        self.boost: dict[int, float] = {}
        self.due: dict[int, float] = {}

    def push(self, i: int, now: float) -> None:
        self.est.pushed(i)
        self.boost[i] = self.est.boost_of(i)
        s = self.tasks.submit_s[i]
        on = self.params.sympathy != 0.0 and self.est.g is not None
        self.due[i] = s + self.params.sympathy * self.est.size if on else math.inf
        super().push(i, now)

    def key(self, i: int, now: float) -> tuple[float, ...]:
        s = self.tasks.submit_s[i]
        if self.due[i] <= now:
            return (1.0, -self.due[i], -s, -i)
        return (0.0, -(s - self.boost[i]), -s, -i)

    def explain(self, i: int, now: float) -> tuple[float, tuple[float, ...]]:
        return self.tasks.submit_s[i] - self.boost[i], (self.boost[i],)

    def taken(self, i: int, now: float) -> None:
        del self.boost[i], self.due[i]
        self.est.dispatched(i)

    def removed(self, i: int, now: float) -> None:
        del self.boost[i], self.due[i]

    def complete(self, i: int, now: float, duration_s: float) -> None:
        self.est.completed(i)

    def state(self) -> dict[str, Any] | None:
        ids = self.tasks.task_id
        s = self.tasks.submit_s
        return {
            "estimator": self.est.state(),
            "keys": {ids[i]: [naive_inf(self.boost[i]), naive_inf(s[i] - self.boost[i]),
                              naive_inf(self.due[i])] for i in sorted(self.queue)},
        }

    def restore(self, state: dict[str, Any]) -> None:
        self.est.restore(state["estimator"])
        for i in self.queue:
            row = state["keys"].get(self.tasks.task_id[i])
            if row is not None:
                self.boost[i] = math.inf if row[0] is None else float(row[0])
                self.due[i] = math.inf if row[2] is None else float(row[2])


BoostPredicted.naive = BoostPredictedNaive
