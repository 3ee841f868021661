"""``ifs-counter``: the IFS scorer plus one decayed counter of service per tenant."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from desched.policies.base import MAX_WEIGHT, PolicyParams
from desched.policies.ifs_memoryless import IfsMemoryless, IfsMemorylessNaive, IfsParams
from desched.policies.learnable import Range, SearchSpace, Simplex
from desched.structures.exp2 import exp2d, exp2d_array, fast_exp2d
from desched.structures.ifs_kernel import COUNTER
from desched.trace import TaskTable


class IfsCounterParams(IfsParams):
    """Learnable: the IFS weights on their simplex, ``w_service`` in [0, 4] and
    ``half_life_s`` log-uniform in [60, 14400] s; a search first tries today's scorer (no
    service term), then these defaults. ``half_life_s`` is 40 mean task durations of the
    DES scenarios (``duration_scaled``)."""

    search: ClassVar[SearchSpace] = SearchSpace(
        (
            Simplex("theta", ("w_backlog", "w_wait"), grid=(0.0, 0.1, 0.35, 0.7)),
            Range("w_service", 0.0, 4.0, grid=(0.0, 0.25, 0.5, 1.0)),
            Range("half_life_s", 60.0, 14_400.0, grid=(900.0,), log=True),
        ),
        starts=(MappingProxyType({"w_service": 0.0}),),
    )
    duration_scaled: ClassVar[Mapping[str, float]] = MappingProxyType({"half_life_s": 40.0})

    w_service: float = Field(
        2.0,
        ge=0,
        le=MAX_WEIGHT,
        description="weight of the normalised decayed service, subtracted; above "
        "w_backlog + w_wait it outweighs the IFS terms, so a tenant that received much less "
        "service than the most-served backlogged one goes first (flood scenario: 1.0 "
        "closes about half the service lag of ifs-memoryless, 2.0 all of it)",
    )
    half_life_s: float = Field(
        900.0, gt=0, description="seconds after which a tenant's past service counts half"
    )


def decayed(service_s: float, at_s: float, now: float, half_life_s: float) -> float:
    """``service_s`` recorded at ``at_s``, decayed to ``now``: ``service_s * 2**(-(now-at_s)/h)``.

    Uses ``desched.structures.exp2``, whose array form the vectorised fast path uses and
    whose bits are the same on every CPU (numpy's ``exp2`` differs with AVX-512, Python's
    ``2.0 ** x`` from both).
    """
    return service_s * fast_exp2d(-(now - at_s) / half_life_s)


class IfsCounterNaive(IfsMemorylessNaive):
    """Reference: scores every queued task from scratch, decaying every backlogged tenant's
    counter to ``now``."""

    name = "ifs-counter"
    summary = (
        "ifs-memoryless minus w_service * normalised service received, decayed with a "
        "half-life (one counter per tenant, written on completion)"
    )
    # ifs_memoryless leaves both attributes unannotated, so mypy pins their narrow types
    Params = IfsCounterParams  # type: ignore[assignment]
    components = ("norm_backlog", "norm_wait", "norm_service")  # type: ignore[assignment]
    tenant_state = frozenset({"service"})
    params: IfsCounterParams

    def __init__(self, tasks: TaskTable, params: PolicyParams | None = None) -> None:
        super().__init__(tasks, params)
        self.service_s: dict[int, float] = {}
        self.service_at_s: dict[int, float] = {}

    def decayed_service_s(self, k: int, now: float) -> float:
        """Tenant ``k``'s counter decayed to ``now``: ``S_k * 2**(-(now - t_k) / h)`` by
        ``exp2d`` (its own expression, not ``decayed``)."""
        halvings = -(now - self.service_at_s.get(k, 0.0)) / self.params.half_life_s
        return self.service_s.get(k, 0.0) * exp2d(halvings)

    def complete(self, i: int, now: float, duration_s: float) -> None:
        k = self.tasks.tenant[i]
        w = self.tasks.tenant_weight.get(k)
        charged = duration_s if w is None else duration_s / w
        self.service_s[k] = self.decayed_service_s(k, now) + charged
        self.service_at_s[k] = now

    def state(self) -> dict[str, Any] | None:
        """``{"service": {tenant: [S_k, t_k]}}`` for every tenant with a record."""
        names = self.tasks.tenant_names
        return {
            "service": {
                names[k]: [s, self.service_at_s[k]]
                for k, s in sorted(self.service_s.items())
                if (s, self.service_at_s[k]) != (0.0, 0.0)
            }
        }

    def restore(self, state: dict[str, Any]) -> None:
        for name, (s, at) in state["service"].items():
            k = self.tasks.tenant_code(str(name))
            self.service_s[k], self.service_at_s[k] = float(s), float(at)

    def prepare(self, now: float) -> None:
        super().prepare(now)
        self.service = {k: self.decayed_service_s(k, now) for k in self.backlog}
        self.max_service = max(self.service.values())

    def counter_parts(self, i: int, now: float) -> tuple[float, float, float]:
        nb, nw = self.parts_of(i, now)
        return nb, nw, self.share(self.service[self.tasks.tenant[i]], self.max_service)

    def score_of(self, i: int, now: float) -> tuple[float, tuple[float, ...]]:
        nb, nw, ns = parts = self.counter_parts(i, now)
        p = self.params
        return p.w_backlog * nb + p.w_wait * nw - p.w_service * ns, parts

    def key(self, i: int, now: float) -> tuple[float, ...]:
        return (self.score_of(i, now)[0], -self.tasks.submit_s[i], -i)

    def explain(self, i: int, now: float) -> tuple[float, tuple[float, ...]]:
        return self.score_of(i, now)


class IfsCounter(IfsMemoryless):
    """The IFS scorer with one decayed per-tenant counter of service: research question 1.

    Rule: ``score = w_backlog * norm_backlog + w_wait * norm_wait - w_service * norm_service``,
    with ``norm_backlog`` and ``norm_wait`` exactly as ``ifs-memoryless``, and
    ``norm_service_k = S_k(now) / max_j S_j(now)`` over the backlogged tenants (0 where that
    maximum is 0), ``S_k(now) = S_k * 2**(-(now - t_k) / half_life_s)``. Highest wins, ties to
    the earlier ``submit_s`` then position. With ``w_service = 0`` it decides as
    ``ifs-memoryless``. State: per tenant ``S_k`` (seconds of service, decayed) and ``t_k``
    (when it was written), written only on a completion record, with the record's real
    ``duration_s`` divided by the tenant's weight (``TaskTable.charge``, 1 by default):
    ``S_k <- S_k(now) + duration_s / weight_k, t_k <- now``; the live service can keep
    them in the row it writes for that record. Cost: the service term is shared by a
    tenant's tasks, so only each tenant's oldest task can win, as in ``ifs-memoryless``:
    O(K) vectorised work over the K backlogged tenants per decision, O(1) per completion;
    ``pop_fitting`` and ``take`` as ``ifs-memoryless`` (``pop`` leaves the counters alone).
    Source: the Document Enrichment Service's scorer (DESIGN.md) with a decayed usage
    counter in the manner of the Slurm multifactor fair-share factor's half-life decay.
    """

    name = "ifs-counter"
    summary = IfsCounterNaive.summary
    Params = IfsCounterParams  # type: ignore[assignment]
    components = IfsCounterNaive.components  # type: ignore[assignment]
    tenant_state = IfsCounterNaive.tenant_state
    naive = IfsCounterNaive
    params: IfsCounterParams

    def __init__(self, tasks: TaskTable, params: PolicyParams | None = None) -> None:
        super().__init__(tasks, params)
        cap = max(16, len(tasks.tenant_names))
        self.service_s = np.zeros(cap, dtype=np.float64)
        self.service_at_s = np.zeros(cap, dtype=np.float64)
        self._service_buf = np.zeros(cap, dtype=np.float64)
        # each backlogged tenant's counter by slot, so that a decision reads slices, not
        # gathers by tenant code (kept in step by push, complete and restore)
        slots = len(self.queues.backlog)
        self.queues.extra["service_s"] = np.zeros(slots, dtype=np.float64)
        self.queues.extra["service_at_s"] = np.zeros(slots, dtype=np.float64)

    def _ensure(self, k: int) -> None:
        """Room for tenant code ``k`` (the live service adds tenants)."""
        cap = len(self.service_s)
        if k < cap:
            return
        grown = max(2 * cap, k + 1)
        self.service_s = np.concatenate([self.service_s, np.zeros(grown - cap)])
        self.service_at_s = np.concatenate([self.service_at_s, np.zeros(grown - cap)])

    def decayed_service_s(self, k: int, now: float) -> float:
        """Tenant ``k``'s counter decayed to ``now``."""
        if k >= len(self.service_s):
            return 0.0
        return decayed(
            float(self.service_s[k]), float(self.service_at_s[k]), now, self.params.half_life_s
        )

    def complete(self, i: int, now: float, duration_s: float) -> None:
        k = self.tasks.tenant[i]
        self._ensure(k)
        s = self.service_s[k] = self.decayed_service_s(k, now) + self.tasks.charge(k, duration_s)
        self.service_at_s[k] = now
        slot = self.queues.slot_of.get(k)
        if slot is not None:
            extra = self.queues.extra
            extra["service_s"][slot] = s
            extra["service_at_s"][slot] = now

    def push(self, i: int, now: float) -> None:
        k = self.tasks.tenant[i]
        self._ensure(k)
        q = self.queues
        slot = q.push(i)
        if len(q.heaps[k]) == 1:  # the tenant became backlogged: its counter to its slot
            q.extra["service_s"][slot] = self.service_s[k]
            q.extra["service_at_s"][slot] = self.service_at_s[k]

    def state(self) -> dict[str, Any] | None:
        """``{"service": {tenant: [S_k, t_k]}}`` for every tenant with a record."""
        names = self.tasks.tenant_names
        return {
            "service": {
                names[k]: [float(self.service_s[k]), float(self.service_at_s[k])]
                for k in range(min(len(self.service_s), len(names)))
                if (self.service_s[k], self.service_at_s[k]) != (0.0, 0.0)
            }
        }

    def restore(self, state: dict[str, Any]) -> None:
        for name, (s, at) in state["service"].items():
            k = self.tasks.tenant_code(str(name))
            self._ensure(k)
            self.service_s[k], self.service_at_s[k] = float(s), float(at)
        q = self.queues
        for k, slot in q.slot_of.items():
            q.extra["service_s"][slot] = self.service_s[k]
            q.extra["service_at_s"][slot] = self.service_at_s[k]

    kernel_mode = COUNTER

    def weights(self) -> tuple[float, float, float, float]:
        w = self.params
        return 0.0, w.w_backlog, w.w_wait, w.w_service

    def _pop_compiled(self, now: float) -> int:
        q = self.queues
        n = q.n
        if len(self._service_buf) < len(q.backlog):
            self._service_buf = np.zeros(len(q.backlog))
        buf = self._service_buf
        extra = q.extra
        # the decayed service of every backlogged tenant, as terms() computes it (by slot)
        np.multiply(
            extra["service_s"][:n],
            exp2d_array((extra["service_at_s"][:n] - now) / self.params.half_life_s),
            out=buf[:n],
        )
        slot = self._pick(now, buf)
        out = self._call.out
        self.score = out[0]
        self.parts = (out[1], out[2], out[3])
        return q.pop_tenant(int(q.tenant[slot]))

    def terms(self, now: float) -> tuple[np.ndarray, ...]:
        q = self.queues
        n = q.n
        norm_backlog, norm_wait = self.ifs_terms(now)
        tenant = q.tenant[:n]
        # (at - now) is -(now - at) bit for bit (IEEE subtraction is exactly antisymmetric):
        # one array operation fewer than the naive expression, the same exponent
        service = self.service_s[tenant] * exp2d_array(
            (self.service_at_s[tenant] - now) / self.params.half_life_s
        )
        max_service = service[service.argmax()]
        if max_service > 0:
            norm_service = service / max_service
        else:
            norm_service = np.zeros(n)
        return norm_backlog, norm_wait, norm_service

    def combine(self, parts: Sequence[Any]) -> Any:
        return super().combine(parts) - self.params.w_service * parts[2]
