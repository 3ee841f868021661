"""The compiled kernels (``desched.kernels``) against the Python event loop: the same start
times, workers, scores and parts, bit for bit, on generated traces with ties, bursts,
tenant weights and rate limits; caps and priorities fall back to the Python loop; the
policy objects the live service runs replay a kernel's recorded decisions exactly."""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from desched.cli import cli
from desched.cli.sim import run_policy
from desched.controls import Controls, Gate, TenantControl, controlled, kernel_inputs
from desched.errors import DeschedError
from desched.kernels import KERNELS, available
from desched.policies import REGISTRY, make_policy
from desched.simulator import SimResult, simulate, simulate_arrays
from desched.trace import TaskTable, read_trace
from tests.builders import T, make_frame, make_tasks

KERNEL_POLICIES = sorted(KERNELS)
pytestmark = pytest.mark.skipif(not all(available(n) for n in KERNELS),
                                reason="the kernels cannot be compiled here (llvmlite)")

_grid = st.integers(0, 24).map(lambda x: x / 2)  # coarse: equal submits and ends are common
_sizes = st.integers(1, 10).map(lambda x: x / 2)
_weights = st.sampled_from([1.0, 0.5, 2.0, 3.0, 0.3])


@st.composite
def traces(draw: st.DrawFn, max_tasks: int = 50) -> list[T]:
    """Tasks of up to 6 tenants; sometimes a burst (all at one or two instants), sometimes
    without predictions (VTC then charges on completion)."""
    n = draw(st.integers(1, max_tasks))
    k = draw(st.integers(1, 6))
    burst = draw(st.booleans())
    instants = draw(st.lists(_grid, min_size=1, max_size=2)) if burst else None
    predicted = draw(st.booleans())
    return [
        T(tenant="abcdef"[draw(st.integers(0, k - 1))],
          submit_s=draw(st.sampled_from(instants)) if instants else draw(_grid),
          duration_s=draw(_sizes),
          predicted_s=draw(_sizes) if predicted else math.nan)
        for _ in range(n)
    ]


def assert_identical(kernel: SimResult, python: SimResult) -> None:
    """Start times, workers and every decision column, compared as bytes (bit for bit)."""
    assert kernel.start_s.tobytes() == python.start_s.tobytes()
    assert kernel.end_s.tobytes() == python.end_s.tobytes()
    assert kernel.worker.tobytes() == python.worker.tobytes()
    k, p = kernel.decisions, python.decisions
    for column in ("t", "worker", "task", "score", "queue_len", "tenant_backlog"):
        assert getattr(k, column).tobytes() == getattr(p, column).tobytes(), column
    assert [c.tobytes() for c in k.parts] == [c.tobytes() for c in p.parts]


def both_engines(tasks: TaskTable, name: str, workers: int) -> tuple[SimResult, SimResult]:
    kernel = simulate(tasks, make_policy(name, tasks), workers, engine="kernel")
    python = simulate(tasks, make_policy(name, tasks), workers, engine="python")
    return kernel, python


@settings(max_examples=150, deadline=None)
@given(tasks=traces(), workers=st.integers(1, 4), name=st.sampled_from(KERNEL_POLICIES),
       weights=st.lists(_weights, min_size=6, max_size=6))
def test_every_kernel_decides_bit_identically_to_the_python_loop(
    tasks: list[T], workers: int, name: str, weights: list[float]
) -> None:
    table = make_tasks(*tasks)
    assume("predicted_s" not in REGISTRY[name].reads or table.has_predictions)
    for k in range(len(table.tenant_names)):
        if weights[k] != 1.0:
            table.tenant_weight[k] = weights[k]
    kernel, python = both_engines(table, name, workers)
    assert kernel.engine == f"kernel:{name}" and python.engine == "python"
    assert_identical(kernel, python)


@settings(max_examples=60, deadline=None)
@given(tasks=traces(max_tasks=40), workers=st.integers(1, 3),
       name=st.sampled_from(KERNEL_POLICIES), rate=st.sampled_from([0.5, 1.0, 2.0]),
       weight=_weights)
def test_the_cli_path_under_weights_and_rate_limits_equals_the_python_loop(
    tasks: list[T], workers: int, name: str, rate: float, weight: float
) -> None:
    frame = make_frame(*tasks)
    assume("predicted_s" not in REGISTRY[name].reads or "predicted_s" in frame.columns)
    controls = Controls({"a": TenantControl(weight=weight, rate=rate),
                         "b": TenantControl(weight=2.0)})
    inputs = kernel_inputs(frame, controls)
    assert inputs is not None
    policy_cls = REGISTRY[name]
    kernel = simulate_arrays(name, policy_cls.Params(), policy_cls.components, workers, **inputs)
    table, gate = controlled(frame, controls)
    assert gate is None
    python = simulate(table, make_policy(name, table), workers, engine="python")
    assert_identical(kernel, python)


@pytest.mark.parametrize("name", KERNEL_POLICIES)
def test_caps_and_priorities_fall_back_to_the_python_loop_and_a_forced_kernel_says_why(
    name: str,
) -> None:
    tasks = make_tasks(*(T("ab"[i % 2], i * 0.5, 1.0, 1.0) for i in range(8)))
    gate = Gate(tasks, Controls({"a": TenantControl(cap=1)}))
    result = simulate(tasks, make_policy(name, tasks), 2, gate=gate)
    assert result.engine == "python"
    with pytest.raises(DeschedError, match="caps and priority levels"):
        simulate(tasks, make_policy(name, tasks), 2, gate=gate, engine="kernel")
    frame = make_frame(*(T("ab"[i % 2], i * 0.5, 1.0, 1.0) for i in range(8)))
    assert kernel_inputs(frame.with_columns(priority=pl.Series([0, 1] * 4)), None) is None
    assert kernel_inputs(frame, Controls({"a": TenantControl(cap=2)})) is None


