"""The compiled IFS scan against the numpy path it replaces: same slot, same floats."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from desched.policies import make_policy
from desched.policies.ifs_counter import IfsCounter
from desched.policies.ifs_memoryless import IfsMemoryless
from desched.policies.ifs_predicted import IfsPredicted
from desched.structures.ifs_kernel import kernel
from desched.trace import TaskTable

pytestmark = pytest.mark.skipif(kernel() is None, reason="llvmlite cannot build the kernel")

FAST = {"ifs-memoryless": IfsMemoryless, "ifs-counter": IfsCounter,
        "ifs-predicted": IfsPredicted}


@st.composite
def workloads(draw: st.DrawFn) -> tuple[TaskTable, list[tuple[str, int, float]]]:
    """Tasks on a coarse grid (so that scores tie often) and a script of pushes, pops and
    completions at non-decreasing times."""
    n = draw(st.integers(1, 80))
    tenants = draw(st.integers(1, 12))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    submit = np.sort(rng.integers(0, 30, n)).astype(float)
    duration = rng.integers(1, 6, n).astype(float)
    predicted = rng.integers(1, 4, n).astype(float)
    names = [f"t{k}" for k in range(tenants)]
    tenant = rng.integers(0, tenants, n)
    tasks = TaskTable(
        task_id=[f"x{i}" for i in range(n)], tenant=tenant.tolist(), tenant_names=names,
        submit_s=submit.tolist(), duration_s=duration.tolist(), predicted_s=predicted.tolist(),
    )
    script: list[tuple[str, int, float]] = []
    queued = 0
    popped: list[int] = []
    for i in range(n):
        now = float(submit[i])
        script.append(("push", i, now))
        queued += 1
        while queued and draw(st.booleans()):
            script.append(("pop", -1, now + draw(st.sampled_from([0.0, 0.5, 3.0]))))
            queued -= 1
            popped.append(len(script) - 1)
    script.extend(("pop", -1, float(submit[-1]) + 40.0) for _ in range(queued))
    return tasks, script


WEIGHTS = [("0.1", "0.9"), ("0.5", "0.5"), ("1.0", "0.0"), ("0.0", "1.0"), ("0.25", "0.75")]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(FAST)), workloads(), st.sampled_from(WEIGHTS),
       st.sampled_from(["0.0", "1.0", "2.0"]))
def test_the_kernel_and_the_numpy_path_make_the_same_decisions(
    name, case, weights, w_service
) -> None:
    tasks, script = case
    second = "w_short" if name == "ifs-predicted" else "w_wait"
    params = {"w_backlog": weights[0], second: weights[1]}
    if name == "ifs-counter":
        params["w_service"] = w_service
    compiled = make_policy(name, tasks, params)
    plain = make_policy(name, tasks, params)
    plain.use_kernel = False  # type: ignore[attr-defined]
    last = 0.0
    for op, i, now in script:
        now = max(now, last)
        last = now
        if op == "push":
            compiled.push(i, now)
            plain.push(i, now)
            continue
        a, b = compiled.pop(now), plain.pop(now)
        assert a == b
        assert compiled.score == plain.score
        assert compiled.parts == plain.parts
        compiled.complete(a, now + 1.0, 1.0)
        plain.complete(b, now + 1.0, 1.0)
    assert len(compiled) == len(plain) == 0


def test_per_slot_extra_arrays_grow_and_move_with_their_slots() -> None:
    from desched.structures.tenant_queues import TenantQueues

    n = 6
    tasks = TaskTable(
        task_id=[f"x{i}" for i in range(n)], tenant=[0, 1, 2, 3, 4, 5],
        tenant_names=[f"t{k}" for k in range(n)], submit_s=[float(i) for i in range(n)],
        duration_s=[1.0] * n, predicted_s=[1.0] * n,
    )
    q = TenantQueues(tasks, lambda i: (tasks.submit_s[i],))
    q.extra["mark"] = np.zeros(len(q.backlog))
    for i in range(n):
        slot = q.push(i)
        q.extra["mark"][slot] = 10.0 + tasks.tenant[i]
    q._grow()
    assert len(q.extra["mark"]) == len(q.backlog)
    q.pop_tenant(0)  # the last slot moves into slot 0
    marks = {int(q.tenant[s]): float(q.extra["mark"][s]) for s in range(q.n)}
    assert marks == {k: 10.0 + k for k in range(1, n)}
