"""The warehouse's tables and the connection that applies them.

Tables (``SCHEMA``):

- ``decisions``, ``completions``: the records of ``desched.runs`` that keep every rule of
  ``desched.warehouse.rules``, with ``source`` (the absolute path of the log file) in front. A
  column the log carries beyond the known ones (a policy's score components, a task's
  features) becomes a column of the table of the records that use it, added on first sight.
- ``quarantine``: every record that breaks a rule, filed under the first rule it breaks
  (``rule``) with all of them (``rules``), a human ``detail``, its place in the file
  (``row_in_file``: 0-based row of a Parquet file, 0-based line of a JSON-lines file), its
  keys and the raw ``record`` as JSON (the line itself for a line that is not JSON). A file
  that cannot be read at all gets one row with ``row_in_file`` null (``truncated_file``,
  ``unreadable_file``, ``missing_column``).
- ``ingested_files``: one row per log file (``desched.warehouse.ledger``): format, status
  (``loaded``/``quarantined``), size, mtime, content hash, bytes and records consumed, rows
  loaded and quarantined, and the carry that the checks of the next records need (last
  ``t``, largest ``seq``).

duckdb is imported inside ``open_warehouse``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from desched.errors import DeschedError
from desched.warehouse.rules import COLUMN_TYPES, CONTEXT_COLUMNS, ROW_RULES

if TYPE_CHECKING:
    import duckdb


DEFAULT_DB = Path("data/warehouse.duckdb")
DEFAULT_LOGS = Path("data/logs")

DECISION_TABLE: tuple[str, ...] = (
    "seq", "t", "worker", "task_id", "tenant", "policy", "score", "queue_len",
    "tenant_backlog", "wait_s",
)
COMPLETION_TABLE: tuple[str, ...] = (
    "seq", "t", "worker", "task_id", "tenant", "task_type", "submit_s", "start_s",
    "duration_s", "status", "peak_mem_mb",
)
RESERVED = frozenset(
    {"source", "row_in_file", "_flagged", *CONTEXT_COLUMNS, *(r.value for r in ROW_RULES)}
)
"""Names the loader uses itself; a log column of that name is kept as ``log_<name>``."""

_DUCK_TYPES = {pl.String(): "VARCHAR", pl.Float64(): "DOUBLE", pl.Int64(): "BIGINT"}


def _columns_sql(columns: Sequence[str], nullable: frozenset[str] = frozenset()) -> str:
    return ",\n  ".join(
        f"{c} {_DUCK_TYPES[COLUMN_TYPES[c]]}{'' if c in nullable else ' NOT NULL'}"
        for c in columns
    )


SCHEMA = f"""
CREATE TABLE IF NOT EXISTS decisions (
  source VARCHAR NOT NULL,
  {_columns_sql(DECISION_TABLE)}
);
CREATE TABLE IF NOT EXISTS completions (
  source VARCHAR NOT NULL,
  {_columns_sql(COMPLETION_TABLE, frozenset({"peak_mem_mb"}))}
);
CREATE TABLE IF NOT EXISTS quarantine (
  source VARCHAR NOT NULL,
  rule VARCHAR NOT NULL,
  rules VARCHAR NOT NULL,
  detail VARCHAR,
  row_in_file BIGINT,
  kind VARCHAR,
  seq BIGINT,
  task_id VARCHAR,
  record VARCHAR,
  quarantined_at TIMESTAMP NOT NULL DEFAULT current_timestamp
);
CREATE TABLE IF NOT EXISTS ingested_files (
  path VARCHAR PRIMARY KEY,
  format VARCHAR NOT NULL,
  status VARCHAR NOT NULL,
  size_bytes BIGINT NOT NULL,
  mtime_ns BIGINT NOT NULL,
  content_hash VARCHAR,
  offset_bytes BIGINT NOT NULL,
  records_read BIGINT NOT NULL,
  rows_loaded BIGINT NOT NULL,
  rows_quarantined BIGINT NOT NULL,
  last_t DOUBLE,
  max_seq BIGINT,
  first_read_at TIMESTAMP NOT NULL DEFAULT current_timestamp,
  last_read_at TIMESTAMP NOT NULL DEFAULT current_timestamp
);
"""
"""The warehouse DDL; ``open_warehouse`` applies it (idempotent)."""


def open_warehouse(
    db_path: str | Path, memory_limit: str | None = None
) -> duckdb.DuckDBPyConnection:
    """Connect to (creating if needed) the warehouse at ``db_path`` with its schema applied."""
    import duckdb

    path = Path(db_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        con = duckdb.connect(str(path))
    except duckdb.IOException:
        raise  # a lock held by another process: transient, retried by the caller
    except duckdb.Error as exc:
        raise DeschedError(f"warehouse {path}: {exc}".splitlines()[0]) from None
    if memory_limit:
        con.execute(f"SET memory_limit = '{memory_limit}'").fetchall()
    con.execute(SCHEMA).fetchall()
    return con


def table_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Rows per warehouse table."""
    tables = ("decisions", "completions", "quarantine", "ingested_files")
    return {t: int(con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]) for t in tables}
