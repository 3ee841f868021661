"""The event-driven simulator (DESIGN.md, Simulation semantics).

At each instant ``t``, in this order: (1) every completion at ``t`` frees its worker and its
completion record reaches the policy, in worker-id order; (2) every arrival at ``t`` joins the
queue, in trace order; (3) while a worker is idle and the queue is not empty, the idle worker
with the lowest id polls and starts the policy's winner at ``t``. A task runs for exactly its
``duration_s``. There is no randomness in the mechanism: a run is a pure function of the
trace, the policy and its parameters, and the worker count.

Two engines run it: this module's event loop over any ``Policy`` object (``"python"``, the
reference), and, for the policies with a compiled kernel (``desched.kernels``), one native
loop over arrays (``"kernel:<policy>"``) with bit-identical start times, workers, scores
and parts. ``simulate`` picks the kernel when one exists and no gate (caps, priorities) is
in play, unless told ``engine="python"``; ``SimResult.engine`` says which ran.
"""

from __future__ import annotations

import heapq
import math
import operator
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np
import numpy.typing as npt

from desched.controls import KernelInputs
from desched.errors import DeschedError
from desched.policies.base import Policy
from desched.trace import TaskTable

if TYPE_CHECKING:
    from desched.controls import Gate

ProgressFn = Callable[[int], None]


class ArrivalLabels(Protocol):
    """Predictions made during a run (``desched.bench.online.OnlineLabels``)."""

    def arrive(self, i: int, t: float) -> None: ...

    def complete(self, i: int, t: float) -> None: ...

    def kernel_written(self, predicted: tuple[npt.NDArray[np.float64], ...]) -> None: ...

PROGRESS_EVERY = 16384
Engine = Literal["auto", "kernel", "python"]
ENGINES: tuple[str, ...] = ("auto", "kernel", "python")


@dataclass(slots=True)
class Decisions:
    """One entry per decision, in decision order (columns of ``decisions.parquet``)."""

    t: array  # type: ignore[type-arg]
    worker: array  # type: ignore[type-arg]
    task: array  # type: ignore[type-arg]
    score: array  # type: ignore[type-arg]
    queue_len: array  # type: ignore[type-arg]
    tenant_backlog: array  # type: ignore[type-arg]
    parts: list[array]  # type: ignore[type-arg]


@dataclass(slots=True)
class SimResult:
    """Start, end and worker of every task (by position) and the decision log."""

    policy: str
    workers: int
    start_s: array  # type: ignore[type-arg]
    end_s: array  # type: ignore[type-arg]
    worker: array  # type: ignore[type-arg]
    decisions: Decisions
    wall_s: float = 0.0
    engine: str = "python"
    """``"python"`` (this module's loop) or ``"kernel:<policy>"`` (``desched.kernels``)."""
    predicted: tuple[npt.NDArray[np.float64], ...] = ()
    """A kernel run's prediction columns as it ended (``desched.kernels.KernelRun``)."""


def queue_counts(
    submit_s: list[float] | npt.NDArray[np.float64],
    tenant: list[int] | npt.NDArray[np.int64],
    task: array,  # type: ignore[type-arg]
    t: array,  # type: ignore[type-arg]
) -> tuple[array, array]:  # type: ignore[type-arg]
    """Queue length and the chosen tenant's backlog at each decision, before its pop.

    At decision ``j`` (time ``t_j``) every task submitted at or before ``t_j`` has arrived
    and the ``j`` earlier decisions have each removed one, so ``queue_len_j`` is
    ``#{submit <= t_j} - j``; per tenant, the same count over that tenant's tasks and its
    earlier decisions. Vectorised after the run so that the event loop does not keep
    per-tenant counts; ``tests/test_simulator.py`` checks it against a direct count.
    """
    task_a = np.frombuffer(task, dtype=np.int64) if len(task) else np.zeros(0, np.int64)
    t_a = np.frombuffer(t, dtype=np.float64) if len(t) else np.zeros(0)
    submit_a = np.asarray(submit_s, dtype=np.float64)
    tenant_a = np.asarray(tenant, dtype=np.int64)
    queue_len = np.searchsorted(np.sort(submit_a), t_a, side="right") - np.arange(task_a.size)
    backlog = np.zeros(task_a.size, dtype=np.int64)
    dec_tenant = tenant_a[task_a]
    by_tenant = np.argsort(dec_tenant, kind="stable")
    sorted_tenant = dec_tenant[by_tenant]
    bounds = np.flatnonzero(np.diff(sorted_tenant)) + 1
    task_order = np.argsort(tenant_a, kind="stable")
    tenant_sorted = tenant_a[task_order]
    decided_tenants = np.unique(sorted_tenant)
    task_bounds = np.searchsorted(tenant_sorted, decided_tenants)
    task_ends = np.searchsorted(tenant_sorted, decided_tenants, side="right")
    for group, lo, hi in zip(np.split(by_tenant, bounds), task_bounds, task_ends):
        submits = np.sort(submit_a[task_order[lo:hi]])
        backlog[group] = np.searchsorted(submits, t_a[group], side="right") - np.arange(group.size)
    return array("q", queue_len.astype(np.int64).tobytes()), array("q", backlog.tobytes())


