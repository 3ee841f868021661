"""Prefect tasks of log ingestion: thin I/O around ``desched.warehouse``.

Every task opens its own DuckDB connection and closes it. Only I/O failures are retried (a
file system hiccup, the warehouse locked by another process); bad input (``DeschedError``) and
bugs fail at once. Files are loaded one task each, in one transaction each, so a retry
re-reads the same bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import polars as pl
from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from desched.warehouse.audit import AuditResult, gx_auditor
from desched.warehouse.ledger import FileReport, FileWork, plan
from desched.warehouse.load import ingest_file as load_file
from desched.warehouse.report import IngestSummary, report_markdown, report_table
from desched.warehouse.schema import open_warehouse, table_counts
from desched.warehouse.settings import IngestSettings


def _transient(task: Any, task_run: Any, state: Any) -> bool:
    """Retry I/O errors only: a locked warehouse, a file system hiccup."""
    exc = getattr(state.data, "result", state.data)  # the exception, or its result record
    return isinstance(exc, (OSError, duckdb.IOException))


RETRY_DELAYS_S = [2.0, 10.0, 30.0]
_IO_TASK: dict[str, Any] = {
    "retries": len(RETRY_DELAYS_S),
    "retry_delay_seconds": RETRY_DELAYS_S,
    "retry_condition_fn": _transient,
    "cache_policy": NO_CACHE,
}
"""Options of every task that touches the warehouse: retried on I/O errors, never cached."""


@task(name="prepare-warehouse", **_IO_TASK)
def prepare_warehouse(db_path: str) -> dict[str, int]:
    """Create the warehouse and its tables if needed; return rows per table."""
    with open_warehouse(db_path) as con:
        return table_counts(con)


@task(name="plan-ingestion", **_IO_TASK)
def plan_ingestion(
    logs_dir: str, db_path: str, settings: IngestSettings
) -> tuple[list[FileWork], int]:
    """The files that are new or changed since the last run, and how many are unchanged."""
    with open_warehouse(db_path) as con:
        return plan(con, logs_dir, settings)


def _ingest_run_name() -> str:
    """``ingest-<folder>-<file>``: the log file by its folder and name, never its absolute
    path (which the run's parameters and report carry)."""
    from prefect.runtime import task_run

    path = Path(task_run.parameters["work"].path)
    return f"ingest-{path.parent.name}-{path.name}"


@task(name="ingest-log-file", task_run_name=_ingest_run_name, **_IO_TASK)
def ingest_log_file(work: FileWork, db_path: str, settings: IngestSettings) -> FileReport:
    """Read, check and load one log file in one transaction; the report carries the rows
    for the GX audit (or GX has checked every row already, with ``audit_rows=None``)."""
    with open_warehouse(db_path, settings.duckdb_memory_limit) as con:
        return load_file(con, work, settings)


@task(name="audit-with-great-expectations", cache_policy=NO_CACHE)
def audit_with_gx(sample: pl.DataFrame, settings: IngestSettings) -> AuditResult:
    """Run the GX suite over an audit sample of loaded rows; fail (``RuleMismatch``) where GX
    and the polars rules that routed the rows disagree."""
    return gx_auditor(settings.task_types).audit(sample)


count_warehouse_rows = prepare_warehouse.with_options(name="count-warehouse-rows")
"""Rows per warehouse table, at the end of a run (the same work as ``prepare_warehouse``)."""


@task(name="publish-ingest-report", cache_policy=NO_CACHE)
def publish_ingest_report(summary: IngestSummary, logs_dir: str, db_path: str) -> None:
    """A markdown artifact (totals, rows quarantined by rule, files quarantined whole) and a
    table artifact (one row per file), both under stable keys so runs line up in the UI."""
    create_markdown_artifact(
        key="ingest-logs",
        markdown=report_markdown(summary, logs_dir, db_path),
        description=summary.line(),
    )
    rows = report_table(summary)
    if rows:
        create_table_artifact(
            key="ingest-logs-files", table=rows, description="Files read by this run"
        )
