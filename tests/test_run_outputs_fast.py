"""The fast paths of a simulation's outputs against their references: the decision log built
from arrays equals the one merged from the record frames, whatever the trace's columns, ties
and engine; the trace's id check by hashes answers as counting the ids does."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from desched.policies import make_policy
from desched.runs import (
    completion_order,
    completions_frame,
    decision_log_frame,
    decision_log_from_arrays,
    decisions_frame,
    tasks_frame,
)
from desched.simulator import simulate
from desched.trace import TaskTable

POLICIES = ("fifo", "ifs-memoryless", "vtc", "guarded-sjf")


@st.composite
def traces(draw: st.DrawFn) -> pl.DataFrame:
    """A small trace on a coarse grid (equal submits, ends and decision instants are common),
    with optional predictions, memory, and feature columns, some named like log columns."""
    n = draw(st.integers(1, 40))
    tenants = draw(st.integers(1, 5))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    frame = pl.DataFrame({
        "task_id": [f"id{i}" for i in rng.permutation(n)],
        "tenant": [f"t{k}" for k in rng.integers(0, tenants, n)],
        "task_type": rng.choice(["extract", "embed", "ocr_clean"], n).tolist(),
        "submit_s": np.sort(rng.integers(0, 12, n)).astype(float) / 2,
        "duration_s": rng.integers(1, 6, n).astype(float) / 2,
        "predicted_s": rng.integers(1, 6, n).astype(float) / 2,
    })
    if not draw(st.booleans()):
        frame = frame.sample(fraction=1.0, shuffle=True, seed=int(rng.integers(1 << 30)))
    extra = draw(st.sets(st.sampled_from(["mem_mb", "pages", "status", "kind", "score",
                                          "label", "doc_bytes"])))
    for name in sorted(extra):
        if name in ("mem_mb", "score"):
            frame = frame.with_columns(pl.Series(name, rng.uniform(1, 9, n)))
        elif name == "label":
            values = [None if x < 0.3 else f"l{x:.1f}" for x in rng.uniform(0, 1, n)]
            frame = frame.with_columns(pl.Series(name, values, dtype=pl.String))
        else:
            frame = frame.with_columns(pl.Series(name, rng.integers(0, 9, n)))
    return frame


@settings(max_examples=150, deadline=None)
@given(traces(), st.sampled_from(POLICIES), st.integers(1, 4),
       st.sampled_from(["auto", "python"]))
def test_the_decision_log_from_arrays_equals_the_merged_record_frames(
    trace: pl.DataFrame, name: str, workers: int, engine: str
) -> None:
    tasks = TaskTable.from_frame(trace)
    policy = make_policy(name, tasks)
    result = simulate(tasks, policy, workers, engine=engine)  # type: ignore[arg-type]
    run_tasks = tasks_frame(trace, result)
    decisions = decisions_frame(trace, result, policy.components)
    want = decision_log_frame(decisions, completions_frame(run_tasks))
    got = decision_log_from_arrays(run_tasks, decisions, result, completion_order(result))
    assert got.schema == want.schema
    assert got.equals(want, null_equal=True)


def test_a_trace_column_named_like_a_component_mixes_both_kinds_as_the_reference_does() -> None:
    trace = pl.DataFrame({
        "task_id": ["a", "b", "c"], "tenant": ["x", "y", "x"], "task_type": ["e", "e", "e"],
        "submit_s": [0.0, 0.0, 1.0], "duration_s": [1.0, 2.0, 1.0],
        "norm_wait": [7, 8, 9],
    })
    tasks = TaskTable.from_frame(trace)
    policy = make_policy("ifs-memoryless", tasks)
    result = simulate(tasks, policy, 2)
    run_tasks = tasks_frame(trace, result)
    decisions = decisions_frame(trace, result, policy.components)
    got = decision_log_from_arrays(run_tasks, decisions, result, completion_order(result))
    assert got.equals(decision_log_frame(decisions, completions_frame(run_tasks)))
    assert got["norm_wait"].dtype == pl.Float64


def test_completions_are_listed_by_end_time_then_worker() -> None:
    # two workers end at 2.0 together; worker 0's task is later in the trace
    trace = pl.DataFrame({
        "task_id": ["a", "b", "c"], "tenant": ["x", "y", "x"], "task_type": ["e", "e", "e"],
        "submit_s": [0.0, 0.0, 0.0], "duration_s": [2.0, 2.0, 1.0],
    })
    tasks = TaskTable.from_frame(trace)
    result = simulate(tasks, make_policy("sjf-oracle", tasks), 2)
    order = completion_order(result)
    end = np.frombuffer(result.end_s, dtype=np.float64)[order]
    worker = np.frombuffer(result.worker, dtype=np.int32)[order]
    assert list(zip(end.tolist(), worker.tolist())) == sorted(zip(end.tolist(),
                                                                 worker.tolist()))
    assert not math.isnan(end.sum())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=3), max_size=30))
def test_ids_are_distinct_by_hash_exactly_when_they_are_by_count(ids: list[str]) -> None:
    from desched.trace import all_distinct

    column = pl.Series("task_id", ids, dtype=pl.String)
    assert all_distinct(column) == (column.n_unique() == len(ids))


def test_a_hash_collision_does_not_refuse_distinct_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    from desched.trace import all_distinct

    monkeypatch.setattr(pl.Series, "hash", lambda self, *a, **k: pl.Series([7] * self.len()))
    assert all_distinct(pl.Series(["a", "b", "c"]))
    assert not all_distinct(pl.Series(["a", "b", "a"]))


def test_a_trace_column_named_like_a_run_column_is_kept_renamed_not_replaced() -> None:
    """A run's tasks.parquet simulated again carries start_s, worker, ...: the run's own
    columns take the names, the trace's keep their values as trace_<name> (QA: they were
    overwritten)."""
    trace = pl.DataFrame({
        "task_id": ["a", "b"], "tenant": ["x", "y"], "task_type": ["e", "e"],
        "submit_s": [0.0, 0.0], "duration_s": [1.0, 2.0],
        "start_s": [5.0, 6.0], "worker": [7, 8], "trace_worker": [9, 9],
    })
    tasks = TaskTable.from_frame(trace)
    result = simulate(tasks, make_policy("fifo", tasks), 2)
    out = tasks_frame(trace, result)
    assert out["trace_start_s"].to_list() == [5.0, 6.0]
    assert out["trace_trace_worker"].to_list() == [7, 8]  # trace_worker was taken
    assert out["trace_worker"].to_list() == [9, 9]
    assert out["start_s"].to_list() == [0.0, 0.0]
    assert sorted(out["worker"].to_list()) == [0, 1]


@settings(max_examples=80, deadline=None)
@given(traces(), st.lists(st.text(min_size=1, max_size=3), min_size=1, max_size=6,
                          unique=True))
def test_a_summary_from_the_kernels_tenant_codes_is_the_one_from_the_names(
    trace: pl.DataFrame, alphabet: list[str]
) -> None:
    """``summary_of`` given the tenant names and codes of the kernel's inputs (names in order
    of first appearance, any text) writes the summary it finds from the names itself."""
    from desched.controls import kernel_inputs
    from desched.runs import summary_of

    names = trace["tenant"].unique(maintain_order=True).to_list()
    rename = {old: alphabet[k % len(alphabet)] + str(k) for k, old in enumerate(names)}
    trace = trace.with_columns(pl.col("tenant").replace_strict(rename))
    tasks = TaskTable.from_frame(trace)
    result = simulate(tasks, make_policy("fifo", tasks), 2)
    run_tasks = tasks_frame(trace, result)
    inputs = kernel_inputs(trace, None)
    assert inputs is not None
    given_codes = summary_of(run_tasks, result, params={}, seed=0,
                             tenants=(inputs.tenant_names, inputs.tenant))
    found = summary_of(run_tasks, result, params={}, seed=0)
    assert given_codes.model_dump_json() == found.model_dump_json()  # NaN where no tasks
    assert list(given_codes.per_tenant) == sorted(rename.values())
