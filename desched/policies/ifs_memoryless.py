"""``ifs-memoryless``: today's scorer, ``w_backlog * norm_backlog + w_wait * norm_wait``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from desched.policies.base import MAX_WEIGHT, NaivePolicy, Policy, PolicyParams
from desched.policies.learnable import LearnableParams, SearchSpace, Simplex
from desched.structures.ifs_kernel import MEMORYLESS, Call, KernelCacheState, Picker, kernel
from desched.structures.tenant_queues import TenantQueues, pick_slot
from desched.today import TODAY_SCORER
from desched.trace import TaskTable


class IfsParams(LearnableParams):
    """Weights of the IFS scorer, given one by one or read from a weights card (``weights``).

    Learnable: the two weights, searched on the simplex ``w_backlog = theta, w_wait = 1 -
    theta`` (the score is invariant to scaling both; ``theta = 0.1`` is today's).
    """

    search: ClassVar[SearchSpace] = SearchSpace((
        Simplex("theta", ("w_backlog", "w_wait"), grid=(0.0, 0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 1.0)),
    ))

    w_backlog: float = Field(0.1, ge=0, le=MAX_WEIGHT, description="weight of the normalised tenant backlog")
    w_wait: float = Field(0.9, ge=0, le=MAX_WEIGHT, description="weight of the normalised wait")


def norm(x: float, x_max: float) -> float:
    """``x / x_max``, and 0 where the maximum is 0 (DESIGN.md)."""
    return x / x_max if x_max > 0 else 0.0


class IfsMemorylessNaive(NaivePolicy):
    """Reference: scores every queued task from scratch, exactly as DESIGN.md reads it."""

    name = TODAY_SCORER
    summary = "0.1 * normalised tenant backlog + 0.9 * normalised wait, recomputed every poll"
    Params = IfsParams
    components = ("norm_backlog", "norm_wait")
    params: IfsParams

    def prepare(self, now: float) -> None:
        self.backlog = self.backlog_of()
        self.max_backlog = float(max(self.backlog.values()))
        self.max_wait = max(now - self.tasks.submit_s[i] for i in self.queue)

    @staticmethod
    def share(x: float, x_max: float) -> float:
        """``x / x_max``, 0 where the maximum is 0 (the twin's own, not ``norm``)."""
        if x_max <= 0:
            return 0.0
        return x / x_max

    def parts_of(self, i: int, now: float) -> tuple[float, float]:
        nb = self.share(self.backlog[self.tasks.tenant[i]], self.max_backlog)
        nw = self.share(now - self.tasks.submit_s[i], self.max_wait)
        return nb, nw

    def key(self, i: int, now: float) -> tuple[float, ...]:
        nb, nw = self.parts_of(i, now)
        return (self.params.w_backlog * nb + self.params.w_wait * nw, -self.tasks.submit_s[i], -i)

    def explain(self, i: int, now: float) -> tuple[float, tuple[float, ...]]:
        nb, nw = self.parts_of(i, now)
        return self.params.w_backlog * nb + self.params.w_wait * nw, (nb, nw)


class IfsMemoryless(KernelCacheState, Policy):
    """The baseline scorer of the Document Enrichment Service (DESIGN.md).

    Rule: ``score = w_backlog * backlog_k / max backlog + w_wait * wait_i / max wait``, maxima
    over all queued tasks, highest wins, ties to the earlier ``submit_s`` then position.
    State: none that outlives a decision. Cost: within a tenant every task shares the backlog
    term and the oldest task has the largest wait term, so only each backlogged tenant's
    oldest task can win: a decision is one O(K) scan over the K backlogged tenants (one
    call of the compiled scan of ``desched.structures.ifs_kernel``, ~1-2 µs of call overhead
    plus a few ns per tenant; numpy where llvmlite is missing) plus O(log m) for the heap,
    never a scan of the queued tasks. ``pop_fitting`` pops and
    pushes back: one pop when the first candidate fits; for s refused, s + 1 pops, s + 1
    pushes and a ``take`` of the winner (which logs its score among all queued tasks).
    """

    name = TODAY_SCORER
    summary = IfsMemorylessNaive.summary
    Params = IfsParams
    components = IfsMemorylessNaive.components
    naive = IfsMemorylessNaive
    requeue_is_exact = True
    submit_ordered_queues = True
    params: IfsParams

    def __init__(self, tasks: TaskTable, params: PolicyParams | None = None) -> None:
        super().__init__(tasks, params)
        s = tasks.submit_s
        self.queues = TenantQueues(tasks, lambda i: (s[i],))

    def __len__(self) -> int:
        return len(self.queues)

    def push(self, i: int, now: float) -> None:
        self.queues.push(i)

    def ifs_terms(self, now: float) -> tuple[np.ndarray, np.ndarray]:
        """``norm_backlog`` and ``norm_wait`` of each backlogged tenant's oldest task, by slot."""
        q = self.queues
        backlog = q.backlog[: q.n]
        head_submit = q.head_submit[: q.n]
        # the elements at argmax/argmin are the maxima exactly; cheaper than max()/min()
        norm_backlog = backlog / backlog[backlog.argmax()]
        max_wait = now - head_submit[head_submit.argmin()]
        if max_wait > 0:
            norm_wait = (now - head_submit) / max_wait
        else:
            norm_wait = np.zeros(q.n)
        return norm_backlog, norm_wait

    def terms(self, now: float) -> tuple[np.ndarray, ...]:
        """The parts (``components``) of each backlogged tenant's oldest task, by slot."""
        return self.ifs_terms(now)

    def combine(self, parts: Sequence[Any]) -> Any:
        """The score from the parts (arrays by slot, or one task's floats)."""
        return self.params.w_backlog * parts[0] + self.params.w_wait * parts[1]

    def pop(self, now: float) -> int:
        if self.use_kernel and self._kernel is not None:
            return self._pop_compiled(now)
        return self._pop_numpy(now)

    # the compiled scan (desched.structures.ifs_kernel): same floats, one call per decision
    use_kernel: ClassVar[bool] = True
    kernel_mode: ClassVar[int] = MEMORYLESS

    @property
    def _kernel(self) -> Picker | None:
        return kernel()

    def _caller(self, x: np.ndarray | None = None) -> Call:
        """The kernel call over this policy's queue arrays (``x``: the X array, else the
        head predictions as a placeholder); rebuilt when the arrays were replaced (they
        grow together) or on a copy (``KernelCacheState``)."""
        q = self.queues
        xs = q.head_pred if x is None else x
        seen = self.__dict__.get("_call_of")
        if seen is None or seen[0] is not q.backlog or seen[1] is not xs:
            self._call_of = (q.backlog, xs)
            self._call = Call(self._kernel[self.kernel_mode],  # type: ignore[index]
                              q.backlog.ctypes.data, q.head_submit.ctypes.data,
                              q.head_pos.ctypes.data, xs.ctypes.data)
        return self._call

    def _pick(self, now: float, x: np.ndarray | None = None) -> int:
        """The winning slot by the kernel; score and parts land in ``self._call.out``."""
        return self._caller(x)(self.queues.n, now, self.weights())

    def weights(self) -> tuple[float, float, float, float]:
        """The kernel's constants (c, w1, w2, w3), the weights read at every decision (a
        learnable policy's may change)."""
        w = self.params
        return 0.0, w.w_backlog, w.w_wait, 0.0

    def _pop_compiled(self, now: float) -> int:
        q = self.queues
        slot = self._pick(now)
        out = self._call.out
        self.score = out[0]
        self.parts = (out[1], out[2])
        return q.pop_tenant(int(q.tenant[slot]))

    def _pop_numpy(self, now: float) -> int:
        q = self.queues
        parts = self.terms(now)
        score = self.combine(parts)
        slot = pick_slot(score, q.head_submit[: q.n], q.head_pos[: q.n])
        self.score = float(score[slot])
        self.parts = tuple([float(x[slot]) for x in parts])
        return q.pop_tenant(int(q.tenant[slot]))

    def take(self, i: int, now: float) -> None:
        """Score ``i`` as a pop that chose it would, then remove it: O(K) vectorised work as
        a pop, plus O(m) when ``i`` is not its tenant's oldest task (only the wait term
        differs from the oldest's)."""
        q = self.queues
        k = self.tasks.tenant[i]
        slot = q.slot_of[k]
        parts = [float(x[slot]) for x in self.terms(now)]
        if i != q.head(k):
            max_wait = now - float(q.head_submit[: q.n].min())
            parts[1] = norm(now - self.tasks.submit_s[i], max_wait)
        self.score = float(self.combine(parts))
        self.parts = tuple(parts)
        q.remove(i)

    def remove(self, i: int, now: float) -> None:
        """O(log m), or O(m) when ``i`` is not its tenant's oldest task."""
        self.queues.remove(i)