def simulate(
    tasks: TaskTable,
    policy: Policy,
    workers: int,
    *,
    progress: ProgressFn | None = None,
    gate: Gate | None = None,
    engine: Engine = "auto",
    labels: ArrivalLabels | None = None,
) -> SimResult:
    """Run every task of ``tasks`` on ``workers`` workers under ``policy``.

    ``engine``: ``"auto"`` runs the policy's compiled kernel where it has one and ``gate``
    is None (the policy object is then left untouched), else the Python loop; ``"kernel"``
    insists on the kernel (an error where none can run); ``"python"`` runs the loop.

    Every task starts exactly once, at or after its submission, and runs without preemption.
    Cost: O(n log n) for the event handling plus the policy's own cost per decision.
    ``progress`` is called with the number of decisions so far every ``PROGRESS_EVERY``.
    ``gate`` (``desched.controls``) applies tenant caps and priority levels: an idle worker
    then gets the gate's choice, or nothing when every queued task's tenant is at its cap
    (it idles until the next completion or arrival).
    ``labels`` (``desched.bench.online.OnlineLabels``) writes each task's predictions into
    ``tasks`` when it arrives, before the policy sees it, from what had finished in this run;
    a kernel run makes them itself from ``labels.kernel_state()`` (the same rule in native
    code, ``desched.kernels.source_online``) and hands them to ``labels.kernel_written``.
    """
    if workers < 1:
        raise DeschedError(f"workers must be >= 1, got {workers}")
    if len(policy) != 0:
        raise DeschedError("the policy must start with an empty queue")
    submit_a, duration_a = _checked_times(tasks)
    name = kernel_for(policy, gate, engine)
    state = getattr(labels, "kernel_state", None)
    if labels is not None and state is None:
        if engine == "kernel":
            raise DeschedError("--engine kernel: these predictions made during the run need "
                               "the Python loop")
        name = None
    if name is not None:
        weight = np.ones(max(1, len(tasks.tenant_names)), dtype=np.float64)
        for k, w in tasks.tenant_weight.items():
            weight[k] = w
        result = simulate_arrays(name, policy.params, policy.components, workers, KernelInputs(
            submit_s=submit_a,
            duration_s=duration_a,
            predicted_s=np.asarray(tasks.predicted_s, dtype=np.float64),
            tenant=np.asarray(tasks.tenant, dtype=np.int64),
            weight=weight,
            predicted_p50_s=np.asarray(tasks.predicted_p50_s, dtype=np.float64),
            predicted_p90_s=np.asarray(tasks.predicted_p90_s, dtype=np.float64),
            online=None if state is None else state()))
        if labels is not None:
            labels.kernel_written(result.predicted)
        if progress is not None:
            progress(len(tasks))
        return result
    wall0 = time.perf_counter()
    n = len(tasks)
    submit = tasks.submit_s
    duration = tasks.duration_s
    tenant = tasks.tenant
    arrival_task = sorted(range(n), key=submit.__getitem__)  # stable: trace order in an instant
    arrival_t = [submit[i] for i in arrival_task]
    arrival_t.append(math.inf)
    start_s = array("d", [math.nan]) * n
    worker_of = array("i", [-1]) * n
    n_parts = len(policy.components)
    d_task: array = array("q")  # type: ignore[type-arg]
    d_score: array = array("d")  # type: ignore[type-arg]
    d_parts: list[array] = [array("d") for _ in range(n_parts)]  # type: ignore[type-arg]

    running: list[tuple[float, int, int]] = []  # (end, worker, task): ties in worker order
    # a heap of idle worker ids; past the n-th none ever gets a task (the lowest polls)
    idle = list(range(min(workers, max(n, 1))))
    push, pop = policy.push, policy.pop
    # a policy that ignores completion records is not called for them (a generic shortcut,
    # the same for every policy that keeps the base no-op)
    complete = None if type(policy).complete is Policy.complete else policy.complete
    if gate is not None:
        from desched.controls import GatedQueue

        gated = GatedQueue(policy, gate)
        push, pop, complete = gated.push, gated.pop, gated.complete  # type: ignore[assignment]
    arrived = labels.arrive if labels is not None else None
    completed = labels.complete if labels is not None else None
    heappush, heappop = heapq.heappush, heapq.heappop
    inf = math.inf
    queued = 0
    next_arrival = 0
    next_submit = arrival_t[0]
    decided = 0
    next_progress = PROGRESS_EVERY if progress is not None else n + 1

    while True:
        if running:
            t = running[0][0]
            if next_submit < t:  # noqa: PLR1730 (a call to min() costs more here)
                t = next_submit
        elif next_submit < inf:
            t = next_submit
        else:
            break
        while running and running[0][0] == t:
            _, w, i = heappop(running)
            heappush(idle, w)
            if complete is not None:
                complete(i, t, duration[i])
            if completed is not None:
                completed(i, t)
        while next_submit == t:
            i = arrival_task[next_arrival]
            next_arrival += 1
            next_submit = arrival_t[next_arrival]
            if arrived is not None:
                arrived(i, t)
            push(i, t)
            queued += 1
        while idle and queued:
            i = pop(t)
            if i is None:  # only behind a gate: every queued tenant is at its cap
                break
            w = heappop(idle)
            d_task.append(i)
            d_score.append(policy.score)
            if n_parts:
                for column, value in zip(d_parts, policy.parts):
                    column.append(value)
            queued -= 1
            start_s[i] = t
            worker_of[i] = w
            heappush(running, (t + duration[i], w, i))
            decided += 1
            if decided >= next_progress:
                progress(decided)  # type: ignore[misc]
                next_progress += PROGRESS_EVERY
    if queued or decided != n:
        raise DeschedError(f"simulation ended with {queued} queued and {n - decided} never run")
    if progress is not None:
        progress(decided)
    end_s = array("d", map(operator.add, start_s, duration))
    d_t = array("d", map(start_s.__getitem__, d_task))
    queue_len, tenant_backlog = queue_counts(submit, tenant, d_task, d_t)
    decisions = Decisions(
        t=d_t,
        worker=array("i", map(worker_of.__getitem__, d_task)),
        task=d_task,
        score=d_score,
        queue_len=queue_len,
        tenant_backlog=tenant_backlog,
        parts=d_parts,
    )
    return SimResult(
        policy=policy.name,
        workers=workers,
        start_s=start_s,
        end_s=end_s,
        worker=worker_of,
        decisions=decisions,
        wall_s=time.perf_counter() - wall0,
    )


