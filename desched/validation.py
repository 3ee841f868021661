"""The rules every decision-log record keeps, written twice: polars masks and a GX suite.

A staged batch (``desched.warehouse.conform`` then ``add_context``) has the decision-log columns cast to their types
plus four context columns computed over the whole log: ``bad_type_columns`` (names of the
columns whose raw value did not convert, else null), ``prev_t`` (``t`` of the previous record
of the same log), ``seq_seen_before`` and ``task_seen_before`` (how many earlier records of the
log carry the same ``seq``, or the same ``task_id`` among completions). Every rule is then a
row-local test, and each one exists in two forms that must agree row for row:

- ``rule_exprs``: one boolean expression per rule, computed by polars in one pass; it routes
  every row (linear, about 0.1 s per million rows);
- ``build_suite``: the same rules as Great Expectations expectations, each tagged with its
  rule in ``meta``. ``GxAuditor.audit`` runs the suite on a pandas copy of an audit sample
  (every row polars flagged, up to a cap, and an evenly spaced sample of the rows it passed)
  and raises ``RuleMismatch`` unless the rows GX finds unexpected are, rule by rule, exactly
  the rows polars flagged.

Polars is the engine; GX is the contract an analyst can read and re-run, and the independent
check that the engine keeps to it. Running the suite costs about a second per call whatever
the size, then about 2 s per million rows: more than reading, checking and loading the rows
together (BENCHMARKS.md). So by default the flow audits samples, once per run or per 200k
sampled rows, after the loads commit: a disagreement is a bug, not bad data; it fails the
run and names the rule and rows. ``IngestSettings(audit_rows=None)`` (``--gx-every-row``)
instead has GX check every row of every batch before its file commits.

Null handling matches GX's: a null value breaks ``missing_key``/``missing_value`` only; the
other rules ignore nulls. A value that does not convert is both ``bad_type`` and missing.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

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
    NON_POSITIVE_DURATION = "non_positive_duration"
    UNKNOWN_TASK_TYPE = "unknown_task_type"
    TIME_OUT_OF_ORDER = "time_out_of_order"
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
    Rule.NON_POSITIVE_DURATION,
    Rule.UNKNOWN_TASK_TYPE,
    Rule.TIME_OUT_OF_ORDER,
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


def _is(kind: str) -> pl.Expr:
    return pl.col("kind") == kind


def _any_null(columns: Iterable[str]) -> pl.Expr:
    return pl.any_horizontal([pl.col(c).is_null() for c in columns])


def _before(a: str, b: str) -> pl.Expr:
    """``a < b`` where both are present (GX's pair test with ``either_value_is_missing``)."""
    return pl.col(a).is_not_null() & pl.col(b).is_not_null() & (pl.col(a) < pl.col(b))


def rule_exprs(task_types: TaskTypes) -> dict[Rule, pl.Expr]:
    """One boolean expression per row rule, true where the row breaks it, never null."""
    completion = _is("completion")
    exprs = {
        Rule.BAD_TYPE: pl.col("bad_type_columns").is_not_null(),
        Rule.MISSING_KEY: _any_null(KEY_COLUMNS),
        Rule.UNKNOWN_KIND: pl.col("kind").is_not_null() & ~pl.col("kind").is_in(LOG_KINDS),
        Rule.MISSING_VALUE: _any_null(COMMON_COLUMNS)
        | (_is("decision") & _any_null(DECISION_REQUIRED))
        | (completion & _any_null(COMPLETION_REQUIRED)),
        Rule.NON_POSITIVE_DURATION: completion
        & pl.col("duration_s").is_not_null()
        & (pl.col("duration_s") <= 0),
        Rule.UNKNOWN_TASK_TYPE: completion
        & pl.col("task_type").is_not_null()
        & ~pl.col("task_type").str.contains(task_types.regex),
        Rule.TIME_OUT_OF_ORDER: _before("t", "prev_t")
        | (completion & (_before("start_s", "submit_s") | _before("t", "start_s"))),
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


def build_suite(task_types: TaskTypes) -> Any:
    """The GX ``ExpectationSuite`` of the rules, each expectation tagged ``meta={"rule": ...}``.

    Imports great_expectations (about 3 s the first time)."""
    import great_expectations as gx
    import great_expectations.expectations as gx_expectations
    from great_expectations.expectations.row_conditions import Column

    gxe: Any = gx_expectations

    def tag(rule: Rule) -> dict[str, str]:
        return {"rule": rule.value}

    def of(kind: str) -> dict[str, Any]:
        return {"row_condition": Column("kind") == kind}

    expectations: list[Any] = [
        gxe.ExpectColumnValuesToBeNull(column="bad_type_columns", meta=tag(Rule.BAD_TYPE)),
        *[gxe.ExpectColumnValuesToNotBeNull(column=c, meta=tag(Rule.MISSING_KEY))
          for c in KEY_COLUMNS],
        gxe.ExpectColumnValuesToBeInSet(
            column="kind", value_set=list(LOG_KINDS), meta=tag(Rule.UNKNOWN_KIND)
        ),
        *[gxe.ExpectColumnValuesToNotBeNull(column=c, meta=tag(Rule.MISSING_VALUE))
          for c in COMMON_COLUMNS],
        *[gxe.ExpectColumnValuesToNotBeNull(column=c, meta=tag(Rule.MISSING_VALUE),
                                            **of("decision"))
          for c in DECISION_REQUIRED],
        *[gxe.ExpectColumnValuesToNotBeNull(column=c, meta=tag(Rule.MISSING_VALUE),
                                            **of("completion"))
          for c in COMPLETION_REQUIRED],
        gxe.ExpectColumnValuesToBeBetween(
            column="duration_s", min_value=0, strict_min=True,
            meta=tag(Rule.NON_POSITIVE_DURATION), **of("completion"),
        ),
        gxe.ExpectColumnValuesToMatchRegex(
            column="task_type", regex=task_types.regex, meta=tag(Rule.UNKNOWN_TASK_TYPE),
            **of("completion"),
        ),
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(
            column_A="t", column_B="prev_t", or_equal=True,
            ignore_row_if="either_value_is_missing", meta=tag(Rule.TIME_OUT_OF_ORDER),
        ),
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(
            column_A="start_s", column_B="submit_s", or_equal=True,
            ignore_row_if="either_value_is_missing", meta=tag(Rule.TIME_OUT_OF_ORDER),
            **of("completion"),
        ),
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(
            column_A="t", column_B="start_s", or_equal=True,
            ignore_row_if="either_value_is_missing", meta=tag(Rule.TIME_OUT_OF_ORDER),
            **of("completion"),
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="seq_seen_before", max_value=0, meta=tag(Rule.DUPLICATE_ID)
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="task_seen_before", max_value=0, meta=tag(Rule.DUPLICATE_ID),
            **of("completion"),
        ),
    ]
    suite = gx.ExpectationSuite(name="decision_log")
    for expectation in expectations:
        suite.add_expectation(expectation)
    return suite


class RuleMismatch(DeschedError):
    """GX and the polars masks disagree on which rows break a rule: a bug in one of them."""


@dataclass
class AuditResult:
    """What one GX run saw: rows checked, and rows unexpected per rule."""

    rows: int = 0
    unexpected: dict[str, int] = field(default_factory=dict)

    def add(self, other: AuditResult) -> None:
        self.rows += other.rows
        for rule, n in other.unexpected.items():
            self.unexpected[rule] = self.unexpected.get(rule, 0) + n


class GxAuditor:
    """An ephemeral GX context with the suite and one pandas dataframe batch definition.

    Build one per process (``gx_auditor``): the context and suite take about a second.
    """

    def __init__(self, task_types: TaskTypes) -> None:
        os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
        import great_expectations as gx
        from great_expectations.data_context.types.base import ProgressBarsConfig

        self.context = gx.get_context(mode="ephemeral")
        self.context.variables.progress_bars = ProgressBarsConfig(globally=False)
        source = self.context.data_sources.add_pandas("decision_logs")
        asset = source.add_dataframe_asset("staged_batch")
        self.batch_definition = asset.add_batch_definition_whole_dataframe("whole")
        self.suite = self.context.suites.add(build_suite(task_types))

    def audit(self, sample: pl.DataFrame) -> AuditResult:
        """Validate ``sample`` (``AUDIT_COLUMNS``: staged rows with the polars verdict of each
        rule) and check that the rows GX finds unexpected for each rule are exactly those
        polars flagged.

        Raises ``RuleMismatch`` naming the rule and a few disagreeing rows (file and row), or
        when an expectation itself fails to run. Cost: about a second per call whatever the
        size (GX resolves its metric graph per call), then about 2 s per million rows.
        """
        if sample.height == 0:
            return AuditResult()
        frame = sample.select(GX_COLUMNS).to_pandas()
        frame.index = range(sample.height)
        batch = self.batch_definition.get_batch(batch_parameters={"dataframe": frame})
        result = batch.validate(self.suite, result_format={"result_format": "COMPLETE"})
        found: dict[str, set[int]] = {r.value: set() for r in ROW_RULES}
        for outcome in result.results:
            config = outcome.expectation_config
            assert config is not None and config.meta is not None
            rule = config.meta["rule"]
            if outcome.exception_info and outcome.exception_info.get("raised_exception"):
                raise RuleMismatch(
                    f"GX expectation {config.type} ({rule}) failed to run: "
                    f"{outcome.exception_info.get('exception_message')}"
                )
            found[rule].update(int(i) for i in outcome.result.get("unexpected_index_list") or ())
        for rule, rows in found.items():
            expected = set(sample[rule].arg_true().to_list())
            if rows != expected:
                def where(ids: set[int]) -> list[str]:
                    return [
                        f"{sample['source'][i]}:{sample['row_in_file'][i]}" for i in sorted(ids)[:3]
                    ]

                raise RuleMismatch(
                    f"rule {rule}: GX and polars disagree (GX only: {where(rows - expected)}, "
                    f"polars only: {where(expected - rows)})"
                )
        return AuditResult(len(frame), {k: len(v) for k, v in found.items() if v})


@functools.lru_cache(maxsize=4)
def gx_auditor(task_types: TaskTypes) -> GxAuditor:
    """The process-wide auditor for ``task_types``."""
    return GxAuditor(task_types)
