"""Pipeline commands: ``desched ingest`` (the ``ingest-logs`` flow, run once, here)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from desched.errors import DeschedError
from desched.warehouse.rules import KNOWN_TASK_TYPES, TASK_TYPE_PATTERNS
from desched.warehouse.schema import DEFAULT_DB

if TYPE_CHECKING:
    from desched.warehouse.report import IngestSummary


def _check_before_the_flow(db_path: Path, task_types: str | None) -> None:
    """Refuse a bad --task-types or a --warehouse that is not a DuckDB file in one line,
    before Prefect's server starts."""
    from desched.warehouse.rules import TaskTypes

    TaskTypes.parse(task_types)
    if db_path.is_file():
        import duckdb

        try:
            duckdb.connect(str(db_path), read_only=True).close()
        except duckdb.Error as exc:
            raise DeschedError(
                f"--warehouse {db_path}: cannot open it as a DuckDB database "
                f"({str(exc).splitlines()[0]})"
            ) from None


@click.command("ingest")
@click.option(
    "--logs", "logs_dir", required=True, type=click.Path(path_type=Path),
    help="Folder of decision/completion logs, read recursively: every *log*.parquet and "
    "*log*.jsonl, and any other .parquet/.jsonl that is a log by its content; every other "
    "file is named as skipped.",
)
@click.option(
    "--warehouse", "db_path", default=str(DEFAULT_DB), show_default=True,
    type=click.Path(path_type=Path, dir_okay=False), help="DuckDB warehouse (created if absent).",
)
@click.option(
    "--task-types", default=None,
    help="Known task types: comma-separated names and re:PATTERNs [default: "
    + ", ".join((*KNOWN_TASK_TYPES, *(f"re:{p}" for p in TASK_TYPE_PATTERNS)))
    + "].",
)
@click.option(
    "--gx-every-row", is_flag=True,
    help="Have Great Expectations check every row, not an audit sample (slower).",
)
def ingest(logs_dir: Path, db_path: Path, task_types: str | None, gx_every_row: bool) -> None:
    """Load new and grown log files into the warehouse; quarantine rows that break a rule.

    Runs the ingest-logs Prefect flow once. Re-running it on the same files adds nothing.
    Prints one line: files read, rows loaded, rows quarantined by rule; then one line per
    file it skipped as not a log, with the reason.
    """
    if not logs_dir.is_dir():
        raise DeschedError(f"logs folder {logs_dir} does not exist or is not a folder")
    if db_path.is_dir():
        raise DeschedError(f"--warehouse {db_path} is a folder; give the warehouse file's path")
    _check_before_the_flow(db_path, task_types)
    from desched.cli.local_api import early_api

    def load() -> Callable[..., IngestSummary]:
        from desched.flows.ingest import ingest_logs

        return ingest_logs

    with early_api(load) as ingest_logs:
        summary = ingest_logs(str(logs_dir), str(db_path), task_types, gx_every_row)
    if summary.files_seen == 0:
        click.echo(f"{logs_dir}: no files, nothing to load")
        return
    click.echo(summary.line())
    for line in summary.skipped_lines(str(logs_dir)):
        click.echo(f"  {line}")
