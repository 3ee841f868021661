"""Reference models of DESIGN.md's simulation semantics written in SimPy.

They share nothing with ``desched.simulator`` except the policy objects: time, workers, the
queue and the order of same-instant events are SimPy's. ``simulate_simpy`` follows the three
steps of an instant literally with any ``Policy`` (typically the naive twin);
``simulate_simpy_fifo`` is plain first come, first served on a ``simpy.Store``, as fast as
SimPy allows, for the throughput benchmark.

Times are exact: an arrival is scheduled at exactly ``submit_s`` (the delay is nudged by one
ulp where ``now + (submit_s - now)`` would round elsewhere) and a task started at ``t`` ends at
``t + duration_s``, the same float any other implementation of the semantics computes.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import cast

import simpy

from desched.policies.base import Policy
from desched.trace import TaskTable

Proc = Generator[simpy.Event, object, None]


@dataclass(slots=True)
class SimpyRun:
    """Start time and worker per task position, and the decisions as ``(t, worker, task)``."""

    start_s: list[float]
    worker: list[int]
    decisions: list[tuple[float, int, int]] = field(default_factory=list)


def delay_to(now: float, at: float) -> float:
    """The delay ``d >= 0`` with ``now + d == at`` exactly in floating point."""
    d = at - now
    while now + d < at:
        d = math.nextafter(d, math.inf)
    while now + d > at and d > 0:
        d = math.nextafter(d, -math.inf)
    if now + d != at:
        raise ValueError(f"no float delay takes {now!r} exactly to {at!r}")
    return d


def trace_order(submit_s: Sequence[float]) -> list[int]:
    """Task positions by submission; equal submissions keep trace order."""
    return sorted(range(len(submit_s)), key=lambda i: (submit_s[i], i))


class _Model:
    """Arrivals and workers only record what happened; one dispatcher applies the semantics.

    Once woken, the dispatcher yields ``timeout(0)`` until the next event lies in the future,
    so every arrival and completion of the instant has been recorded. It then feeds the
    completions to the policy in worker-id order, the arrivals in trace order, and hands work
    to the lowest-id idle worker while the queue is not empty.
    """

    def __init__(self, tasks: TaskTable, policy: Policy, workers: int) -> None:
        self.env = simpy.Environment()
        self.tasks = tasks
        self.policy = policy
        n = len(tasks)
        self.run = SimpyRun(start_s=[math.nan] * n, worker=[-1] * n)
        self.arrived: list[int] = []
        self.completed: list[tuple[int, int]] = []
        self.idle: set[int] = set(range(workers))
        self.mailbox: list[simpy.Event] = [self.env.event() for _ in range(workers)]
        self.wake = self.env.event()
        self.env.process(self.arrivals())
        for w in range(workers):
            self.env.process(self.worker(w))
        self.env.process(self.dispatcher())

    def notify(self) -> None:
        if not self.wake.triggered:
            self.wake.succeed()

    def arrivals(self) -> Proc:
        env = self.env
        for i in trace_order(self.tasks.submit_s):
            yield env.timeout(delay_to(env.now, self.tasks.submit_s[i]))
            self.arrived.append(i)
            self.notify()

    def worker(self, w: int) -> Proc:
        env = self.env
        while True:
            i = cast(int, (yield self.mailbox[w]))
            yield env.timeout(self.tasks.duration_s[i])
            self.mailbox[w] = env.event()
            self.completed.append((w, i))
            self.notify()

    def dispatcher(self) -> Proc:
        env, policy, run = self.env, self.policy, self.run
        while True:
            yield self.wake
            while env.peek() == env.now:
                yield env.timeout(0)
            self.wake = env.event()
            t = env.now
            for w, i in sorted(self.completed):
                self.idle.add(w)
                policy.complete(i, t, self.tasks.duration_s[i])
            self.completed.clear()
            for i in sorted(self.arrived):
                policy.push(i, t)
            self.arrived.clear()
            while self.idle and len(policy):
                w = min(self.idle)
                self.idle.remove(w)
                i = policy.pop(t)
                run.start_s[i] = t
                run.worker[i] = w
                run.decisions.append((t, w, i))
                self.mailbox[w].succeed(i)


def simulate_simpy(tasks: TaskTable, policy: Policy, workers: int) -> SimpyRun:
    """Run ``tasks`` on ``workers`` workers under ``policy`` (a fresh, empty one) in SimPy."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if len(policy):
        raise ValueError("the policy must start with an empty queue")
    model = _Model(tasks, policy, workers)
    model.env.run()
    if any(math.isnan(s) for s in model.run.start_s):
        raise RuntimeError("the SimPy model ended with tasks that never ran")
    return model.run


def simulate_simpy_fifo(
    submit_s: Sequence[float], duration_s: Sequence[float], workers: int
) -> list[float]:
    """Start times under global FIFO: one arrival process, a ``Store``, one process per worker.

    Which worker takes a task may differ from the lowest-id rule, but under FIFO the start
    times do not depend on it: tasks start in ``(submit_s, position)`` order, each as soon as
    it has arrived and some worker is free.
    """
    env = simpy.Environment()
    queue = simpy.Store(env)
    start_s = [math.nan] * len(submit_s)

    def arrivals() -> Proc:
        timeout, put = env.timeout, queue.put
        for i in trace_order(submit_s):
            at = submit_s[i]
            d = at - env.now
            yield timeout(d if env.now + d == at else delay_to(env.now, at))
            put(i)

    def worker() -> Proc:
        timeout, get = env.timeout, queue.get
        while True:
            i = cast(int, (yield get()))
            start_s[i] = env.now
            yield timeout(duration_s[i])

    env.process(arrivals())
    for _ in range(workers):
        env.process(worker())
    env.run()
    return start_s
