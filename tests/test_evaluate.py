"""Policy evaluation: cells, intervals over seeds, drift series, the flow and the command."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from scipy import stats

from desched.bench.evaluate import (
    EvalCell,
    aggregate,
    cells_of,
    mean_ci,
    read_evaluation,
    run_cell,
    run_cells,
)
from desched.bench.specs import PolicySpec, TraceSpec, parse_seeds
from desched.cli import cli
from desched.errors import DeschedError
from desched.records import json_text
from desched.trace import write_trace
from desched.workloads import generate

SMALL = "flood?tasks=240&tenants=5"


def test_the_interval_of_values_with_a_known_spread_has_the_t_formula_half_width() -> None:
    # +1, -1, +1, -1, ...: mean 0, sample sd sqrt(n / (n - 1)) exactly
    for n in (2, 4, 10, 40):
        values = [(-1.0) ** i for i in range(n)]
        ci = mean_ci(values)
        expected = stats.t.ppf(0.975, n - 1) * math.sqrt(n / (n - 1)) / math.sqrt(n)
        assert ci.mean == pytest.approx(0.0, abs=1e-12)
        assert ci.half == pytest.approx(expected)
        assert ci.lo == pytest.approx(-expected) and ci.n == n


def test_the_interval_shrinks_as_seeds_are_added_and_covers_the_mean_about_95_percent() -> None:
    rng = np.random.default_rng(7)
    halves = [mean_ci(rng.normal(3.0, 2.0, n)).half for n in (5, 20, 80)]
    assert halves[0] > halves[1] > halves[2]
    covered = sum(
        ci.lo <= 3.0 <= ci.hi
        for ci in (mean_ci(rng.normal(3.0, 2.0, 5)) for _ in range(2000))
    )
    assert 0.93 <= covered / 2000 <= 0.97


def test_one_value_has_no_interval_and_equal_values_a_zero_one() -> None:
    assert math.isnan(mean_ci([4.0]).half) and mean_ci([4.0]).mean == 4.0
    assert mean_ci([2.0, 2.0, 2.0]).half == 0.0
    assert mean_ci([math.nan, 1.0, 3.0]).n == 2


def test_a_cell_has_the_whole_run_metrics_and_a_series_of_windows() -> None:
    cell = run_cell(SMALL, "ifs-memoryless", seed=0, workers=3)
    assert cell.tasks == 240 and cell.trace_name == "flood"
    assert cell.params == {"w_backlog": 0.1, "w_wait": 0.9}
    assert len(cell.windows) >= 20
    for w in cell.windows:
        assert {"start_s", "end_s", "jain_slowdown", "service_lag_s"} <= set(w.model_dump())
    assert cell.window_jain_min <= cell.window_jain_mean <= 1.0
    assert cell.max_service_lag_s >= cell.window_lag_mean_s >= 0.0
    assert "per_tenant" not in cell.model_dump() and "decisions_per_s" not in cell.model_dump()


def test_aggregate_gives_a_row_per_trace_and_policy_with_intervals_and_a_drift_series() -> None:
    cells = run_cells(cells_of([SMALL], ["ifs-memoryless", "fifo"], [0, 1, 2]), workers=3)
    rows = aggregate(cells, baseline="ifs-memoryless")
    assert [(r.trace, r.policy) for r in rows] == [(SMALL, "ifs-memoryless"), (SMALL, "fifo")]
    base, fifo = rows
    assert base.seeds == [0, 1, 2]
    bsld = [c.mean_bounded_slowdown for c in cells if c.policy_spec == "fifo"]
    assert fifo.metrics["mean_bounded_slowdown"].mean == pytest.approx(np.mean(bsld))
    assert fifo.metrics["mean_bounded_slowdown"].n == 3
    assert base.vs_baseline is not None and fifo.vs_baseline is not None
    assert base.vs_baseline["mean_wait_s"].mean == 0.0
    paired = np.mean([a.mean_wait_s - b.mean_wait_s for a, b in zip(cells[3:], cells[:3])])
    assert fifo.vs_baseline["mean_wait_s"].mean == pytest.approx(paired)
    series = base.windows
    assert len(series) >= 20 and series[0].window == 0
    assert series[0].jain_slowdown.n == 3
    assert all(s.start_s >= 0 for s in series)


def test_scenario_seeds_regenerate_the_workload() -> None:
    spec = TraceSpec.parse(SMALL)
    a, b = spec.materialize(0, 3), spec.materialize(1, 3)
    assert a.equals(spec.materialize(0, 3))
    assert not a["duration_s"].equals(b["duration_s"])


def test_file_seeds_are_disjoint_slices_shifted_to_zero(tmp_path: Path) -> None:
    path = write_trace(generate("steady", tasks=100, tenants=4, workers=2, seed=3),
                       tmp_path / "t.parquet")
    spec = TraceSpec.parse(f"{path}?slice_tasks=25")
    assert spec.slices() == 4
    first, second = spec.materialize(0, 2), spec.materialize(1, 2)
    assert first.height == second.height == 25
    assert set(first["task_id"]).isdisjoint(second["task_id"])
    assert first["submit_s"].min() == second["submit_s"].min() == 0.0
    with pytest.raises(DeschedError, match="past its last slice"):
        spec.materialize(4, 2)
    whole = TraceSpec.parse(f"{path}?slice_tasks=1000")  # more than the trace's 100 tasks
    assert whole.slices() == 0
    with pytest.raises(DeschedError, match=r"fewer tasks than one slice of 1000; give smaller "
                                           r"slices \('.*t.parquet\?slice_tasks=N'\)"):
        whole.materialize(0, 2)


def test_a_file_slice_with_a_load_is_rescaled_to_that_offered_load(tmp_path: Path) -> None:
    path = write_trace(generate("steady", tasks=200, tenants=4, workers=2, seed=3),
                       tmp_path / "t.parquet")
    part = TraceSpec.parse(f"{path}?slice_tasks=100&load=0.5").materialize(1, 4)
    offered = part.height / part["submit_s"].max() * part["duration_s"].mean() / 4
    assert offered == pytest.approx(0.5)


def test_a_spec_with_its_own_seeds_overrides_the_sweep_seeds() -> None:
    assert parse_seeds("0-2;9") == (0, 1, 2, 9)
    cells = cells_of([SMALL, f"{SMALL}&seeds=7-8"], ["fifo"], [0, 1, 2])
    assert [c[2] for c in cells] == [0, 1, 2, 7, 8]


@pytest.mark.parametrize(
    ("trace", "policy", "message"),
    [
        ("nowhere.parquet", "fifo", "neither a scenario"),
        ("flood?colour=red", "fifo", "unknown option 'colour'"),
        ("flood?seeds=3-1", "fifo", "not a range"),
        ("flood?tasks=1.5", "fifo", "tasks must be an integer, got '1.5'"),
        ("flood?load=high", "fifo", "load must be a number, got 'high'"),
        (SMALL, "no-such-policy", "unknown policy"),
        (SMALL, "ifs-memoryless?w_wait=-1", "w_wait"),
        (SMALL, "ifs-memoryless?weights=", "'weights' has no value"),  # was: no card, at defaults
        ("flood?tasks=", "fifo", "'tasks' has no value"),
        ("stedy?tasks=500", "fifo", "neither a scenario"),  # was: "unknown option 'tasks'"
    ],
)
def test_a_bad_trace_or_policy_spec_is_refused_with_a_one_line_error(
    trace: str, policy: str, message: str
) -> None:
    with pytest.raises(DeschedError, match=message) as info:
        cells_of([trace], [policy], [0])
    assert "\n" not in str(info.value)


def test_a_policy_spec_carries_its_parameters() -> None:
    spec = PolicySpec.parse("ifs-memoryless?w_wait=0.7&w_backlog=0.3")
    assert spec.name == "ifs-memoryless"
    assert dict(spec.params) == {"w_backlog": "0.3", "w_wait": "0.7"}


def test_the_evaluate_command_says_how_much_of_a_file_its_seeds_run(tmp_path: Path) -> None:
    # a file of 200 tasks is cut into 8 slices of 25 by default: seeds 0-1 run 50 of its 200
    # tasks, which nothing had said (a QA pass)
    trace = tmp_path / "t.parquet"
    generate("steady", tasks=200, tenants=4, seed=3).write_parquet(trace)
    result = CliRunner().invoke(cli, [
        "evaluate", "--traces", str(trace), "--policies", "fifo", "--seeds", "0-1",
        "--workers", "2", "--out", str(tmp_path / "ev")])
    assert result.exit_code == 0, result.output
    assert (f"note: trace '{trace}': each seed runs one disjoint slice of 25 consecutive tasks "
            "(8 slices in its 200); seeds 0, 1 run 50 of them") in result.stderr
    result = CliRunner().invoke(cli, [
        "evaluate", "--traces", f"{trace}?slice_tasks=100&seeds=1", "--policies", "fifo",
        "--workers", "2", "--out", str(tmp_path / "ev2")])
    assert result.exit_code == 0, result.output
    assert "slice of 100 consecutive tasks (2 slices in its 200); seed 1 runs 100" in (
        result.stderr)
    result = CliRunner().invoke(cli, [
        "evaluate", "--traces", "steady?tasks=50", "--policies", "fifo", "--seeds", "0",
        "--workers", "2", "--out", str(tmp_path / "ev3")])
    assert result.exit_code == 0 and "note:" not in result.stderr  # a scenario: no slices


def _no_nan(name: str) -> float:
    raise AssertionError(f"evaluation.json holds {name}, which is not JSON")


def test_the_evaluate_command_writes_the_table_the_drift_series_and_the_cells(
    tmp_path: Path,
) -> None:
    out = tmp_path / "ev"
    result = CliRunner().invoke(cli, [
        "evaluate", "--traces", SMALL, "--policies", "ifs-memoryless,ifs-counter",
        "--seeds", "0-1", "--workers", "3", "--out", str(out),
    ])
    assert result.exit_code == 0, result.output
    assert "| flood?tasks=240&tenants=5 | ifs-counter | 2 |" in result.output
    table = pl.read_parquet(out / "table.parquet")
    assert table.height == 2 and {"mean_bounded_slowdown_lo", "jain_slowdown_diff"} <= set(
        table.columns)
    drift = pl.read_parquet(out / "drift.parquet")
    assert {"window", "jain_slowdown_mean", "service_lag_s_hi"} <= set(drift.columns)
    saved = json.loads((out / "evaluation.json").read_text(), parse_constant=_no_nan)
    assert len(saved["cells"]) == 4 and len(saved["rows"]) == 2
    # same keys and order; a NaN read back from null is written as null again
    assert json_text(read_evaluation(out).model_dump()) == json_text(saved)
    again = CliRunner().invoke(cli, [
        "evaluate", "--traces", SMALL, "--policies", "fifo", "--seeds", "0", "--workers", "3",
        "--out", str(out)])
    assert again.exit_code == 2 and "folder is not empty (give --force" in again.output
    assert read_evaluation(out).settings["policies"] == ["ifs-memoryless", "ifs-counter"]
    assert all(isinstance(c, EvalCell) for c in read_evaluation(out).cells)


def test_the_evaluate_flow_runs_every_cell_on_the_task_runner_and_writes_its_files(
    prefect_harness: None, tmp_path: Path
) -> None:
    from desched.flows.evaluate import evaluate_policies

    result = evaluate_policies(
        traces=[SMALL], policies=["ifs-memoryless", "fifo"], seeds=[0, 1], workers=3,
        runner="thread", out=str(tmp_path / "flow"),
    )
    assert [r.policy for r in result.rows] == ["ifs-memoryless", "fifo"]
    assert result.rows[1].metrics["jain_slowdown"].n == 2
    assert result.rows[1].vs_baseline is not None
    assert Path(result.files["drift"]).is_file()


def test_an_absent_cluster_integration_is_a_one_line_error() -> None:
    pytest.importorskip("prefect")
    from desched.flows.evaluate import task_runner

    try:
        import prefect_dask  # noqa: F401
    except ImportError:
        with pytest.raises(DeschedError, match="prefect-dask"):
            task_runner("dask")
    else:
        pytest.skip("prefect-dask is installed")


def test_cells_run_on_spawned_processes_equal_the_cells_run_in_this_one() -> None:
    cells = cells_of([SMALL], ["ifs-memoryless", "fifo"], [0, 1])
    def as_text(results: list[EvalCell]) -> str:  # NaN != NaN, but not as text
        return json.dumps([r.model_dump() for r in results], sort_keys=True)

    assert as_text(run_cells(cells, workers=3, jobs=2)) == as_text(run_cells(cells, workers=3))


def test_a_load_that_cannot_be_applied_to_a_slice_is_refused_not_ignored(tmp_path: Path) -> None:
    frame = generate("steady", tasks=40, tenants=2, workers=2, seed=3)
    path = write_trace(frame.with_columns(pl.lit(5.0).alias("submit_s")), tmp_path / "z.parquet")
    spec = TraceSpec.parse(f"{path}?slice_tasks=20&load=0.9")
    with pytest.raises(DeschedError, match=r"slice 1 is submitted at one instant, so "
                                           r"load=0.9 cannot be applied"):
        spec.materialize(1, 2)
    assert TraceSpec.parse(f"{path}?slice_tasks=20").materialize(1, 2).height == 20
