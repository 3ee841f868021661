"""The fast run metrics (desched.metrics) against their loop-by-loop twin (metrics_naive)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from desched import metrics_naive
from desched.errors import DeschedError
from desched.metrics import MAX_WINDOWS, RunArrays, _window_lags, summarize, window_edges


@st.composite
def runs(draw: st.DrawFn) -> tuple[RunArrays, float | None]:
    """A random finished run: tenants, submissions and waits on a coarse grid (so that many
    events share an instant), or continuous ones."""
    n = draw(st.integers(1, 60))
    tenants = draw(st.integers(1, 6))
    grid = draw(st.booleans())
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    tenant = np.array([f"t{k}" for k in rng.integers(0, tenants, n)])
    if grid:
        submit = rng.integers(0, 20, n).astype(float)
        wait = rng.integers(0, 6, n).astype(float)
        duration = rng.integers(1, 5, n).astype(float)
    else:
        submit = rng.uniform(0, 20, n) + 1000.0 * draw(st.integers(0, 3))
        wait = rng.exponential(3.0, n) * rng.integers(0, 2, n)
        duration = rng.exponential(2.0, n) + 1e-3
    start = submit + wait
    window = draw(st.one_of(st.none(), st.sampled_from([0.5, 1.0, 2.5, 7.0, 1e-4])))
    if draw(st.booleans()):  # tenants given as codes into the sorted names (runs.summary_of)
        names, codes = np.unique(tenant, return_inverse=True)
        return RunArrays(codes, submit, duration, start, start + duration, names), window
    return RunArrays(tenant, submit, duration, start, start + duration), window


def close(a: float, b: float, scale: float) -> bool:
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b), scale)


@settings(max_examples=300, deadline=None)
@given(runs())
def test_fast_summary_agrees_with_the_naive_twin(case: tuple[RunArrays, float | None]) -> None:
    run, window = case
    fast = summarize(run, workers=3, window_s=window).model_dump()
    naive = metrics_naive.summarize(run, workers=3, window_s=window).model_dump()
    assert fast.keys() == naive.keys()
    # prefix sums of times carry rounding of order eps x (sum of times): the tolerance scale
    scale = float(np.abs(run.end_s).max()) * run.end_s.size
    for key, value in naive.items():
        if key == "per_tenant":
            assert list(fast[key]) == list(value)
            for name, row in value.items():
                for field, x in row.items():
                    assert close(fast[key][name][field], x, 1.0), (name, field)
        elif key == "windows":
            assert len(fast[key]) == len(value)
            for got, want in zip(fast[key], value):
                assert got["tasks"] == want["tasks"]
                assert got["backlogged_tenants"] == want["backlogged_tenants"]
                assert got["start_s"] == want["start_s"] and got["end_s"] == want["end_s"]
                assert close(got["jain_slowdown"], want["jain_slowdown"], 1.0)
                assert close(got["service_lag_s"], want["service_lag_s"], scale)
        elif key == "max_service_lag_s":
            assert close(fast[key], value, scale)
        else:
            assert close(fast[key], value, 1.0), key


def test_windows_are_bounded_and_stated_whatever_the_request() -> None:
    # a 1-s burst served for 1,000 s: the default (span/20 = 0.05 s) would give 20,000 windows
    n = 2000
    rng = np.random.default_rng(3)
    submit = np.sort(rng.uniform(0, 1, n))
    duration = np.full(n, 0.5)
    start = 1.0 + 0.5 * np.arange(n)
    run = RunArrays(np.array([f"t{i % 7}" for i in range(n)]), submit, duration, start,
                    start + duration)
    for window in (None, 1e-6, 0.05):
        s = summarize(run, workers=1, window_s=window)
        assert s.windows_count == len(s.windows) <= MAX_WINDOWS
        assert s.window_s >= (run.end_s.max() - submit.min()) / MAX_WINDOWS
        assert s.windows[-1].end_s >= run.end_s.max()
    # a window longer than the bound is kept as asked
    s = summarize(run, workers=1, window_s=100.0)
    assert s.window_s == pytest.approx(100.0)
    assert s.windows_count == math.ceil((run.end_s.max() - submit.min()) / 100.0)


def test_a_window_that_is_not_a_positive_number_is_refused() -> None:
    x = np.array([0.0, 1.0])
    for bad in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(DeschedError, match="window_s must be a positive number"):
            window_edges(x, x + 1, bad)


def test_service_lags_do_not_depend_on_the_chunking(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(11)
    n = 400
    submit = rng.integers(0, 50, n).astype(float)
    start = submit + rng.integers(0, 30, n)
    duration = rng.integers(1, 4, n).astype(float)
    run = RunArrays(np.array([f"t{k}" for k in rng.integers(0, 5, n)]), submit, duration,
                    start, start + duration)
    names, codes = np.unique(run.tenant, return_inverse=True)
    edges = window_edges(run.submit_s, run.end_s, 1.0)
    whole = _window_lags(codes, names.size, run, edges, native=False)
    monkeypatch.setattr("desched.metrics.PAIR_CHUNK", 3)
    chunked = _window_lags(codes, names.size, run, edges, native=False)
    assert whole[1].sum() > 100
    assert [a.tobytes() for a in chunked] == [b.tobytes() for b in whole]


@st.composite
def crowded_runs(draw: st.DrawFn) -> tuple[RunArrays, float | None]:
    """Up to 3,000 tasks of up to 40 tenants served by a few workers long after they arrive
    (most tenants backlogged through most windows, as in a burst), at times up to 1e6 s, on
    a grid or continuous: prefix sums large enough that the extended precision rounds."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = draw(st.integers(2, 3000))
    tenants = draw(st.integers(1, 40))
    scale = draw(st.sampled_from([1.0, 1e3, 1e5]))
    offset = draw(st.sampled_from([0.0, 12345.678, 1e6]))
    if draw(st.booleans()):
        submit = np.sort(rng.integers(0, 20, n).astype(float)) * scale / 20 + offset
        duration = rng.integers(1, 5, n).astype(float) * scale / 100
    else:
        submit = np.sort(rng.uniform(0.0, scale, n)) + offset
        duration = rng.exponential(scale / 100, n) + 1e-3
    workers = draw(st.integers(1, 4))
    start = np.empty(n)
    free = np.full(workers, submit[0])
    for i in rng.permutation(n) if draw(st.booleans()) else range(n):
        w = int(np.argmin(free))
        start[i] = max(free[w], submit[i])
        free[w] = start[i] + duration[i]
    codes = rng.integers(0, tenants, n)
    names = np.array([f"t{k:02d}" for k in range(int(codes.max()) + 1)])
    window = draw(st.one_of(st.none(), st.sampled_from([scale / 50, scale / 7])))
    return RunArrays(codes, submit, duration, start, start + duration, names), window


