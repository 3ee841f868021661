"""Enrichment results in the DuckDB warehouse: table ``enrichment_results``, one row per task.

A task's row is replaced when it is enriched again (a lease that expired after the work was
done and stored lets another worker redo it): the latest result wins. DuckDB lets one process
write a file at a time, so ``store_results`` opens the file for one short transaction and
retries while another process holds it (workers, ingestion). The ``result_ref`` a worker
reports is ``duckdb:<db path>#enrichment_results/<task_id>``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from desched.enrich.pipeline import EnrichResult
from desched.errors import DeschedError

TABLE = "enrichment_results"
SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
  task_id VARCHAR PRIMARY KEY,
  tenant VARCHAR NOT NULL,
  task_type VARCHAR NOT NULL,
  document_ref VARCHAR NOT NULL,
  worker VARCHAR NOT NULL,
  model VARCHAR NOT NULL,
  device VARCHAR NOT NULL,
  duration_s DOUBLE NOT NULL,
  peak_mem_mb DOUBLE NOT NULL,
  chars BIGINT NOT NULL,
  clean_text VARCHAR,
  company VARCHAR,
  date VARCHAR,
  total VARCHAR,
  category VARCHAR,
  category_source VARCHAR,
  embedding FLOAT[],
  stored_at TIMESTAMP NOT NULL DEFAULT current_timestamp
)
"""
COLUMNS = (
    "task_id",
    "tenant",
    "task_type",
    "document_ref",
    "worker",
    "model",
    "device",
    "duration_s",
    "peak_mem_mb",
    "chars",
    "clean_text",
    "company",
    "date",
    "total",
    "category",
    "category_source",
    "embedding",
)


def result_ref(db_path: str | Path, task_id: str) -> str:
    return f"duckdb:{db_path}#{TABLE}/{task_id}"


def _connect(db_path: Path, timeout_s: float) -> Any:
    import duckdb

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return duckdb.connect(str(db_path))
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                raise DeschedError(f"{db_path}: cannot open the warehouse: {exc}") from None
            time.sleep(0.05 + random.random() * 0.1)


def store_results(
    db_path: str | Path,
    rows: Sequence[tuple[EnrichResult, str, str, str]],
    timeout_s: float = 60.0,
) -> int:
    """Insert or replace ``(result, tenant, document_ref, worker)`` rows; how many."""
    if not rows:
        return 0
    path = Path(db_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    values = []
    for result, tenant, ref, worker in rows:
        d = asdict(result)
        d.update(tenant=tenant, document_ref=ref, worker=worker)
        values.append(tuple(d[c] for c in COLUMNS))
    con = _connect(path, timeout_s)
    try:
        con.execute(SCHEMA)
        marks = ", ".join("?" for _ in COLUMNS)
        con.execute("BEGIN TRANSACTION")
        con.executemany(
            f"INSERT OR REPLACE INTO {TABLE} ({', '.join(COLUMNS)}) VALUES ({marks})", values
        )
        con.execute("COMMIT")
    finally:
        con.close()
    return len(values)


def read_results(db_path: str | Path, timeout_s: float = 60.0) -> Any:
    """The results table as a polars frame (empty when the table does not exist)."""

    con = _connect(Path(db_path), timeout_s)
    try:
        con.execute(SCHEMA)
        return con.sql(f"SELECT * FROM {TABLE} ORDER BY stored_at, task_id").pl()
    finally:
        con.close()
