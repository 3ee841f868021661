"""Staging of a raw batch: known columns cast to their types, and the context every rule reads.

``conform`` casts (recording the columns whose value did not convert), ``add_context`` adds
``prev_t``, ``seq_seen_before`` and ``task_seen_before`` given what earlier batches and runs of
the same log hold; ``desched.warehouse.rules`` then tests each row on its own. ``detail_expr``
writes a short human reason for each flagged row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import polars as pl

from desched.warehouse.rules import (
    COLUMN_TYPES,
    COMMON_COLUMNS,
    COMPLETION_REQUIRED,
    DECISION_REQUIRED,
    END_TOLERANCE_S,
    FINITE_COLUMNS,
    KEY_COLUMNS,
    NON_NEGATIVE_COLUMNS,
    Rule,
)


def conform(raw: pl.DataFrame) -> pl.DataFrame:
    """``raw`` with every known column cast to its type (absent ones null), NaN as null,
    ``bad_type_columns`` naming the columns whose value did not convert, and the other
    columns of the log unchanged after them."""
    values: list[pl.Expr] = []
    bad: list[pl.Expr] = []
    for name, dtype in COLUMN_TYPES.items():
        if name not in raw.columns:
            values.append(pl.lit(None, dtype).alias(name))
            continue
        source = raw.schema[name]
        col = pl.col(name)
        if source == dtype:
            value = col
        elif source == pl.Null:
            value = pl.lit(None, dtype)
        elif source.is_nested() or source == pl.Object or (
                dtype != pl.String and (source == pl.Boolean or source.is_temporal())):
            # a true/false worker or a timestamp for t would cast to 0/1 or to microseconds:
            # no number of the log's, so bad_type
            value = pl.lit(None, dtype)
            bad.append(pl.when(col.is_not_null()).then(pl.lit(name)))
        elif dtype == pl.String:
            value = col.cast(pl.String)
        else:
            if dtype.is_integer() and source.is_float():
                value = pl.when(col == col.floor()).then(col).cast(dtype, strict=False)
            else:
                value = col.cast(dtype, strict=False)
            bad.append(pl.when(col.is_not_null() & value.is_null()).then(pl.lit(name)))
        if dtype == pl.Float64:
            value = value.fill_nan(None)
        values.append(value.alias(name))
    bad_names = (
        pl.concat_str(bad, separator=",", ignore_nulls=True) if bad else pl.lit(None, pl.String)
    )
    extras = [c for c in raw.columns if c not in COLUMN_TYPES and c != "row_in_file"]
    return raw.select(
        pl.col("row_in_file"),
        *values,
        pl.when(bad_names != "").then(bad_names).otherwise(None).alias("bad_type_columns"),
        *extras,
    )


def add_context(
    typed: pl.DataFrame,
    last_t: float | None,
    seqs_seen: pl.Series | None,
    tasks_seen: pl.Series | None,
    decided_seen: pl.Series | None = None,
) -> pl.DataFrame:
    """``typed`` (from ``conform``) with ``prev_t``, ``seq_seen_before``,
    ``task_seen_before``, ``task_decided_before`` and ``earliest_end_s``, given the log's last
    ``t``, the ``seq``/``task_id`` values of this batch that earlier batches or runs of the
    same log already hold, and the completions' ``task_id`` values that a decision loaded
    earlier (this log or another) names."""
    completion = pl.col("kind") == "completion"
    task = pl.when(completion).then(pl.col("task_id"))
    seq_earlier = (~pl.col("seq").is_first_distinct()).cast(pl.Int64)
    if seqs_seen is not None and len(seqs_seen):
        seq_earlier = seq_earlier + pl.col("seq").is_in(seqs_seen.implode()).cast(pl.Int64)
    task_earlier = (~task.is_first_distinct()).cast(pl.Int64)
    if tasks_seen is not None and len(tasks_seen):
        task_earlier = task_earlier + pl.col("task_id").is_in(tasks_seen.implode()).cast(pl.Int64)
    prev_t = pl.col("t").shift(1).forward_fill()
    if last_t is not None:
        prev_t = prev_t.fill_null(last_t)
    row = pl.int_range(pl.len(), dtype=pl.Int64)
    first_decision = (
        pl.when(pl.col("kind") == "decision").then(row).otherwise(None).min().over("task_id")
    )
    decided = (first_decision < row).fill_null(False)
    if decided_seen is not None and len(decided_seen):
        decided = decided | pl.col("task_id").is_in(decided_seen.implode())
    end = pl.col("start_s") + pl.col("duration_s")
    return typed.with_columns(
        prev_t.alias("prev_t"),
        pl.when(pl.col("seq").is_not_null()).then(seq_earlier).alias("seq_seen_before"),
        pl.when(completion & pl.col("task_id").is_not_null())
        .then(task_earlier)
        .alias("task_seen_before"),
        pl.when(completion & pl.col("task_id").is_not_null())
        .then(decided.cast(pl.Int64))
        .alias("task_decided_before"),
        pl.when(completion)
        .then(end - END_TOLERANCE_S * (1.0 + end.abs()))
        .alias("earliest_end_s"),
    )


def _missing_list(columns: Sequence[str], when: pl.Expr | None = None) -> list[pl.Expr]:
    return [
        pl.when(pl.col(c).is_null() if when is None else (when & pl.col(c).is_null())).then(
            pl.lit(c)
        )
        for c in columns
    ]


def _values(columns: Sequence[str], test: Callable[[str], pl.Expr]) -> pl.Expr:
    """``col=value`` for each of ``columns`` where ``test`` holds, space-separated."""
    return pl.concat_str(
        [pl.when(test(c).fill_null(False)).then(pl.lit(f"{c}=") + pl.col(c).cast(pl.String))
         for c in columns],
        separator=" ",
        ignore_nulls=True,
    )


def detail_expr() -> pl.Expr:
    """A short reason per flagged row: which columns, which values."""
    completion = pl.col("kind") == "completion"
    missing = pl.concat_str(
        _missing_list(KEY_COLUMNS + COMMON_COLUMNS)
        + _missing_list(DECISION_REQUIRED, pl.col("kind") == "decision")
        + _missing_list(COMPLETION_REQUIRED, completion),
        separator=",",
        ignore_nulls=True,
    )
    parts = [
        pl.when(pl.col(Rule.BAD_TYPE.value)).then(
            pl.lit("bad type: ") + pl.col("bad_type_columns")
        ),
        pl.when(missing != "").then(pl.lit("null: ") + missing),
        pl.when(pl.col(Rule.UNKNOWN_KIND.value)).then(pl.lit("kind=") + pl.col("kind")),
        pl.when(pl.col(Rule.NON_FINITE_VALUE.value)).then(
            _values(FINITE_COLUMNS, lambda c: pl.col(c).is_infinite())
        ),
        pl.when(pl.col(Rule.NON_POSITIVE_DURATION.value)).then(
            pl.lit("duration_s=") + pl.col("duration_s").cast(pl.String)
        ),
        pl.when(pl.col(Rule.NEGATIVE_WAIT.value)).then(
            pl.lit("wait_s=") + pl.col("wait_s").cast(pl.String)
        ),
        pl.when(pl.col(Rule.NEGATIVE_AMOUNT.value)).then(
            _values(NON_NEGATIVE_COLUMNS, lambda c: pl.col(c) < 0)
        ),
        pl.when(pl.col(Rule.UNKNOWN_TASK_TYPE.value)).then(
            pl.lit("task_type=") + pl.col("task_type")
        ),
        pl.when(pl.col(Rule.UNKNOWN_STATUS.value)).then(pl.lit("status=") + pl.col("status")),
        pl.when(pl.col(Rule.TIME_OUT_OF_ORDER.value)).then(
            pl.lit("t=") + pl.col("t").cast(pl.String)
            + pl.lit(" before prev_t=") + pl.col("prev_t").cast(pl.String)
        ),
        pl.when(pl.col(Rule.START_BEFORE_SUBMIT.value)).then(
            pl.lit("start_s=") + pl.col("start_s").cast(pl.String)
            + pl.lit(" before submit_s=") + pl.col("submit_s").cast(pl.String)
        ),
        pl.when(pl.col(Rule.END_BEFORE_START.value)).then(
            pl.lit("t=") + pl.col("t").cast(pl.String)
            + pl.lit(" before start_s=") + pl.col("start_s").cast(pl.String)
        ),
        pl.when(pl.col(Rule.END_AFTER_CLOCK.value)).then(
            pl.lit("start_s+duration_s=")
            + (pl.col("start_s") + pl.col("duration_s")).cast(pl.String)
            + pl.lit(" after the record's clock t=") + pl.col("t").cast(pl.String)
        ),
        pl.when(pl.col(Rule.COMPLETION_WITHOUT_DECISION.value)).then(
            pl.lit("no decision for task ") + pl.col("task_id") + pl.lit(" before it")
        ),
        pl.when(pl.col("seq_seen_before") > 0).then(
            pl.lit("seq ") + pl.col("seq").cast(pl.String) + pl.lit(" seen before")
        ),
        pl.when(completion & (pl.col("task_seen_before") > 0)).then(
            pl.lit("task ") + pl.col("task_id") + pl.lit(" completed before")
        ),
    ]
    return pl.concat_str(parts, separator="; ", ignore_nulls=True).alias("detail")
