"""The compiled kernels (``desched.kernels``) against the Python event loop: the same start
times, workers, scores and parts, bit for bit, on generated traces with ties, bursts,
tenant weights and rate limits; caps and priorities fall back to the Python loop; the
policy objects the live service runs replay a kernel's recorded decisions exactly."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def both_engines(tasks: TaskTable, name: str, workers: int,
                 params: dict[str, Any] | None = None) -> tuple[SimResult, SimResult]:
    kernel = simulate(tasks, make_policy(name, tasks, params), workers, engine="kernel")
    python = simulate(tasks, make_policy(name, tasks, params), workers, engine="python")
    return kernel, python


def assert_kernel_is_the_loop(tasks: TaskTable, name: str, workers: int,
                              params: dict[str, Any] | None = None) -> None:
    """``name``'s kernel ran (not the loop) and decided as the Python loop, bit for bit."""
    kernel, python = both_engines(tasks, name, workers, params)
    assert kernel.engine == f"kernel:{name}"
    assert_identical(kernel, python)


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


@pytest.mark.parametrize("name", KERNEL_POLICIES)
def test_more_workers_than_tasks_run_as_many_as_the_tasks_on_both_engines(name: str) -> None:
    # a worker past the n-th never gets a task: a trillion workers decide as n do, and the
    # run allocates nothing by the count asked for (it tried to: 7 TiB for the Python loop's
    # heap of idle workers, 8 TB for the kernel's, more for boost-ledger's charge slots)
    table = make_tasks(*(T("ab"[i % 2], submit_s=i % 3, duration_s=1 + i % 4,
                           predicted_s=2 + i % 3) for i in range(7)))
    as_many = both_engines(table, name, 7)
    trillion = both_engines(table, name, 10**12)
    assert_identical(*as_many)
    assert_identical(*trillion)
    assert_identical(trillion[0], as_many[0])
    assert trillion[0].workers == 10**12


IFS_KERNELS = ("ifs-memoryless", "ifs-counter", "ifs-predicted")
_ifs_weight = st.sampled_from(  # 1e6: the largest weight allowed (MAX_WEIGHT)
    ["0", "0", "0.1", "0.5", "0.9", "1", "3", "1e-12", "1e6"])


@st.composite
def crowded_traces(draw: st.DrawFn) -> TaskTable:
    """Up to 40 tenants and 160 tasks at a few instants with a few prediction values: many
    tenants share a backlog and a head submit, so the IFS kernels' groups of equal backlog
    hold several tenants whose scores tie, and the bound stops the visit early or late."""
    n = draw(st.integers(1, 160))
    k = draw(st.integers(1, 40))
    instants = draw(st.lists(_grid, min_size=1, max_size=4))
    tasks = [
        T(tenant=f"t{draw(st.integers(0, k - 1)):02d}",
          submit_s=draw(st.sampled_from(instants)),
          duration_s=draw(_sizes),
          predicted_s=draw(st.sampled_from([0.5, 1.0, 1.5, 4.0])))
        for _ in range(n)
    ]
    return make_tasks(*tasks)


@settings(max_examples=150, deadline=None)
@given(table=crowded_traces(), workers=st.integers(1, 3), name=st.sampled_from(IFS_KERNELS),
       w_backlog=_ifs_weight, w_other=_ifs_weight)
def test_the_ifs_kernels_visit_by_backlog_group_decides_as_the_python_loop(
    table: TaskTable, workers: int, name: str, w_backlog: str, w_other: str
) -> None:
    """The IFS kernels visit tenants by group of equal backlog, score one head per group
    and stop at a group whose bound is below the best: the Python loop's decisions, bit
    for bit, under weights that make the bound stop at once, never, or on a tie."""
    other = "w_short" if name == "ifs-predicted" else "w_wait"
    params = {"w_backlog": w_backlog, other: w_other}
    assert_kernel_is_the_loop(table, name, workers, params)