def _checked_times(tasks: TaskTable) -> tuple[npt.NDArray[np.float64],
                                               npt.NDArray[np.float64]]:
    """``submit_s`` and ``duration_s`` as arrays (a kernel's inputs); refuses a table a run
    cannot end on: a submission time or duration that is not finite, or a negative duration
    (a trace read by ``desched.trace`` never has one; a table built by hand may, and the
    event loop would then never end, or the kernel read past its heap)."""
    submit = np.asarray(tasks.submit_s, dtype=np.float64)
    duration = np.asarray(tasks.duration_s, dtype=np.float64)
    bad = ~np.isfinite(submit) | ~np.isfinite(duration) | (duration < 0.0)
    if bad.any():
        i = int(np.argmax(bad))
        raise DeschedError(f"task {tasks.task_id[i]!r} (position {i}): submit_s "
                           f"{submit[i]!r}, duration_s {duration[i]!r}; both must be finite and "
                           "the duration not negative")
    return submit, duration


def kernel_for(policy: Policy, gate: Gate | None, engine: Engine = "auto") -> str | None:
    """The kernel that runs ``policy`` under ``engine`` (module docstring), or None for the
    Python loop; ``engine="kernel"`` where none can run is an error naming why."""
    if engine not in ENGINES:
        raise DeschedError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine == "python":
        return None
    from desched import kernels

    name = kernels.kernel_name(policy)
    why = None
    if name is None:
        why = f"policy {policy.name!r} has no compiled kernel (kernels: {', '.join(kernels.KERNELS)})"
    elif gate is not None:
        why = "tenant caps and priority levels run in the Python loop only"
    elif not kernels.available(name):
        why = "the kernels cannot be compiled here (llvmlite)"
    if why is None:
        return name
    if engine == "kernel":
        raise DeschedError(f"--engine kernel: {why}")
    return None


def simulate_arrays(
    name: str,
    params: object,
    components: tuple[str, ...],
    workers: int,
    inputs: KernelInputs,
) -> SimResult:
    """``simulate`` by the compiled kernel of policy ``name`` (``desched.kernels.KERNELS``)
    over the trace's ``inputs`` (task arrays by position).
    Precondition: ``desched.kernels.available(name)``. No Python runs per task."""
    from desched import kernels

    if workers < 1:
        raise DeschedError(f"workers must be >= 1, got {workers}")
    wall0 = time.perf_counter()
    run = kernels.run(name, params, len(components), workers, inputs.submit_s,
                      inputs.duration_s, inputs.predicted_s, inputs.tenant, inputs.weight,
                      inputs.predicted_p50_s, inputs.predicted_p90_s, inputs.online)
    wall = time.perf_counter() - wall0
    end = run.start_s + np.asarray(inputs.duration_s, dtype=np.float64)
    d_t = run.start_s[run.task]
    decisions = Decisions(
        t=array("d", d_t.tobytes()),
        worker=array("i", run.worker[run.task].astype(np.int32).tobytes()),
        task=array("q", run.task.tobytes()),
        score=array("d", run.score.tobytes()),
        queue_len=array("q", run.queue_len.tobytes()),
        tenant_backlog=array("q", run.tenant_backlog.tobytes()),
        parts=[array("d", np.ascontiguousarray(run.parts[:, j]).tobytes())
               for j in range(len(components))],
    )
    return SimResult(
        policy=name,
        workers=workers,
        start_s=array("d", run.start_s.tobytes()),
        end_s=array("d", end.tobytes()),
        worker=array("i", run.worker.astype(np.int32).tobytes()),
        decisions=decisions,
        wall_s=wall,
        engine=f"kernel:{name}",
        predicted=run.predicted,
    )
