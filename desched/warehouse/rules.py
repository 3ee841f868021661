"""The rules every decision-log record keeps, and their polars form, which routes every row.

A staged batch (``desched.warehouse.staging.conform`` then ``add_context``) has the decision-log
columns cast to their types plus four context columns computed over the whole log:
``bad_type_columns`` (names of the columns whose raw value did not convert, else null),
``prev_t`` (``t`` of the previous record of the same log), ``seq_seen_before`` and
``task_seen_before`` (how many earlier records of the log carry the same ``seq``, or the same
``task_id`` among completions), ``task_decided_before`` (1 when a decision record for a
completion's task came before it, in this log or an earlier-loaded one, else 0) and
``earliest_end_s`` (a completion's ``start_s + duration_s`` less float rounding). Every rule is
then a row-local test, and each one exists in two forms that must agree row for row:

- ``rule_exprs`` (here): one boolean expression per rule, computed by polars in one pass; it
  routes every row (linear, about 0.1 s per million rows);
- ``desched.warehouse.audit.build_suite``: the same rules as Great Expectations expectations,
  the contract an analyst can read and re-run, and the independent check that the engine keeps
  to it (``GxAuditor``).

Null handling matches GX's: a null value breaks ``missing_key``/``missing_value`` only; the
other rules ignore nulls. An empty or blank ``task_id`` or ``tenant`` is a ``missing_key`` too. A value that does not convert is both ``bad_type`` and missing.

Beyond types, the rules hold what a discrete-event simulation (or the live service) cannot
produce: an infinite time or amount, a duration <= 0, a negative wait, queue length or memory,
a record whose clock ``t`` runs backwards, a start before the submission, a completion reported
before its start (``t < start_s``) or before its own end (``start_s + duration_s > t``: no
timestamp later than the clock of the record that reports it), a completion whose task no
decision leased before it, a status other than ``ok``/``failed``, and an id seen twice.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

import polars as pl

from desched.errors import DeschedError


class Rule(StrEnum):
    """Why a row or a whole file is in quarantine. Row rules are listed in precedence order:
    a row that breaks several is filed under the first, with all of them in ``rules``."""

    MALFORMED_RECORD = "malformed_record"
    BAD_TYPE = "bad_type"
    MISSING_KEY = "missing_key"
    UNKNOWN_KIND = "unknown_kind"
    MISSING_VALUE = "missing_value"
    NON_FINITE_VALUE = "non_finite_value"
    NON_POSITIVE_DURATION = "non_positive_duration"
    NEGATIVE_WAIT = "negative_wait"
    NEGATIVE_AMOUNT = "negative_amount"
    UNKNOWN_TASK_TYPE = "unknown_task_type"
    UNKNOWN_STATUS = "unknown_status"
    TIME_OUT_OF_ORDER = "time_out_of_order"
    START_BEFORE_SUBMIT = "start_before_submit"
    END_BEFORE_START = "end_before_start"
    END_AFTER_CLOCK = "end_after_clock"
    COMPLETION_WITHOUT_DECISION = "completion_without_decision"
    DUPLICATE_ID = "duplicate_id"
    # whole-file rules
    TRUNCATED_FILE = "truncated_file"
    UNREADABLE_FILE = "unreadable_file"
    MISSING_COLUMN = "missing_column"


ROW_RULES: tuple[Rule, ...] = (
    Rule.BAD_TYPE,
    Rule.MISSING_KEY,
    Rule.UNKNOWN_KIND,
    Rule.MISSING_VALUE,
    Rule.NON_FINITE_VALUE,
    Rule.NON_POSITIVE_DURATION,
    Rule.NEGATIVE_WAIT,
    Rule.NEGATIVE_AMOUNT,
    Rule.UNKNOWN_TASK_TYPE,
    Rule.UNKNOWN_STATUS,
    Rule.TIME_OUT_OF_ORDER,
    Rule.START_BEFORE_SUBMIT,
    Rule.END_BEFORE_START,
    Rule.END_AFTER_CLOCK,
    Rule.COMPLETION_WITHOUT_DECISION,
    Rule.DUPLICATE_ID,
)
"""Rules checked on a staged batch, in precedence order (``malformed_record`` is found by the
reader, before a row exists)."""

IGNORED_KINDS = ("cancel",)
"""Record kinds the decision log may hold that ingestion accepts and loads into no table: a
task's cancellation by its tenant (``desched.service.decision_log``)."""
LOG_KINDS = ("decision", "completion", *IGNORED_KINDS)
KEY_COLUMNS = ("kind", "seq", "task_id", "tenant")
COMMON_COLUMNS = ("t", "worker")
DECISION_REQUIRED = ("policy", "score", "queue_len", "tenant_backlog", "wait_s")
COMPLETION_REQUIRED = ("task_type", "submit_s", "start_s", "duration_s", "status")
FINITE_COLUMNS = ("t", "submit_s", "start_s", "duration_s", "wait_s", "peak_mem_mb")
"""Times and amounts that must be finite (an infinite one is ``non_finite_value``)."""
NON_NEGATIVE_COLUMNS = ("queue_len", "tenant_backlog", "peak_mem_mb")
"""Counts and amounts that cannot be negative (``negative_amount``)."""
COMPLETION_STATUSES = ("ok", "failed")
"""The outcomes a completion record may carry (``desched.runs``, the live service)."""
END_TOLERANCE_S = 1e-6
"""Float rounding allowed between ``start_s + duration_s`` and a completion's ``t``."""
FILE_REQUIRED = KEY_COLUMNS + COMMON_COLUMNS
"""Columns a Parquet log must have; a file without one is quarantined whole
(``missing_column``). Per-kind columns may be absent: a file of completions only is fine."""

