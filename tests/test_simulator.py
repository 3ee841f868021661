"""The simulator's own bookkeeping, checked against direct counts and hand-worked runs."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from desched.errors import DeschedError
from desched.policies import make_policy
from desched.simulator import simulate
from tests.builders import T, make_tasks, workloads


@settings(max_examples=150, deadline=None)
@given(tasks=workloads(), workers=st.integers(1, 4), name=st.sampled_from(["fifo", "vtc"]))
def test_logged_queue_length_and_tenant_backlog_equal_a_direct_count(tasks, workers, name):
    result = simulate(tasks, make_policy(name, tasks), workers)
    d = result.decisions
    started: set[int] = set()
    for j, i in enumerate(d.task):
        t = d.t[j]
        queued = [x for x in range(len(tasks)) if tasks.submit_s[x] <= t and x not in started]
        assert i in queued
        assert d.queue_len[j] == len(queued)
        same_tenant = [x for x in queued if tasks.tenant[x] == tasks.tenant[i]]
        assert d.tenant_backlog[j] == len(same_tenant)
        assert d.t[j] == result.start_s[i] and d.worker[j] == result.worker[i]
        started.add(i)


def test_completions_free_workers_before_arrivals_join_and_the_lowest_idle_worker_polls():
    # worker 0 finishes a0 at t=2 exactly when b0 arrives; worker 1 is idle from t=1.
    tasks = make_tasks(T("a", 0, 2), T("c", 0, 1), T("b", 2, 1), T("b", 2, 1))
    result = simulate(tasks, make_policy("fifo", tasks), workers=2)
    assert list(result.start_s) == [0.0, 0.0, 2.0, 2.0]
    assert list(result.worker) == [0, 1, 0, 1]
    assert list(result.decisions.queue_len) == [2, 1, 2, 1]


def test_a_single_worker_serves_back_to_back_without_gaps():
    tasks = make_tasks(T("a", 0, 3), T("a", 1, 2), T("b", 1, 1))
    result = simulate(tasks, make_policy("fifo", tasks), workers=1)
    assert list(result.start_s) == [0.0, 3.0, 5.0]
    assert list(result.end_s) == [3.0, 5.0, 6.0]


def test_a_trace_column_named_like_a_log_column_is_kept_under_a_trace_prefix(tmp_path):
    import polars as pl

    from desched.runs import write_run
    from tests.builders import make_frame

    frame = make_frame(T("a", 0, 3), T("b", 1, 1)).with_columns(
        pl.Series("status", [1, 5]), pl.Series("pages", [2, 9])
    )
    tasks = make_tasks(T("a", 0, 3), T("b", 1, 1))
    policy = make_policy("fifo", tasks)
    write_run(tmp_path, frame, simulate(tasks, policy, 1), components=(), params={}, seed=0)
    log = pl.read_parquet(tmp_path / "decision-log.parquet")
    done = log.filter(pl.col("kind") == "completion").sort("task_id")
    assert done["status"].to_list() == ["ok", "ok"]
    assert done["trace_status"].to_list() == [1, 5]
    assert done["pages"].to_list() == [2, 9]


def test_a_run_folder_holds_exactly_the_files_run_files_names(tmp_path):
    from desched.runs import RUN_FILES, write_run
    from tests.builders import make_frame

    frame = make_frame(T("a", 0, 3), T("b", 1, 1))
    tasks = make_tasks(T("a", 0, 3), T("b", 1, 1))
    result = simulate(tasks, make_policy("fifo", tasks), 1)
    write_run(tmp_path / "with", frame, result, components=(), params={}, seed=0)
    write_run(tmp_path / "without", frame, result, components=(), params={}, seed=0,
              decision_log=False)
    assert sorted(p.name for p in (tmp_path / "with").iterdir()) == sorted(RUN_FILES)
    assert sorted(p.name for p in (tmp_path / "without").iterdir()) == sorted(
        set(RUN_FILES) - {"decision-log.parquet"})


def test_runs_in_separate_processes_with_different_hash_seeds_decide_identically(tmp_path):
    import os
    import subprocess
    import sys

    import polars as pl

    from desched.trace import write_trace
    from desched.workloads import generate

    trace = write_trace(generate("flood", tasks=1500, tenants=6, seed=3), tmp_path / "t.parquet")
    for policy in ("vtc", "ifs-counter", "round-robin"):
        frames = []
        for hash_seed in ("1", "2"):
            out = tmp_path / f"{policy}-{hash_seed}"
            subprocess.run(
                [sys.executable, "-m", "desched.cli", "simulate", "--trace", str(trace),
                 "--policy", policy, "--workers", "3", "--out", str(out)],
                check=True, capture_output=True, env={**os.environ, "PYTHONHASHSEED": hash_seed},
            )
            frames.append(pl.read_parquet(out / "decisions.parquet"))
        assert frames[0].equals(frames[1]), policy


@pytest.mark.parametrize("engine", ["python", "auto"])
@pytest.mark.parametrize(("column", "value"), [("duration_s", math.inf), ("duration_s", math.nan),
                                               ("duration_s", -1.0), ("submit_s", math.inf),
                                               ("submit_s", math.nan)])
def test_a_table_a_run_cannot_end_on_is_refused_by_name(engine: str, column: str,
                                                        value: float) -> None:
    """A hand-built table with an infinite duration hung the Python loop's heap and made the
    kernel read past its own (a QA pass); NaN never ended."""
    from desched.trace import TaskTable

    table = TaskTable(task_id=["a", "b", "c"], tenant=[0, 0, 1], tenant_names=["x", "y"],
                      submit_s=[0.0, 1.0, 2.0], duration_s=[5.0, 4.0, 3.0],
                      predicted_s=[5.0, 4.0, 3.0])
    getattr(table, column)[1] = value
    with pytest.raises(DeschedError, match=r"task 'b' \(position 1\)"):
        simulate(table, make_policy("sjf-predicted", table), 2, engine=engine)  # type: ignore[arg-type]