@st.composite
def counter_bursts(draw: st.DrawFn) -> TaskTable:
    """A burst of up to 1,500 tasks over up to 200 Zipf tenants (every tenant backlogged for
    long, served many times), on a grid or continuous, at times offset by up to 1e6 s, with
    durations of up to five orders of magnitude: ifs-counter's reference values and its
    service floor meet rebases, ties, near-ties and counters far apart."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = draw(st.integers(2, 1500))
    tenants = draw(st.integers(1, 200))
    share = 1 / np.arange(1, tenants + 1)
    tenant = rng.choice(tenants, size=n, p=share / share.sum())
    offset = draw(st.sampled_from([0.0, 1e6]))
    scale = draw(st.sampled_from([1e-3, 1.0, 100.0]))
    if draw(st.booleans()):
        submit = np.floor(rng.uniform(0.0, 4.0, n)) + offset
        duration = rng.integers(1, 4, n).astype(float) * scale
    else:
        submit = rng.uniform(0.0, 1.0, n) + offset
        duration = rng.exponential(scale, n) * rng.choice([1e-2, 1.0, 1e3], n)
    return TaskTable.from_frame(pl.DataFrame({
        "task_id": [f"t{i}" for i in range(n)],
        "tenant": [f"u{k:03d}" for k in tenant.tolist()],
        "task_type": "extract",
        "submit_s": submit,
        "duration_s": duration,
        "predicted_s": duration,
    }))


@settings(max_examples=60, deadline=None)
@given(table=counter_bursts(), workers=st.integers(1, 4),
       half_life=st.sampled_from(["0.01", "1", "60", "900", "1e6"]),
       w_service=st.sampled_from(["0", "0.25", "2", "40"]),
       w_wait=st.sampled_from(["0", "0.3", "1"]))
def test_ifs_counters_reference_values_and_service_floor_keep_the_python_loops_bits(
    table: TaskTable, workers: int, half_life: str, w_service: str, w_wait: str,
) -> None:
    """ifs-counter's kernel computes the decayed service of few tenants (those whose value at
    the reference time is near the largest, and those whose floor on the service term does
    not already rule them out), rebuilding the reference every 64 half-lives: the Python
    loop's decisions, bit for bit, from half-lives far below a task to far above the run."""
    params = {"half_life_s": half_life, "w_service": w_service, "w_wait": w_wait}
    assert_kernel_is_the_loop(table, "ifs-counter", workers, params)


BOOST_KERNELS = ("boost-predicted", "boost-now", "fair-boost", "boost-lanes", "boost-ledger")
_p50 = st.one_of(st.just(math.nan), st.just(0.0), st.just(math.inf), _sizes)
_p90 = st.one_of(st.just(math.nan), st.just(math.inf),
                 st.tuples(_sizes, st.sampled_from([0.5, 1.0, 2.0, 4.0, 8.0])).map(
                     lambda x: x[0] * x[1]))


@st.composite
def quantile_traces(draw: st.DrawFn, max_tasks: int = 60) -> TaskTable:
    """Tasks with predictions and, for some, p50 / p90 quantiles: missing, zero or infinite
    p50, p90 missing, crossed (at or below the p50), close above it and far above it (the
    shifted exponential's shift then goes below 0); sometimes a burst; tenant weights."""
    n = draw(st.integers(2, max_tasks))
    k = draw(st.integers(1, 6))
    instants = draw(st.lists(_grid, min_size=1, max_size=2)) if draw(st.booleans()) else None
    tasks = [
        T(tenant="abcdef"[draw(st.integers(0, k - 1))],
          submit_s=draw(st.sampled_from(instants)) if instants else draw(_grid),
          duration_s=draw(_sizes), predicted_s=draw(_sizes))
        for _ in range(n)
    ]
    table = make_tasks(*tasks)
    table.predicted_p50_s[:] = [draw(_p50) for _ in range(n)]
    table.predicted_p90_s[:] = [draw(_p90) for _ in range(n)]
    weights = draw(st.lists(_weights, min_size=6, max_size=6))
    table.tenant_weight.update({c: weights[c] for c in range(len(table.tenant_names))
                                if weights[c] != 1.0})
    return table


