"""The ``ingest-logs`` flow: new decision and completion logs into the DuckDB warehouse.

Entrypoint of the ``ingest-logs`` deployment (prefect.yaml), also run by ``desched ingest``.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger

from desched.errors import DeschedError
from desched.tasks.ingest import (
    audit_with_gx,
    count_warehouse_rows,
    ingest_log_file,
    plan_ingestion,
    prepare_warehouse,
    publish_ingest_report,
)
from desched.warehouse.audit import AuditQueue, AuditResult
from desched.warehouse.ledger import Action, FileReport
from desched.warehouse.report import IngestSummary, summarize
from desched.warehouse.rules import TaskTypes
from desched.warehouse.schema import DEFAULT_DB, DEFAULT_LOGS
from desched.warehouse.settings import IngestSettings


@flow(name="ingest-logs")
def ingest_logs(
    logs_dir: str = str(DEFAULT_LOGS),
    db_path: str = str(DEFAULT_DB),
    task_types: str | None = None,
    gx_every_row: bool = False,
) -> IngestSummary:
    """Load the log files under ``logs_dir`` that are new or grew since the last run into the
    warehouse at ``db_path``; quarantine what breaks a rule; publish the run's report.

    ``task_types``: the known task types, comma-separated names and ``re:``-prefixed patterns
    (default: ``desched.warehouse.rules.KNOWN_TASK_TYPES`` and SWF's ``app<n>``/``q<n>``).
    ``gx_every_row``: let Great Expectations check every row, not an audit sample.

    A missing ``logs_dir`` is created (a fresh set-up has no logs yet): the run then reads
    0 files and completes. A file that cannot be read is quarantined whole and the run goes on. A file whose load
    fails otherwise (after retries) is rolled back and reported; the run then ends failed,
    after loading the others, and the next run reads that file again. Great Expectations then
    re-checks the run's audit sample; a disagreement with the polars rules (a bug, not bad
    data) is published and fails the run.
    """
    logger = get_run_logger()
    logs = Path(logs_dir)
    if not logs.exists():
        logs.mkdir(parents=True)
        logger.info("logs folder %s did not exist: created it, 0 files to read", logs)
    settings = IngestSettings(task_types=TaskTypes.parse(task_types))
    if gx_every_row:
        settings = IngestSettings(task_types=settings.task_types, audit_rows=None)
    prepare_warehouse(db_path)
    work, unchanged = plan_ingestion(logs_dir, db_path, settings)
    reports: list[FileReport] = []
    failed: dict[str, str] = {}
    queue = AuditQueue()
    audit = AuditResult()
    gx_error: str | None = None

    def run_audit() -> None:
        nonlocal gx_error
        sample = queue.drain()
        if sample is None or gx_error:
            return
        state = audit_with_gx(sample, settings, return_state=True)
        if state.is_completed():
            audit.add(state.result())
        else:
            gx_error = state.message or "failed"

    for item in work:
        if item.action is Action.SKIPPED and item.copy_of is None:  # not a log: not read
            reports.append(FileReport(item.path, item.format.value, item.action.value,
                                      detail=item.detail))
            continue
        state = ingest_log_file(item, db_path, settings, return_state=True)
        if not state.is_completed():
            failed[item.path] = state.message or state.name or "failed"
            continue
        report = state.result()
        reports.append(report)
        if queue.put(report):
            run_audit()
    run_audit()
    summary = summarize(
        reports, len(work) + unchanged, failed, count_warehouse_rows(db_path), audit
    )
    summary.gx_error = gx_error
    publish_ingest_report(summary, logs_dir, db_path)
    logger.info("%s: %s", logs_dir, summary.line())
    if failed:
        path, error = next(iter(failed.items()))
        raise DeschedError(f"{len(failed)} log files failed to load; first: {path}: {error}")
    if summary.gx_error:
        raise DeschedError(f"the Great Expectations audit failed: {summary.gx_error}")
    return summary
