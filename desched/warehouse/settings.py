"""How one ingestion reads, checks and loads: ``IngestSettings``."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from desched.settings import DeschedSettings
from desched.warehouse.rules import TaskTypes


class IngestSettings(DeschedSettings):
    """How one ingestion reads, checks and loads; each field also reads
    ``DESCHED_INGEST_<NAME>`` (tuples and ``task_types`` as JSON)."""

    model_config = SettingsConfigDict(env_prefix="DESCHED_INGEST_")

    task_types: TaskTypes = Field(
        default_factory=TaskTypes,
        description="task types a completion may name: exact names or full-match patterns",
    )
    patterns: tuple[str, ...] = Field(
        default=("*log*.parquet", "*log*.jsonl", "*log*.ndjson"),
        description="file-name globs, matched recursively under the logs folder; a simulator "
        "run folder contributes its decision-log.parquet, not its tasks/decisions tables",
    )
    batch_rows: int = Field(default=200_000, ge=1, description="rows per Parquet batch")
    jsonl_batch_bytes: int = Field(
        default=64 << 20, ge=1, description="bytes per JSON-lines batch"
    )
    audit_rows: int | None = Field(
        default=1_000,
        ge=1,
        description="rows that polars passed and GX re-checks per batch (an evenly spaced "
        "sample); None makes GX check every row before its file commits",
    )
    audit_flagged_rows: int = Field(
        default=10_000,
        ge=0,
        description="flagged rows GX re-checks per file (all of them when fewer)",
    )
    duckdb_memory_limit: str | None = Field(
        default="256MB", description="DuckDB's own memory cap (None: DuckDB's default)"
    )