@settings(max_examples=150, deadline=None)
@given(st.one_of(runs(), crowded_runs()))
def test_the_compiled_service_lags_are_the_numpy_loops_bit_for_bit(
    case: tuple[RunArrays, float | None],
) -> None:
    """``lags_kernel`` (x87 extended precision, one pass with pointers that go on from a
    tenant's previous busy run) against ``_window_lags``' numpy loop, its reference: every
    lag and count identical."""
    from desched.structures import lags_kernel

    if lags_kernel.window_lags() is None:
        pytest.skip("numpy's longdouble is not x87's here, or llvmlite is missing")
    run, window = case
    names, codes = run.tenant_codes()
    edges = window_edges(run.submit_s, run.end_s, window)
    compiled = _window_lags(codes, names.size, run, edges)
    reference = _window_lags(codes, names.size, run, edges, native=False)
    assert [a.tobytes() for a in compiled] == [b.tobytes() for b in reference]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 6), max_size=20), st.lists(st.integers(0, 6), max_size=20),
       st.booleans())
def test_decision_log_merge_order_is_the_stable_sort(
    decisions: list[int], completions: list[int], ordered: bool
) -> None:
    from desched.runs import merge_order

    if ordered:
        decisions, completions = sorted(decisions), sorted(completions)
    d = np.array(decisions, dtype=float)
    c = np.array(completions, dtype=float)
    rows = [(t, 1, j) for j, t in enumerate(decisions)]
    rows += [(t, 0, len(decisions) + j) for j, t in enumerate(completions)]
    want = [row[2] for row in sorted(rows)]
    assert merge_order(d, c).tolist() == want