_boost_params = st.fixed_dictionaries({
    "window": st.sampled_from(["2", "3", "4", "5", "8", "256"]),
    "workers": st.sampled_from(["0", "1", "3"]),
    "scale": st.sampled_from(["0.25", "1", "10", "64"]),
    "max_load": st.sampled_from(["0.5", "0.98"]),
    "sympathy": st.sampled_from(["0", "0.5", "2", "10"]),
})


@settings(max_examples=200, deadline=None)
@given(table=quantile_traces(), workers=st.integers(1, 4), name=st.sampled_from(BOOST_KERNELS),
       params=_boost_params)
def test_the_boost_kernels_decide_bit_identically_under_quantiles_and_small_windows(
    table: TaskTable, workers: int, name: str, params: dict[str, str]
) -> None:
    """γ re-solved every few dispatches (numpy's exp loop, math.fsum), boosts by libm's
    exp and log1p, the sympathy guard, the corrected VTC counters: the Python loop's bits."""
    if name == "fair-boost":
        params = {k: v for k, v in params.items() if k != "sympathy"}
    assert_kernel_is_the_loop(table, name, workers, params)


@settings(max_examples=200, deadline=None)
@given(table=quantile_traces(max_tasks=120), workers=st.integers(1, 4), params=_boost_params,
       depth=st.sampled_from(["0", "1", "3", "4096"]), spread=st.sampled_from(["0", "1", "2", "5"]))
def test_boost_now_s_kernel_follows_the_estimate_as_the_loop_does_at_every_queue_depth(
    table: TaskTable, workers: int, params: dict[str, str], depth: str, spread: str
) -> None:
    """The ranking γ of the amortised re-keying (set at a move of the estimate only where
    the queue is shallow or ``q / rekey_spread`` dispatches have passed): the Python loop's
    bits, with depths and spreads small enough that most moves are deferred."""
    params = {**params, "rekey_depth": depth, "rekey_spread": spread}
    assert_kernel_is_the_loop(table, "boost-now", workers, params)


@settings(max_examples=200, deadline=None)
@given(table=st.one_of(quantile_traces(), crowded_traces()), workers=st.integers(1, 4),
       params=_boost_params)
def test_the_ledger_kernel_decides_bit_identically_with_many_tenants_owed_and_overtaken(
    table: TaskTable, workers: int, params: dict[str, str]
) -> None:
    """boost-ledger's owed tenants (among the flagged ones), the overtaken ones (a prefix of
    the backlogged tenants by oldest queued task), its backlog periods and the completion
    records' corrections of under- and over-estimated overtakers, with up to 40 tenants at
    a few instants: the Python loop's bits."""
    assert_kernel_is_the_loop(table, "boost-ledger", workers, params)