COLUMN_TYPES: dict[str, pl.DataType] = {
    "kind": pl.String(),
    "seq": pl.Int64(),
    "t": pl.Float64(),
    "worker": pl.Int64(),
    "task_id": pl.String(),
    "tenant": pl.String(),
    "policy": pl.String(),
    "score": pl.Float64(),
    "queue_len": pl.Int64(),
    "tenant_backlog": pl.Int64(),
    "wait_s": pl.Float64(),
    "task_type": pl.String(),
    "submit_s": pl.Float64(),
    "start_s": pl.Float64(),
    "duration_s": pl.Float64(),
    "status": pl.String(),
    "peak_mem_mb": pl.Float64(),
}
"""Every decision-log column the warehouse knows, with its type (``desched.runs``)."""

CONTEXT_COLUMNS: dict[str, pl.DataType] = {
    "bad_type_columns": pl.String(),
    "prev_t": pl.Float64(),
    "seq_seen_before": pl.Int64(),
    "task_seen_before": pl.Int64(),
    "task_decided_before": pl.Int64(),
    "earliest_end_s": pl.Float64(),
}

KNOWN_TASK_TYPES: tuple[str, ...] = ("ocr_clean", "extract", "classify", "embed", "unknown")
"""The DES task types, plus ``unknown``, which ``desched.swf`` gives a job with neither
executable nor queue."""
TASK_TYPE_PATTERNS: tuple[str, ...] = (r"app\d+", r"q\d+")
"""Task types of imported SWF traces: ``app{executable}``, ``q{queue}`` (``desched.swf``)."""


@dataclass(frozen=True)
class TaskTypes:
    """The task types a completion may name: exact ``names`` or a full match of a pattern."""

    names: tuple[str, ...] = KNOWN_TASK_TYPES
    patterns: tuple[str, ...] = TASK_TYPE_PATTERNS

    @property
    def regex(self) -> str:
        """One anchored regex, the same for polars (Rust regex) and GX (Python ``re``)."""
        parts = [re.escape(n) for n in self.names] + [f"(?:{p})" for p in self.patterns]
        return "^(?:" + "|".join(parts) + ")$" if parts else "^$"

    @classmethod
    def parse(cls, spec: str | None) -> TaskTypes:
        """From a comma-separated list whose items are names or ``re:``-prefixed patterns;
        ``None`` or an empty string gives the defaults."""
        if not spec:
            return cls()
        names, patterns = [], []
        for item in (s.strip() for s in spec.split(",")):
            if not item:
                continue
            if item.startswith("re:"):
                pattern = item[3:]
                try:
                    re.compile(pattern)
                except re.error as exc:
                    raise DeschedError(f"task type pattern {pattern!r}: {exc}") from None
                patterns.append(pattern)
            else:
                names.append(item)
        return cls(tuple(names), tuple(patterns))


NAMED_KEYS = ("task_id", "tenant")
"""Key columns that hold names: empty or blank is as missing as null (the trace validator
refuses them, so a row ingested with one could not be trained on)."""
BLANK = r"^\s*$"