@settings(max_examples=200, deadline=None)
@given(runs(), st.integers(0, 2**32 - 1))
def test_order_hints_and_paths_leave_every_metric_bit_identical(
    case: tuple[RunArrays, float | None], seed: int
) -> None:
    import dataclasses
    from unittest import mock

    run, window = case
    bare = summarize(run, workers=3, window_s=window).model_dump()
    rng = np.random.default_rng(seed)

    def any_sorting(values: np.ndarray) -> np.ndarray:
        # a sorting permutation that orders ties at random, as a run's decision order may
        return np.lexsort((rng.permutation(values.size), values)).astype(np.int64)

    hinted = dataclasses.replace(run, start_order=any_sorting(run.start_s),
                                 end_order=any_sorting(run.end_s))
    wrong = dataclasses.replace(run, start_order=rng.permutation(run.start_s.size),
                                end_order=np.arange(run.end_s.size)[::-1].copy())
    # the sort paths of the percentiles and of Jain's cells
    with mock.patch.multiple("desched.metrics", PARTITION_GROUPS=0, DENSE_CELLS=0,
                             DENSE_CELLS_PER_TASK=0):
        other_paths = summarize(hinted, workers=3, window_s=window).model_dump()
    for other in (summarize(hinted, workers=3, window_s=window).model_dump(),
                  summarize(wrong, workers=3, window_s=window).model_dump(), other_paths):
        assert json.dumps(other, allow_nan=True) == json.dumps(bare, allow_nan=True)



@settings(max_examples=300, deadline=None)
@given(st.one_of(runs(), crowded_runs()), st.booleans())
def test_busy_runs_from_sorted_submissions_and_starts_are_the_event_sorts(
    case: tuple[RunArrays, float | None], hint: bool,
) -> None:
    """``_busy_runs`` (each tenant's sorted submissions against its sorted starts) finds the
    very intervals, in the same order, as ``busy_runs_by_events`` (the 2n events sorted by
    tenant and time, counted): zero waits, shared instants, tenants with one task."""
    from desched.metrics import _busy_runs, busy_runs_by_events

    run, _ = case
    _, codes = run.tenant_codes()
    order = np.argsort(run.start_s, kind="stable") if hint else None
    fast = _busy_runs(codes, run.submit_s, run.start_s, order)
    reference = busy_runs_by_events(codes, run.submit_s, run.start_s, order)
    for a, b in zip(fast, reference, strict=True):
        assert a.dtype == b.dtype
        assert np.array_equal(a, b)


def test_busy_runs_of_a_start_before_its_submission_go_to_the_reference() -> None:
    from desched.metrics import _busy_runs, busy_runs_by_events

    codes = np.array([0, 0, 1], dtype=np.int64)
    submit = np.array([1.0, 2.0, 0.0])
    start = np.array([3.0, 1.5, math.nan])
    fast = _busy_runs(codes, submit, start)
    reference = busy_runs_by_events(codes, submit, start)
    for a, b in zip(fast, reference, strict=True):
        assert np.array_equal(a, b, equal_nan=True)


def test_a_trace_submitted_at_one_instant_gets_the_shortest_windows_not_one() -> None:
    # It got one window, the whole run, so its service lag was 0 whatever the policy did,
    # while a millisecond of submission span gave 1,000 windows (a QA pass).
    submit = np.zeros(400)
    end = np.linspace(1.0, 268.0, 400)
    edges = window_edges(submit, end, None)
    assert len(edges) - 1 == MAX_WINDOWS
    nearly = submit.copy()
    nearly[-1] = 1e-3
    assert np.allclose(window_edges(nearly, end, None), edges)