def test_the_ledger_kernel_takes_alpha_from_the_policy_and_its_guard_changes_decisions(
) -> None:
    from desched.kernels import KERNELS
    from desched.policies.boost_ledger import BoostLedger
    from desched.workloads import generate
    from tests.test_duration_withheld import with_quantiles

    assert KERNELS["boost-ledger"].prm(BoostLedger.Params())[5] == BoostLedger.ALPHA == 0.5
    frame = generate("flood", tasks=1500, tenants=12, workers=4, seed=5, predicted_noise=0.5)
    table = TaskTable.from_frame(with_quantiles(frame, 5))
    ledger, python = both_engines(table, "boost-ledger", 4)
    assert_identical(ledger, python)
    lanes = simulate(table, make_policy("boost-lanes", table), 4, engine="kernel")
    assert lanes.decisions.task.tobytes() != ledger.decisions.task.tobytes()


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(-1e3, 1e3, allow_nan=False),
    st.sampled_from([math.inf, -math.inf, math.nan, 1e308, -1e308, 5e-324, 1e16, 1.0, -0.0]),
), max_size=40))
def test_the_kernels_fsum_is_math_fsum_bit_for_bit_compiled_and_under_cpython(
    values: list[float],
) -> None:
    """Shewchuk's partials, the half-even correction and the special values; where
    math.fsum raises, the kernel's flag says which error and the sum is NaN."""
    from desched.kernels import source_boost

    try:
        want: float | type[Exception] = math.fsum(values)
    except (OverflowError, ValueError) as e:
        want = type(e)
    for fsum in (source_boost.fsum, compiled_fsum()):
        sc = np.zeros(16, dtype=np.int64)
        if fsum is source_boost.fsum:  # Python floats and lists: CPython's own arithmetic
            got = fsum(values, len(values), [0.0] * (len(values) + 1), 0, sc)  # type: ignore[arg-type]
        else:
            vals = np.array(values + [0.0], dtype=np.float64)
            partials = np.zeros(len(values) + 1)
            got = fsum(vals.ctypes.data, len(values), partials.ctypes.data, 0, sc.ctypes.data)
        if isinstance(want, float):
            assert sc[14] == 0
            assert np.float64(got).tobytes() == np.float64(want).tobytes() or (
                math.isnan(got) and math.isnan(want))
        else:
            assert math.isnan(got)
            assert sc[14] == (1 if want is OverflowError else 2)


@functools.cache
def compiled_fsum() -> Callable[..., float]:
    import ast

    from desched.kernels import source_boost
    from desched.structures import kernelc

    path = source_boost.__file__
    tree = ast.parse(open(path).read(), path)  # noqa: SIM115 (read once)
    keep = {"fsum", "fabs", "finite"}
    tree.body = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in keep]
    return kernelc.compile_functions(tree, path, ["fsum"])["fsum"]


def test_the_boost_kernels_constants_are_the_policys() -> None:
    from desched.kernels import source_boost
    from desched.policies import boost_predicted as bp

    assert (source_boost.LN2, source_boost.LN5, source_boost.LN10) == (bp.LN2, bp.LN5, bp.LN10)
    assert source_boost.MAX_EXPONENT == bp.MAX_EXPONENT
    assert source_boost.BISECTIONS == bp.BISECTIONS
    assert source_boost.BRACKET == 2.0 ** -bp.BISECTIONS
    # exp2d's constants join the same compiled namespace: a name both define must agree
    from desched.structures import exp2

    assert exp2.LN2 == source_boost.LN2


@settings(max_examples=60, deadline=None)
@given(tasks=traces(max_tasks=40), workers=st.integers(1, 3),
       name=st.sampled_from(KERNEL_POLICIES), rate=st.sampled_from([0.5, 1.0, 2.0]),
       weight=_weights,
       quantiles=st.none() | st.lists(st.tuples(_p50, _p90), min_size=40, max_size=40))
