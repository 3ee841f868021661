"""The Great Expectations audit: the rules of ``desched.warehouse.rules`` as a GX suite, run over
samples of the rows that polars routed, and failing where the two disagree.

``build_suite`` holds the rules as expectations, each tagged with its rule in ``meta``.
``GxAuditor.audit`` runs the suite on a pandas copy of an audit sample (every row polars
flagged, up to a cap, and an evenly spaced sample of the rows it passed) and raises
``RuleMismatch`` unless the rows GX finds unexpected are, rule by rule, exactly the rows
polars flagged.

Running the suite costs about a second per call whatever the size, then about 2 s per million
rows: more than reading, checking and loading the rows together (BENCHMARKS.md). So by
default the flow audits samples, once per run or per 200k sampled rows (``AuditQueue``,
``audit_samples``), after the loads commit: a disagreement is a bug, not bad data; it fails
the run and names the rule and rows. ``IngestSettings(audit_rows=None)`` (``--gx-every-row``)
instead has GX check every row of every batch before its file commits.

great_expectations is imported inside ``build_suite`` and ``GxAuditor``.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from desched.errors import DeschedError
from desched.warehouse.ledger import FileReport
from desched.warehouse.rules import (
    BLANK,
    COMMON_COLUMNS,
    COMPLETION_REQUIRED,
    COMPLETION_STATUSES,
    DECISION_REQUIRED,
    FINITE_COLUMNS,
    GX_COLUMNS,
    KEY_COLUMNS,
    LOG_KINDS,
    NAMED_KEYS,
    NON_NEGATIVE_COLUMNS,
    ROW_RULES,
    Rule,
    TaskTypes,
)


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
        *[gxe.ExpectColumnValuesToNotMatchRegex(column=c, regex=BLANK,
                                                meta=tag(Rule.MISSING_KEY))
          for c in NAMED_KEYS],
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
        *[gxe.ExpectColumnValuesToBeBetween(
            column=c, min_value=-sys.float_info.max, max_value=sys.float_info.max,
            meta=tag(Rule.NON_FINITE_VALUE))
          for c in FINITE_COLUMNS],
        gxe.ExpectColumnValuesToBeBetween(
            column="duration_s", min_value=0, strict_min=True,
            meta=tag(Rule.NON_POSITIVE_DURATION), **of("completion"),
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="wait_s", min_value=0, meta=tag(Rule.NEGATIVE_WAIT), **of("decision"),
        ),
        *[gxe.ExpectColumnValuesToBeBetween(column=c, min_value=0, meta=tag(Rule.NEGATIVE_AMOUNT))
          for c in NON_NEGATIVE_COLUMNS],
        gxe.ExpectColumnValuesToMatchRegex(
            column="task_type", regex=task_types.regex, meta=tag(Rule.UNKNOWN_TASK_TYPE),
            **of("completion"),
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="status", value_set=list(COMPLETION_STATUSES), meta=tag(Rule.UNKNOWN_STATUS),
            **of("completion"),
        ),
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(
            column_A="t", column_B="prev_t", or_equal=True,
            ignore_row_if="either_value_is_missing", meta=tag(Rule.TIME_OUT_OF_ORDER),
        ),
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(
            column_A="start_s", column_B="submit_s", or_equal=True,
            ignore_row_if="either_value_is_missing", meta=tag(Rule.START_BEFORE_SUBMIT),
            **of("completion"),
        ),
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(
            column_A="t", column_B="start_s", or_equal=True,
            ignore_row_if="either_value_is_missing", meta=tag(Rule.END_BEFORE_START),
            **of("completion"),
        ),
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(
            column_A="t", column_B="earliest_end_s", or_equal=True,
            ignore_row_if="either_value_is_missing", meta=tag(Rule.END_AFTER_CLOCK),
            **of("completion"),
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="task_decided_before", min_value=1,
            meta=tag(Rule.COMPLETION_WITHOUT_DECISION), **of("completion"),
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


def import_gx() -> Any:
    """The ``great_expectations`` module, its usage statistics off (``GX_ANALYTICS_ENABLED``
    set before the import), with the config class the auditor needs. About 3 s of CPU the
    first time in a process: ``desched demo`` pays it while Prefect's server starts."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx
    import great_expectations.data_context.types.base  # ProgressBarsConfig, for the auditor

    return gx


class GxAuditor:
    """An ephemeral GX context with the suite and one pandas dataframe batch definition.

    Build one per process (``gx_auditor``): the context and suite take about a second.
    """

    def __init__(self, task_types: TaskTypes) -> None:
        gx = import_gx()
        from great_expectations.data_context.types.base import ProgressBarsConfig

        # GX pins this module's logger at INFO ("Created temporary directory ..."): let it
        # follow the "great_expectations" logger, which the CLI sets (INFO only with -v)
        logging.getLogger("great_expectations.data_context.types.base").setLevel(logging.NOTSET)

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


AUDIT_CHUNK_ROWS = 200_000


class AuditQueue:
    """Audit samples of loaded files waiting for GX; ``put`` says when a chunk of
    ``chunk_rows`` is ready, ``drain`` hands it over. Memory stays bounded by one chunk."""

    def __init__(self, chunk_rows: int = AUDIT_CHUNK_ROWS) -> None:
        self.chunk_rows = chunk_rows
        self.pending: list[pl.DataFrame] = []
        self.rows = 0

    def put(self, report: FileReport) -> bool:
        """Take ``report``'s sample (leaving None); true when a chunk is ready."""
        if report.audit_sample is not None:
            self.pending.append(report.audit_sample)
            self.rows += report.audit_sample.height
            report.audit_sample = None
        return self.rows >= self.chunk_rows

    def drain(self) -> pl.DataFrame | None:
        """Everything waiting, as one frame (None when empty)."""
        if not self.pending:
            return None
        sample = pl.concat(self.pending)
        self.pending, self.rows = [], 0
        return sample


def audit_samples(
    reports: Sequence[FileReport], auditor: Callable[[], GxAuditor]
) -> AuditResult:
    """Run GX over the audit samples of ``reports`` in chunks; raise ``RuleMismatch`` where it
    disagrees with the polars verdict the loads used."""
    result = AuditResult()
    queue = AuditQueue()
    for i, report in enumerate(reports):
        if queue.put(report) or i == len(reports) - 1:
            sample = queue.drain()
            if sample is not None:
                result.add(auditor().audit(sample))
    return result
