"""Traces are refused with the offending column named; metrics match hand-worked values."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from desched.errors import DeschedError
from desched.metrics import RunArrays, jain, summarize
from desched.trace import DurationWithheld, TaskTable, read_trace, validate_trace
from tests.builders import T, make_frame


def good() -> pl.DataFrame:
    return make_frame(T("a", 0, 3), T("a", 0, 2), T("b", 1, 1))


def test_a_valid_trace_passes_and_keeps_extra_columns():
    frame = good().with_columns(pl.lit(3).alias("pages"), pl.lit("x").alias("colour"))
    out = validate_trace(frame)
    assert out.schema["pages"] == pl.Int32
    assert out["colour"].to_list() == ["x", "x", "x"]


@pytest.mark.parametrize("column", ["task_id", "tenant", "task_type", "submit_s", "duration_s"])
def test_a_trace_without_a_required_column_is_refused_naming_it(column):
    with pytest.raises(DeschedError, match=f"missing required column '{column}'"):
        validate_trace(good().drop(column), "t.parquet")


@pytest.mark.parametrize(
    ("column", "values", "message"),
    [
        ("duration_s", [3.0, 0.0, -1.0],
         r"'duration_s' must be finite and > 0 and <= 1e\+12; 2 row\(s\).*1, 2"),
        ("submit_s", [0.0, -5.0, 1.0], r"'submit_s' must be finite and >= 0.*row\(s\) 1"),
        ("submit_s", [0.0, 1e18, 1.0], r"'submit_s' must be finite and >= 0 and <= 1e\+12"),
        ("duration_s", [3.0, 2.0, 1e300], r"'duration_s' .* <= 1e\+12; 1 row\(s\).* 2$"),
        ("predicted_p50_s", [3.0, -1.0, float("nan")],
         r"'predicted_p50_s' must be finite and > 0 \(or NaN where absent\); 1 row\(s\).* 1$"),
        ("predicted_p90_s", [float("inf"), None, 2.0], r"'predicted_p90_s' .*first at row\(s\) 0$"),
        ("task_id", ["x", "y", "x"], r"'task_id' has duplicate ids \(e.g. 'x'\).*0, 2"),
        ("tenant", ["a", None, "b"], r"'tenant' has 1 null\(s\), first at row\(s\) 1"),
        ("duration_s", [3.0, float("nan"), 1.0], r"'duration_s' must be finite"),
        ("priority", [1.5, 0.0, float("nan")],
         r"^t.parquet: column 'priority' must hold integers; 2 row\(s\) do not, .* 0, 2$"),
        ("priority", [0, None, 1], r"'priority' must hold integers; 1 row\(s\).* 1$"),
        ("priority", ["1", "high", "2"], r"'priority' must hold integers; .*row\(s\) 1$"),
        ("task_id", ["x", "", "y"], r"'task_id' has 1 empty or blank value\(s\), .*row\(s\) 1$"),
        ("tenant", ["a", "b", " \t"], r"'tenant' has 1 empty or blank value\(s\).* 2$"),
    ],
)
def test_a_bad_trace_is_refused_naming_the_column_and_first_bad_rows(column, values, message):
    frame = good().with_columns(pl.Series(column, values))
    with pytest.raises(DeschedError, match=message):
        validate_trace(frame, "t.parquet")


def test_a_column_of_the_wrong_type_is_refused_naming_it():
    frame = good().with_columns(pl.Series("submit_s", ["0", "soon", "1"]))
    with pytest.raises(DeschedError, match="column 'submit_s' has type String"):
        validate_trace(frame)
    frame = good().with_columns(pl.Series("predicted_p90_s", ["a", "b", "c"]))
    with pytest.raises(DeschedError, match="column 'predicted_p90_s' has type String"):
        validate_trace(frame)


def test_a_boolean_or_a_time_where_seconds_are_due_is_refused_not_cast() -> None:
    """A cast would succeed and mean nothing: True as 1 s, a datetime as microseconds."""
    import datetime as dt

    cases = [
        ("duration_s", [True, True, False],
         "'duration_s' has type Boolean; give it as a number of seconds$"),
        ("submit_s", [dt.datetime(2026, 1, 1, 0, 0, s) for s in (0, 2, 6)],
         r"'submit_s' has type Datetime.*; give it as a number of seconds \(epoch seconds"),
        ("duration_s", [dt.timedelta(seconds=3)] * 3, "'duration_s' has type Duration"),
        ("predicted_s", [dt.date(2026, 1, 1)] * 3, "'predicted_s' has type Date"),
    ]
    for column, values, message in cases:
        frame = good().with_columns(pl.Series(column, values))
        with pytest.raises(DeschedError, match=message):
            validate_trace(frame, "t.parquet")
    # numbers given as integers or numeric strings still cast
    frame = good().with_columns(pl.Series("submit_s", [0, 1, 2]),
                                pl.Series("duration_s", ["1.5", "2", "3"]))
    assert validate_trace(frame)["duration_s"].to_list() == [1.5, 2.0, 3.0]


def test_an_integer_priority_passes_in_any_integer_or_integral_float_type() -> None:
    for values in ([2, -1, 0], [2.0, -1.0, 0.0], ["2", "-1", "0"]):
        frame = good().with_columns(pl.Series("priority", values))
        assert validate_trace(frame, "t.parquet")["priority"].cast(pl.Int64).to_list() == [2, -1, 0]


def test_absent_quantile_predictions_nan_or_null_pass() -> None:
    frame = good().with_columns(pl.Series("predicted_p50_s", [float("nan"), None, 4.0]))
    assert validate_trace(frame)["predicted_p50_s"].dtype == pl.Float64


def test_jain_index_holds_for_values_whose_squares_leave_the_float_range():
    assert jain([1e200, 1e200]) == 1.0
    assert jain([1e300, 1.0]) == pytest.approx(0.5)
    assert jain([3e160, 1e160, 2e160]) == pytest.approx(jain([3.0, 1.0, 2.0]))


def test_a_missing_or_unreadable_trace_file_names_the_file(tmp_path):
    with pytest.raises(DeschedError, match="no such trace file"):
        read_trace(tmp_path / "none.parquet")
    bad = tmp_path / "bad.parquet"
    bad.write_text("not parquet")
    with pytest.raises(DeschedError, match="bad.parquet: not a readable Parquet file"):
        read_trace(bad)
    # a valid file with two columns of one name: the column named, not "unreadable" (QA)
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"tenant": ["a"], "x": [1]}).append_column("tenant", pa.array(["b"]))
    pq.write_table(table, tmp_path / "dup.parquet")
    with pytest.raises(DeschedError, match=r"dup.parquet: column with name 'tenant' has more "
                                           r"than one occurrence; each column needs its own"):
        read_trace(tmp_path / "dup.parquet")


def test_jain_index_is_one_for_equal_shares_and_one_over_n_for_a_monopoly():
    assert jain(np.array([2.0, 2.0, 2.0])) == pytest.approx(1.0)
    assert jain(np.array([5.0, 0.0, 0.0, 0.0])) == pytest.approx(0.25)
    assert jain(np.array([1.0, 3.0])) == pytest.approx(16 / 20)
    assert math.isnan(jain(np.array([])))


def run(tenant, submit, duration, start):
    submit, duration, start = (np.array(x, dtype=float) for x in (submit, duration, start))
    return RunArrays(np.array(tenant), submit, duration, start, start + duration)


def test_summary_matches_a_hand_worked_two_tenant_run():
    # one worker: a0 runs [0,4), b0 waits 4 s and runs [4,6), a1 submitted at 1 runs [6,7)
    r = run(["a", "b", "a"], [0, 0, 1], [4, 2, 1], [0, 4, 6])
    s = summarize(r, workers=1, window_s=2.0)
    assert s.mean_wait_s == pytest.approx((0 + 4 + 5) / 3)
    assert s.mean_response_s == pytest.approx((4 + 6 + 6) / 3)
    assert s.mean_slowdown == pytest.approx((1 + 3 + 6) / 3)
    assert s.mean_bounded_slowdown == pytest.approx((1 + 1 + 1) / 3)
    assert s.utilization == pytest.approx(7 / 7)
    assert s.per_tenant["a"].mean_slowdown == pytest.approx(3.5)
    assert s.per_tenant["b"].service_s == pytest.approx(2.0)
    assert s.jain_slowdown == pytest.approx(jain(np.array([3.5, 3.0])))
    # windows [0,2) [2,4): a (task a1, queued [1,6)) is not backlogged over [0,2); b is
    # (queued [0,4)); over [2,4) both are: a received 2 s of service, b none -> lag 2
    assert [w.backlogged_tenants for w in s.windows][:2] == [1, 2]
    assert s.windows[1].service_lag_s == pytest.approx(2.0)
    assert s.max_service_lag_s == pytest.approx(2.0)


def test_service_lag_is_zero_when_backlogged_tenants_are_served_alike():
    # two workers, two tenants each with a steady queue, served in lockstep
    submit = [0.0] * 8
    start = [0, 0, 1, 1, 2, 2, 3, 3]
    r = run(["a", "b"] * 4, submit, [1.0] * 8, start)
    s = summarize(r, workers=2, window_s=1.0)
    assert s.max_service_lag_s == pytest.approx(0.0)
    assert s.jain_slowdown == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("predicted", "expected"),
    [
        ([], True),
        ([1.0, 2.0], True),
        ([1.0, math.nan], False),
        ([math.inf, 2.0], True),
        ([math.inf, -math.inf], True),  # a NaN sum without a NaN: the long way, still True
        ([math.inf, -math.inf, math.nan], False),
    ],
)
def test_has_predictions_is_false_exactly_when_a_prediction_is_nan(predicted, expected):
    n = len(predicted)
    table = TaskTable([f"t{i}" for i in range(n)], [0] * n, ["a"], [0.0] * n, [1.0] * n,
                      predicted)
    assert table.has_predictions is expected


def test_a_copied_task_table_is_equal_and_independent():
    table = TaskTable.from_frame(pl.DataFrame({
        "task_id": ["x", "y"], "tenant": ["b", "a"], "task_type": ["t", "t"],
        "submit_s": [0.0, 1.0], "duration_s": [2.0, 3.0], "predicted_s": [1.5, 2.5]}))
    copied = table.copy()
    assert copied == table
    copied.append("z", "c", 2.0, 4.0, 3.5)
    copied.predicted_s[0] = 9.0
    assert len(table) == 2 and table.tenant_names == ["b", "a"]
    assert table.predicted_s == [1.5, 2.5] and "c" not in table.tenant_index
    view = table.without_durations().copy()
    with pytest.raises(DurationWithheld):
        view.duration_s[0]


def test_group_means_sum_each_group_in_row_order_like_a_plain_loop() -> None:
    """``group_means`` over two keys: the groups in order of first appearance, each mean the
    bits of a plain loop summing in row order (polars' parallel group-by varies them)."""

    from desched.trace import group_means

    rng = np.random.default_rng(11)
    n = 50_000
    tenants = rng.choice(["a", "b", "c"], n).tolist()
    types = rng.choice(["x", "y"], n).tolist()
    values = (rng.lognormal(2.0, 2.5, n) * 1.000000001).tolist()
    totals: dict[tuple[str, str], float] = {}
    counts: dict[tuple[str, str], int] = {}
    for key in zip(tenants, types, strict=True):
        counts[key] = counts.get(key, 0) + 1
    for key, v in zip(zip(tenants, types, strict=True), values, strict=True):
        totals[key] = totals.get(key, 0.0) + v
    frame = pl.DataFrame({"tenant": tenants, "task_type": types, "d": values})
    got = group_means(frame, ["tenant", "task_type"], "d", "m")
    assert got.columns == ["tenant", "task_type", "m"]
    assert list(zip(got["tenant"], got["task_type"], strict=True)) == list(totals)
    assert got["m"].to_list() == [totals[k] / counts[k] for k in totals]
    # a null key is a group of its own, as in polars' group-by
    nulls = group_means(pl.DataFrame({"t": ["a", None, "a", None], "d": [1.0, 2.0, 3.0, 5.0]}),
                        ["t"], "d")
    assert nulls.rows() == [("a", 2.0), (None, 3.5)]