def test_the_cli_path_under_weights_and_rate_limits_equals_the_python_loop(
    tasks: list[T], workers: int, name: str, rate: float, weight: float,
    quantiles: list[tuple[float, float]] | None,
) -> None:
    """Also with quantile columns (missing values as nulls) read by the Boost kernels."""
    frame = make_frame(*tasks)
    if quantiles is not None:
        for j, column in enumerate(("predicted_p50_s", "predicted_p90_s")):
            values = [None if math.isnan(q[j]) else q[j] for q in quantiles[: frame.height]]
            frame = frame.with_columns(pl.Series(column, values, dtype=pl.Float64))
    assume("predicted_s" not in REGISTRY[name].reads or "predicted_s" in frame.columns)
    controls = Controls({"a": TenantControl(weight=weight, rate=rate),
                         "b": TenantControl(weight=2.0)})
    inputs = kernel_inputs(frame, controls)
    assert inputs is not None
    policy_cls = REGISTRY[name]
    kernel = simulate_arrays(name, policy_cls.Params(), policy_cls.components, workers, inputs)
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
    records in log order, pop exactly the recorded task with the recorded score. The trace
    carries quantile labels (some absent), as the service stores them."""
    rng = np.random.default_rng(3)
    n = 400
    duration = np.round(rng.exponential(2.0, n), 1) + 0.1
    predicted = np.round(duration * rng.uniform(0.5, 1.5, n), 1) + 0.1
    p50 = np.where(rng.random(n) < 0.1, np.nan, np.round(predicted * rng.uniform(0.4, 1.0, n), 2))
    frame = pl.DataFrame({
        "task_id": [f"t{i}" for i in range(n)],
        "tenant": [f"k{x}" for x in rng.integers(0, 5, n)],
        "task_type": "extract",
        "submit_s": np.sort(np.round(rng.uniform(0, 150, n), 0)),
        "duration_s": duration,
        "predicted_s": predicted,
        "predicted_p50_s": p50,
        "predicted_p90_s": np.round(predicted * rng.uniform(1.1, 4.0, n), 2),
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
    assert_kernel_is_the_loop(table, name, 8)


def test_a_kernel_loaded_from_its_cached_object_computes_what_the_compiled_one_did(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second build of a module finds its object code in the cache folder and loads it
    without compiling (nor parsing the IR): the same function."""
    import ast

    from desched.structures import kernelc

    source = "def half_sum(n: int, x: F64) -> float:\n    s = 0.0\n    for i in range(n):\n" \
             "        s += x[i] / 2.0\n    return s\n"
    monkeypatch.setenv("DESCHED_KERNEL_CACHE", str(tmp_path))
    x = np.array([1.0, 2.5, -7.0, 1e300])
    got = []
    for _ in range(2):
        fn = kernelc.compile_functions(ast.parse(source), "half_sum.py", ["half_sum"])["half_sum"]
        got.append(fn(x.size, x.ctypes.data))
    assert len(list(tmp_path.glob("kernel-*.o"))) == 1
    assert got[0] == got[1] == sum(v / 2.0 for v in x.tolist())


@pytest.mark.parametrize(("n", "tenants", "grid"), [(5_000, 100, 0), (10_000, 200, 0),
                                                   (10_000, 200, 64)])
def test_the_ledger_kernel_keeps_the_python_loops_bits_on_a_burst_over_hundreds_of_tenants(
    n: int, tenants: int, grid: int,
) -> None:
    """The regime of the bench's burst, smaller: every task of 100-200 Zipf tenants
    submitted within one second, so that heads move far through the kernel's order of the
    backlogged tenants, most dispatches overtake a hundred of them, backlog periods end one
    by one and the guard fires at flagged tenants only; the Python loop's bits, and (without
    ties: on the grid the guard happens not to fire) a guard that changes decisions."""
    rng = np.random.default_rng(1)
    share = 1 / np.arange(1, tenants + 1)
    tenant = rng.choice(tenants, size=n, p=share / share.sum())
    duration = rng.exponential(1.0, n)
    submit = np.sort(rng.uniform(0.0, 1.0, n))
    if grid:  # ties: every submit on a grid of 1/grid s
        submit = np.floor(submit * grid) / grid
    table = TaskTable.from_frame(pl.DataFrame({
        "task_id": [f"t{i}" for i in range(n)],
        "tenant": [f"u{k:03d}" for k in tenant.tolist()],
        "task_type": "extract",
        "submit_s": submit,
        "duration_s": duration,
        "predicted_s": duration * rng.uniform(0.5, 1.5, n),
    }))
    kernel, python = both_engines(table, "boost-ledger", 4)
    assert_identical(kernel, python)
    lanes = simulate(table, make_policy("boost-lanes", table), 4, engine="kernel")
    assert grid or lanes.decisions.task.tobytes() != kernel.decisions.task.tobytes()
