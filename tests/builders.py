"""Small builders for tests: ``make_tasks``, Hypothesis strategies for random workloads and
``decision_sequence``, what a fast policy and its naive twin must agree on."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import polars as pl
from hypothesis import strategies as st

from desched.policies import make_policy
from desched.simulator import simulate
from desched.trace import TaskTable


@dataclass(frozen=True)
class T:
    """One task for a hand-worked case."""

    tenant: str
    submit_s: float
    duration_s: float
    predicted_s: float = math.nan
    task_type: str = "extract"


def make_frame(*tasks: T) -> pl.DataFrame:
    """A trace frame with ids ``t0, t1, ...`` in the given order."""
    frame = pl.DataFrame(
        {
            "task_id": [f"t{i}" for i in range(len(tasks))],
            "tenant": [t.tenant for t in tasks],
            "task_type": [t.task_type for t in tasks],
            "submit_s": [float(t.submit_s) for t in tasks],
            "duration_s": [float(t.duration_s) for t in tasks],
        },
        schema_overrides={"submit_s": pl.Float64, "duration_s": pl.Float64},
    )
    if any(not math.isnan(t.predicted_s) for t in tasks):
        frame = frame.with_columns(pl.Series("predicted_s", [t.predicted_s for t in tasks]))
    return frame


def make_tasks(*tasks: T) -> TaskTable:
    return TaskTable.from_frame(make_frame(*tasks))


# Coarse grids make ties (equal submits, equal durations, equal backlogs) frequent, which is
# where a fast path most easily disagrees with its reference.
_times = st.integers(0, 40).map(lambda x: x / 2)
_durations = st.integers(1, 12).map(lambda x: x / 2)


@st.composite
def workloads(draw: st.DrawFn, max_tasks: int = 40, max_tenants: int = 5) -> TaskTable:
    """A random small workload with predictions; tenants ``a``, ``b``, ..."""
    n = draw(st.integers(1, max_tasks))
    k = draw(st.integers(1, max_tenants))
    tasks = [
        T(
            tenant="abcdefghij"[draw(st.integers(0, k - 1))],
            submit_s=draw(_times),
            duration_s=draw(_durations),
            predicted_s=draw(_durations),
        )
        for _ in range(n)
    ]
    return make_tasks(*tasks)


def decision_sequence(tasks: TaskTable, name: str, workers: int, naive: bool) -> list[tuple]:
    """Every decision of policy ``name`` (or its naive twin) as ``(t, worker, task, score,
    *parts)``, by the Python event loop over the policy object (the live service's code;
    the compiled kernels are checked against this loop in tests/test_kernels.py)."""
    policy = make_policy(name, tasks, naive=naive)
    d = simulate(tasks, policy, workers, engine="python").decisions
    return list(zip(d.t, d.worker, d.task, d.score, *d.parts))


def assert_state_round_trips(fast_cls: type, naive_cls: type, tasks: TaskTable, cut: int,
                             complete_every: int = 2) -> None:
    """The saved-state contract of a fast class and its naive twin: after the same arrivals,
    ``cut`` pops and the completion of every ``complete_every``-th popped task, both save the
    same state, and a fresh copy given the queued tasks and that state saves it again."""
    order = sorted(range(len(tasks.task_id)), key=tasks.submit_s.__getitem__)
    fast, naive = fast_cls(tasks), naive_cls(tasks)
    for policy in (fast, naive):
        for i in order:
            policy.push(i, tasks.submit_s[i])
        for k in range(min(cut, len(order))):
            now = tasks.submit_s[order[-1]]
            j = policy.pop(now)
            if k % complete_every == complete_every - 1:
                policy.complete(j, now + 1.0, tasks.duration_s[j])
    state = fast.state()
    assert state == naive.state()
    assert state is not None
    again = fast_cls(tasks)
    for i in order:
        if i in fast.keys:
            again.push(i, tasks.submit_s[i])
    again.restore(state)
    assert again.state() == state


FULL_EXAMPLES = os.environ.get("DESCHED_CONTRACT_EXAMPLES") == "full"
"""``make test`` sets ``DESCHED_CONTRACT_EXAMPLES=full``: the registry's contract suite then
draws its full number of Hypothesis examples; the inner loop (``make test-fast``) draws a
tenth of them, so that every registered policy is checked on every run."""


def examples(full: int) -> int:
    """Hypothesis examples for a contract test that draws ``full`` under ``make test``: all
    of them there, a tenth (at least 5) in the inner loop."""
    return full if FULL_EXAMPLES else max(5, full // 10)
