"""The ledger of log files: what each file held when it was last read (``ingested_files``),
and the plan of a run: which files are new, grew, changed or shrank since.

Incrementality. A file is skipped while its size and mtime are unchanged. Parquet files are
immutable units, identified by path, size and SHA-256: a touched file with the same hash is
only re-stamped; a file whose content changed (a re-run simulation written to the same
folder) replaces what its earlier version put into the warehouse, quarantine included.
JSON-lines files are appended to: a file that grew is read from the byte after the last
complete line read before; a partial last line waits for the next run. A JSON-lines file that
shrank, or whose first bytes changed, is ``truncated_file``: reported and quarantined whole,
keeping the rows read before; it is read again once it grows back past its offset with the
same head.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from desched.errors import DeschedError

if TYPE_CHECKING:
    import duckdb

    from desched.warehouse.settings import IngestSettings

HEAD_BYTES = 64 * 1024
"""Bytes at the start of a JSON-lines file whose hash tells a grown file from a new one."""


class LogFormat(StrEnum):
    PARQUET = "parquet"
    JSONL = "jsonl"


class Action(StrEnum):
    """What a run does with a file that changed since the last run."""

    NEW = "new"
    GROWN = "grown"
    REPLACED = "replaced"
    TRUNCATED = "truncated"
    TOUCHED = "touched"


@dataclass(frozen=True)
class FileState:
    """A row of ``ingested_files``."""

    path: str
    format: LogFormat
    status: str
    size_bytes: int
    mtime_ns: int
    content_hash: str | None
    offset_bytes: int
    records_read: int
    rows_loaded: int
    rows_quarantined: int
    last_t: float | None
    max_seq: int | None


@dataclass(frozen=True)
class FileWork:
    """One file this run reads (or re-stamps, or quarantines), decided by ``plan``."""

    path: str
    format: LogFormat
    action: Action
    size_bytes: int
    mtime_ns: int
    content_hash: str | None
    previous: FileState | None = None
    detail: str | None = None


@dataclass
class FileReport:
    """What a run did with one file."""

    path: str
    format: str
    action: str
    records_read: int = 0
    decisions_loaded: int = 0
    completions_loaded: int = 0
    quarantined: dict[str, int] = field(default_factory=dict)
    file_rule: str | None = None
    detail: str | None = None
    audited_rows: int = 0
    gx_unexpected: dict[str, int] = field(default_factory=dict)
    """Rows GX found unexpected per rule while loading (``audit_rows=None`` only)."""
    pending_bytes: int = 0
    seconds: float = 0.0
    audit_sample: pl.DataFrame | None = field(default=None, repr=False)
    """Rows for the run's GX audit (``audit_samples``); None when GX checked them already."""

    @property
    def rows_loaded(self) -> int:
        return self.decisions_loaded + self.completions_loaded

    @property
    def rows_quarantined(self) -> int:
        return sum(self.quarantined.values())


def load_states(con: duckdb.DuckDBPyConnection) -> dict[str, FileState]:
    """Every ``ingested_files`` row, by path."""
    rows = con.execute(
        "SELECT path, format, status, size_bytes, mtime_ns, content_hash, offset_bytes, "
        "records_read, rows_loaded, rows_quarantined, last_t, max_seq FROM ingested_files"
    ).fetchall()
    return {r[0]: FileState(r[0], LogFormat(r[1]), *r[2:]) for r in rows}


def save_state(con: duckdb.DuckDBPyConnection, state: FileState) -> None:
    con.execute(
        "INSERT INTO ingested_files (path, format, status, size_bytes, mtime_ns, content_hash, "
        "offset_bytes, records_read, rows_loaded, rows_quarantined, last_t, max_seq) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (path) DO UPDATE SET format = excluded.format, status = excluded.status, "
        "size_bytes = excluded.size_bytes, mtime_ns = excluded.mtime_ns, "
        "content_hash = excluded.content_hash, offset_bytes = excluded.offset_bytes, "
        "records_read = excluded.records_read, rows_loaded = excluded.rows_loaded, "
        "rows_quarantined = excluded.rows_quarantined, last_t = excluded.last_t, "
        "max_seq = excluded.max_seq, last_read_at = now()",
        [state.path, state.format.value, state.status, state.size_bytes, state.mtime_ns,
         state.content_hash, state.offset_bytes, state.records_read, state.rows_loaded,
         state.rows_quarantined, state.last_t, state.max_seq],
    ).fetchall()


def find_logs(logs_dir: str | Path, patterns: Sequence[str]) -> list[Path]:
    """Log files under ``logs_dir`` (recursively) matching a pattern, hidden ones excluded."""
    root = Path(logs_dir)
    if not root.is_dir():
        raise DeschedError(f"logs folder {root} does not exist or is not a folder")
    found = {
        p.resolve()
        for pattern in patterns
        for p in root.rglob(pattern)
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    }
    return sorted(found)


def sha256_of(path: Path, limit: int | None = None) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        remaining = limit if limit is not None else math.inf
        while remaining > 0:
            chunk = f.read(int(min(1 << 20, remaining)))
            if not chunk:
                break
            digest.update(chunk)
            remaining -= len(chunk)
    return digest.hexdigest()


def plan(
    con: duckdb.DuckDBPyConnection, logs_dir: str | Path, settings: IngestSettings
) -> tuple[list[FileWork], int]:
    """The files this run must handle, and how many log files it leaves as they are."""
    states = load_states(con)
    work: list[FileWork] = []
    unchanged = 0
    for path in find_logs(logs_dir, settings.patterns):
        key = str(path)
        stat = path.stat()
        size, mtime = stat.st_size, stat.st_mtime_ns
        prev = states.get(key)
        if prev is not None and prev.size_bytes == size and prev.mtime_ns == mtime:
            unchanged += 1
            continue
        fmt = LogFormat.PARQUET if path.suffix == ".parquet" else LogFormat.JSONL
        detail: str | None = None
        if fmt is LogFormat.PARQUET:
            content_hash: str | None = sha256_of(path)
            if prev is None:
                action = Action.NEW
            elif prev.content_hash == content_hash:
                action = Action.TOUCHED
            else:
                action = Action.REPLACED
        elif prev is None:
            content_hash, action = None, Action.NEW
        else:
            content_hash = prev.content_hash  # of the head already read
            if size < prev.offset_bytes:
                action = Action.TRUNCATED
                detail = f"shrank to {size} bytes, below the {prev.offset_bytes} bytes already read"
            elif sha256_of(path, min(prev.offset_bytes, HEAD_BYTES)) != prev.content_hash:
                action = Action.TRUNCATED
                detail = "its first bytes changed since they were read (truncated and rewritten?)"
            elif size > prev.offset_bytes:
                action = Action.GROWN
            else:
                action = Action.TOUCHED
        work.append(FileWork(key, fmt, action, size, mtime, content_hash, prev, detail))
    return work, unchanged