def test_a_naive_twin_and_a_policy_without_a_kernel_run_in_the_python_loop() -> None:
    tasks = make_tasks(T("a", 0, 1, 1), T("b", 0, 2, 2))
    assert simulate(tasks, make_policy("fifo", tasks, naive=True), 1).engine == "python"
    assert simulate(tasks, make_policy("fifo", tasks), 1).engine == "kernel:fifo"
    without = [n for n in REGISTRY if n not in KERNELS]
    for name in without:
        assert simulate(tasks, make_policy(name, tasks), 1).engine == "python"
    with pytest.raises(DeschedError, match="no compiled kernel"):
        simulate(tasks, make_policy("fifo", tasks, naive=True), 1, engine="kernel")


@pytest.mark.parametrize("name", KERNEL_POLICIES)
def test_the_policy_objects_replay_a_kernel_run_recorded_in_its_decision_log(
    tmp_path, name: str
) -> None:
    """The live service's policy objects, fed the recorded run's arrivals and completion
    records in log order, pop exactly the recorded task with the recorded score."""
    rng = np.random.default_rng(3)
    n = 400
    duration = np.round(rng.exponential(2.0, n), 1) + 0.1
    frame = pl.DataFrame({
        "task_id": [f"t{i}" for i in range(n)],
        "tenant": [f"k{x}" for x in rng.integers(0, 5, n)],
        "task_type": "extract",
        "submit_s": np.sort(np.round(rng.uniform(0, 150, n), 0)),
        "duration_s": duration,
        "predicted_s": np.round(duration * rng.uniform(0.5, 1.5, n), 1) + 0.1,
    })
    path = tmp_path / "trace.parquet"
    frame.write_parquet(path)
    trace = read_trace(path)
    summary = run_policy(trace, name, {}, 3, tmp_path / "run", 0, None)
    assert summary.engine == f"kernel:{name}"
    log = pl.read_parquet(tmp_path / "run" / "decision-log.parquet").sort("seq")
    tasks = TaskTable.from_frame(trace)
    policy = make_policy(name, tasks)
    position = {tid: i for i, tid in enumerate(tasks.task_id)}
    arrivals = sorted(range(n), key=tasks.submit_s.__getitem__)
    pushed = 0
    parts = list(policy.components)
    for row in log.iter_rows(named=True):
        t = row["t"]
        strictly = row["kind"] == "completion"  # an arrival at t joins after t's completions
        while pushed < n and (tasks.submit_s[arrivals[pushed]] < t
                              or (not strictly and tasks.submit_s[arrivals[pushed]] == t)):
            i = arrivals[pushed]
            policy.push(i, tasks.submit_s[i])
            pushed += 1
        i = position[row["task_id"]]
        if row["kind"] == "completion":
            policy.complete(i, t, tasks.duration_s[i])
            continue
        assert policy.pop(t) == i
        assert (policy.score, policy.parts) == (row["score"], tuple(row[c] for c in parts))
    assert pushed == n and len(policy) == 0


def test_desched_simulate_names_its_engine_and_the_python_loop_writes_the_same_files(
    tmp_path,
) -> None:
    frame = make_frame(*(T("abc"[i % 3], (i // 4) * 1.0, 1.0 + i % 5, 2.0) for i in range(40)))
    trace = tmp_path / "trace.parquet"
    frame.write_parquet(trace)

    def run(out: str, *extra: str) -> dict[str, object]:
        res = CliRunner().invoke(cli, ["simulate", "--trace", str(trace), "--policy", "vtc",
                                       "--workers", "2", "--out", str(tmp_path / out), *extra])
        assert res.exit_code == 0, res.output
        return json.loads((tmp_path / out / "summary.json").read_text())  # type: ignore[no-any-return]

    assert run("k")["engine"] == "kernel:vtc"
    assert run("p", "--engine", "python")["engine"] == "python"
    assert run("n", "--no-decision-log")["engine"] == "kernel:vtc"
    for name in ("tasks", "decisions", "decision-log"):
        assert pl.read_parquet(tmp_path / "k" / f"{name}.parquet").equals(
            pl.read_parquet(tmp_path / "p" / f"{name}.parquet"))
    assert not (tmp_path / "n" / "decision-log.parquet").exists()
    assert pl.read_parquet(tmp_path / "n" / "tasks.parquet").equals(
        pl.read_parquet(tmp_path / "k" / "tasks.parquet"))
    caps = tmp_path / "caps.json"
    caps.write_text('[{"tenant": "a", "cap": 1}]')
    res = CliRunner().invoke(cli, ["simulate", "--trace", str(trace), "--policy", "vtc",
                                   "--workers", "2", "--out", str(tmp_path / "c"),
                                   "--tenants", str(caps), "--engine", "kernel"])
    assert res.exit_code != 0 and "caps and priority levels" in res.output


@pytest.mark.parametrize("scenario", ["flood", "many-tenants"])
@pytest.mark.parametrize("name", KERNEL_POLICIES)
def test_every_kernel_agrees_with_the_python_loop_on_a_large_scenario(
    name: str, scenario: str
) -> None:
    from desched.workloads import generate

    frame = generate(scenario, tasks=40_000, load=1.1, predicted_noise=0.5, seed=5)
    table = TaskTable.from_frame(frame)
    kernel, python = both_engines(table, name, 8)
    assert_identical(kernel, python)