def _is(kind: str) -> pl.Expr:
    return pl.col("kind") == kind


def _any_null(columns: Iterable[str]) -> pl.Expr:
    return pl.any_horizontal([pl.col(c).is_null() for c in columns])


def _present(column: str) -> pl.Expr:
    """Neither null nor NaN: pandas, and so GX, reads NaN as missing (a completion's
    ``earliest_end_s`` is NaN when its duration is infinite: inf - inf)."""
    return pl.col(column).is_not_null() & pl.col(column).is_not_nan()


def _before(a: str, b: str) -> pl.Expr:
    """``a < b`` where both are present (GX's pair test with ``either_value_is_missing``)."""
    return _present(a) & _present(b) & (pl.col(a) < pl.col(b))


def rule_exprs(task_types: TaskTypes) -> dict[Rule, pl.Expr]:
    """One boolean expression per row rule, true where the row breaks it, never null."""
    completion = _is("completion")
    exprs = {
        Rule.BAD_TYPE: pl.col("bad_type_columns").is_not_null(),
        Rule.MISSING_KEY: _any_null(KEY_COLUMNS) | pl.any_horizontal(
            [pl.col(c).str.contains(BLANK).fill_null(False) for c in NAMED_KEYS]),
        Rule.UNKNOWN_KIND: pl.col("kind").is_not_null() & ~pl.col("kind").is_in(LOG_KINDS),
        Rule.MISSING_VALUE: _any_null(COMMON_COLUMNS)
        | (_is("decision") & _any_null(DECISION_REQUIRED))
        | (completion & _any_null(COMPLETION_REQUIRED)),
        Rule.NON_FINITE_VALUE: pl.any_horizontal(
            [pl.col(c).is_infinite().fill_null(False) for c in FINITE_COLUMNS]
        ),
        Rule.NON_POSITIVE_DURATION: completion
        & pl.col("duration_s").is_not_null()
        & (pl.col("duration_s") <= 0),
        Rule.NEGATIVE_WAIT: _is("decision") & (pl.col("wait_s") < 0).fill_null(False),
        Rule.NEGATIVE_AMOUNT: pl.any_horizontal(
            [(pl.col(c) < 0).fill_null(False) for c in NON_NEGATIVE_COLUMNS]
        ),
        Rule.UNKNOWN_TASK_TYPE: completion
        & pl.col("task_type").is_not_null()
        & ~pl.col("task_type").str.contains(task_types.regex),
        Rule.UNKNOWN_STATUS: completion
        & pl.col("status").is_not_null()
        & ~pl.col("status").is_in(COMPLETION_STATUSES),
        Rule.TIME_OUT_OF_ORDER: _before("t", "prev_t"),
        Rule.START_BEFORE_SUBMIT: completion & _before("start_s", "submit_s"),
        Rule.END_BEFORE_START: completion & _before("t", "start_s"),
        Rule.END_AFTER_CLOCK: completion & _before("t", "earliest_end_s"),
        Rule.COMPLETION_WITHOUT_DECISION: completion & (pl.col("task_decided_before") < 1),
        Rule.DUPLICATE_ID: (pl.col("seq_seen_before") > 0)
        | (completion & (pl.col("task_seen_before") > 0)),
    }
    return {rule: expr.fill_null(False).alias(rule.value) for rule, expr in exprs.items()}


def first_rule_and_all(masks: pl.DataFrame) -> pl.DataFrame:
    """``rule`` (the first broken rule in precedence order, null when none) and ``rules``
    (every broken rule, comma-separated) of each row of ``masks``."""
    names = [r.value for r in ROW_RULES]
    first = pl.coalesce([pl.when(pl.col(n)).then(pl.lit(n)) for n in names])
    every = pl.concat_str(
        [pl.when(pl.col(n)).then(pl.lit(n)) for n in names], separator=",", ignore_nulls=True
    )
    return masks.select(first.alias("rule"), pl.when(every != "").then(every).alias("rules"))


GX_COLUMNS: tuple[str, ...] = tuple(COLUMN_TYPES) + tuple(CONTEXT_COLUMNS)
"""The staged columns the suite reads."""
AUDIT_COLUMNS: tuple[str, ...] = (
    ("source", "row_in_file") + GX_COLUMNS + tuple(r.value for r in ROW_RULES)
)
"""Columns of an audit sample: where each row comes from, what GX reads, what polars said."""
