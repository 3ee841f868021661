"""The DuckDB warehouse of decision logs, and the incremental, idempotent load into it.

Tables (``SCHEMA``):

- ``decisions``, ``completions``: the records of ``desched.runs`` that keep every rule of
  ``desched.validation``, with ``source`` (the absolute path of the log file) in front. A
  column the log carries beyond the known ones (a policy's score components, a task's
  features) becomes a column of the table of the records that use it, added on first sight.
- ``quarantine``: every record that breaks a rule, filed under the first rule it breaks
  (``rule``) with all of them (``rules``), a human ``detail``, its place in the file
  (``row_in_file``: 0-based row of a Parquet file, 0-based line of a JSON-lines file), its
  keys and the raw ``record`` as JSON (the line itself for a line that is not JSON). A file
  that cannot be read at all gets one row with ``row_in_file`` null (``truncated_file``,
  ``unreadable_file``, ``missing_column``).
- ``ingested_files``: one row per log file: format, status (``loaded``/``quarantined``),
  size, mtime, content hash, bytes and records consumed, rows loaded and quarantined, and the
  carry that the checks of the next records need (last ``t``, largest ``seq``).

Incrementality. A file is skipped while its size and mtime are unchanged.
Parquet files are immutable units, identified by path, size and SHA-256: a touched file with
the same hash is only re-stamped; a file whose content changed (a re-run simulation written
to the same folder) replaces what its earlier version put into the warehouse, quarantine
included. JSON-lines files are appended to: a file that grew is read from the byte after the
last complete line read before; a partial last line waits for the next run. A JSON-lines file
that shrank, or whose first bytes changed, is ``truncated_file``: reported and quarantined
whole, keeping the rows read before; it is read again once it grows back past its offset with
the same head.

Idempotency. Each file is loaded in one transaction together with its ``ingested_files`` row,
so a failure leaves the warehouse as it was and the next run reads the same bytes again. A
record whose ``seq`` (or, for a completion, ``task_id``) already appeared earlier in the same
log, in this run or a past one, breaks ``duplicate_id`` and is quarantined: running the
ingestion twice on the same files adds nothing, and no row is loaded twice.

Cost: linear in the new bytes; memory is bounded by one batch (``IngestSettings.batch_rows``
rows or ``jsonl_batch_bytes`` bytes) whatever the number of files waiting.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from desched.errors import DeschedError
from desched.validation import (
    AUDIT_COLUMNS,
    COLUMN_TYPES,
    COMMON_COLUMNS,
    COMPLETION_REQUIRED,
    CONTEXT_COLUMNS,
    DECISION_REQUIRED,
    FILE_REQUIRED,
    KEY_COLUMNS,
    ROW_RULES,
    AuditResult,
    GxAuditor,
    Rule,
    TaskTypes,
    first_rule_and_all,
    gx_auditor,
    rule_exprs,
)

DEFAULT_DB = Path("data/warehouse.duckdb")
DEFAULT_LOGS = Path("data/logs")
HEAD_BYTES = 64 * 1024
"""Bytes at the start of a JSON-lines file whose hash tells a grown file from a new one."""

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
class IngestSettings:
    """How one ingestion reads, checks and loads.

    ``patterns``: file-name globs, matched recursively under the logs folder; a simulator run
    folder contributes its ``decision-log.parquet``, not its ``tasks``/``decisions`` tables.
    ``batch_rows``: rows per Parquet batch; ``jsonl_batch_bytes``: bytes per JSON-lines batch.
    ``audit_rows``: rows that polars passed and GX re-checks per batch (an evenly spaced
    sample); ``None`` makes GX check every row. ``audit_flagged_rows``: flagged rows GX
    re-checks per file (all of them when fewer). ``duckdb_memory_limit``: DuckDB's own cap.
    """

    task_types: TaskTypes = field(default_factory=TaskTypes)
    patterns: tuple[str, ...] = ("*log*.parquet", "*log*.jsonl", "*log*.ndjson")
    batch_rows: int = 200_000
    jsonl_batch_bytes: int = 64 << 20
    audit_rows: int | None = 1_000
    audit_flagged_rows: int = 10_000
    duckdb_memory_limit: str | None = "256MB"


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


class WholeFileProblem(Exception):
    """A file that is quarantined whole; raised by the readers."""

    def __init__(self, rule: Rule, detail: str) -> None:
        super().__init__(detail)
        self.rule = rule
        self.detail = detail


def open_warehouse(
    db_path: str | Path, memory_limit: str | None = None
) -> duckdb.DuckDBPyConnection:
    """Connect to (creating if needed) the warehouse at ``db_path`` with its schema applied."""
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


def load_states(con: duckdb.DuckDBPyConnection) -> dict[str, FileState]:
    """Every ``ingested_files`` row, by path."""
    rows = con.execute(
        "SELECT path, format, status, size_bytes, mtime_ns, content_hash, offset_bytes, "
        "records_read, rows_loaded, rows_quarantined, last_t, max_seq FROM ingested_files"
    ).fetchall()
    return {r[0]: FileState(r[0], LogFormat(r[1]), *r[2:]) for r in rows}


def _save_state(con: duckdb.DuckDBPyConnection, state: FileState) -> None:
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


def table_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Rows per warehouse table."""
    tables = ("decisions", "completions", "quarantine", "ingested_files")
    return {t: int(con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]) for t in tables}


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


def _sha256(path: Path, limit: int | None = None) -> str:
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
            content_hash: str | None = _sha256(path)
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
            elif _sha256(path, min(prev.offset_bytes, HEAD_BYTES)) != prev.content_hash:
                action = Action.TRUNCATED
                detail = "its first bytes changed since they were read (truncated and rewritten?)"
            elif size > prev.offset_bytes:
                action = Action.GROWN
            else:
                action = Action.TOUCHED
        work.append(FileWork(key, fmt, action, size, mtime, content_hash, prev, detail))
    return work, unchanged


@dataclass
class RawBatch:
    """Records as read, with ``row_in_file``; lines that are not JSON objects in
    ``malformed`` as (line, text, error); ``end_offset``: bytes consumed after this batch."""

    frame: pl.DataFrame
    malformed: list[tuple[int, str, str]]
    records: int
    end_offset: int


def _with_row_numbers(frame: pl.DataFrame, rows: pl.Series | range) -> pl.DataFrame:
    renames = {c: f"log_{c}" for c in frame.columns if c in RESERVED}
    frame = frame.rename(renames) if renames else frame
    numbers = pl.Series("row_in_file", rows, dtype=pl.Int64) if isinstance(rows, range) else rows
    return frame.insert_column(0, numbers.alias("row_in_file"))


def _parquet_problem(path: Path, exc: Exception) -> WholeFileProblem:
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(4)
        f.seek(max(0, size - 4))
        tail = f.read(4)
    message = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    if head == b"PAR1" and (tail != b"PAR1" or size < 12):
        return WholeFileProblem(Rule.TRUNCATED_FILE, f"no Parquet footer ({message})")
    return WholeFileProblem(Rule.UNREADABLE_FILE, message)


def parquet_batches(path: str | Path, batch_rows: int) -> Iterator[RawBatch]:
    """The rows of a Parquet file in batches of at most ``batch_rows``.

    Raises ``WholeFileProblem`` for a file without footer (``truncated_file``), one that does
    not decode (``unreadable_file``) or one without a column of ``FILE_REQUIRED``.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = Path(path)
    try:
        pf = pq.ParquetFile(p)
    except (pa.ArrowException, ValueError) as exc:
        raise _parquet_problem(p, exc) from None
    names = set(pf.schema_arrow.names)
    missing = [c for c in FILE_REQUIRED if c not in names]
    if missing:
        raise WholeFileProblem(
            Rule.MISSING_COLUMN, f"no column {', '.join(repr(c) for c in missing)}"
        )
    size = p.stat().st_size
    start = 0
    try:
        for record_batch in pf.iter_batches(batch_size=batch_rows):
            frame = pl.from_arrow(record_batch)
            assert isinstance(frame, pl.DataFrame)
            n = frame.height
            yield RawBatch(_with_row_numbers(frame, range(start, start + n)), [], n, size)
            start += n
    except pa.ArrowException as exc:
        if isinstance(exc, OSError) and not isinstance(exc, pa.ArrowInvalid):
            raise
        raise _parquet_problem(p, exc) from None


def _parse_lines(chunk: bytes, first_line: int) -> tuple[pl.DataFrame, list[tuple[int, str, str]]]:
    """Records of ``chunk`` (complete lines), numbered from ``first_line``."""
    n_lines = chunk.count(b"\n")
    clean = b"\n\n" not in chunk and not chunk.startswith(b"\n") and b"\r" not in chunk
    if clean:
        try:
            frame = pl.read_ndjson(io.BytesIO(chunk), infer_schema_length=None)
        except pl.exceptions.PolarsError:
            frame = None  # a bad line somewhere: the line-by-line path below names it
        if frame is not None and frame.height == n_lines:
            return _with_row_numbers(frame, range(first_line, first_line + n_lines)), []
    good: list[bytes] = []
    values: list[dict[str, Any]] = []
    numbers: list[int] = []
    malformed: list[tuple[int, str, str]] = []
    for i, line in enumerate(chunk.split(b"\n")[:n_lines]):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
            error = (
                None if isinstance(value, dict) else f"a JSON {type(value).__name__}, not an object"
            )
        except (ValueError, UnicodeDecodeError) as exc:
            error = str(exc)
        if error is None:
            good.append(line.strip())
            values.append(value)
            numbers.append(first_line + i)
        else:
            malformed.append((first_line + i, line.decode("utf-8", "replace"), error))
    frame = pl.DataFrame()
    if good:
        try:
            frame = pl.read_ndjson(io.BytesIO(b"\n".join(good)), infer_schema_length=None)
        except pl.exceptions.PolarsError:  # JSON that Python reads and polars does not (NaN)
            frame = pl.from_dicts(values, infer_schema_length=None, strict=False)
    return _with_row_numbers(frame, pl.Series(numbers, dtype=pl.Int64)), malformed


def jsonl_batches(
    path: str | Path, offset: int, first_line: int, batch_bytes: int
) -> Iterator[RawBatch]:
    """Complete lines of a JSON-lines file from byte ``offset`` on, in batches of about
    ``batch_bytes``; a last line without its newline is left for a later run.

    Raises ``WholeFileProblem`` (``unreadable_file``) when the first batch of a file read from
    its start holds no JSON object at all.
    """
    pos, line = offset, first_line
    carry = b""
    with Path(path).open("rb") as f:
        f.seek(offset)
        while True:
            data = f.read(batch_bytes)
            if not data:
                return
            buf = carry + data
            cut = buf.rfind(b"\n")
            if cut < 0:
                carry = buf
                continue
            chunk, carry = buf[: cut + 1], buf[cut + 1 :]
            frame, malformed = _parse_lines(chunk, line)
            if pos == 0 and frame.height == 0 and malformed:
                raise WholeFileProblem(
                    Rule.UNREADABLE_FILE,
                    f"none of its first {len(malformed)} lines is a JSON object "
                    f"(line {malformed[0][0]}: {malformed[0][2]})",
                )
            n_lines = chunk.count(b"\n")
            pos += len(chunk)
            line += n_lines
            yield RawBatch(frame, malformed, n_lines, pos)


def conform(raw: pl.DataFrame) -> pl.DataFrame:
    """``raw`` with every known column cast to its type (absent ones null), NaN as null,
    ``bad_type_columns`` naming the columns whose value did not convert, and the other
    columns of the log unchanged after them."""
    values: list[pl.Expr] = []
    bad: list[pl.Expr] = []
    for name, dtype in COLUMN_TYPES.items():
        if name not in raw.columns:
            values.append(pl.lit(None, dtype).alias(name))
            continue
        source = raw.schema[name]
        col = pl.col(name)
        if source == dtype:
            value = col
        elif source == pl.Null:
            value = pl.lit(None, dtype)
        elif source.is_nested() or source == pl.Object:
            value = pl.lit(None, dtype)
            bad.append(pl.when(col.is_not_null()).then(pl.lit(name)))
        elif dtype == pl.String:
            value = col.cast(pl.String)
        else:
            if dtype.is_integer() and source.is_float():
                value = pl.when(col == col.floor()).then(col).cast(dtype, strict=False)
            else:
                value = col.cast(dtype, strict=False)
            bad.append(pl.when(col.is_not_null() & value.is_null()).then(pl.lit(name)))
        if dtype == pl.Float64:
            value = value.fill_nan(None)
        values.append(value.alias(name))
    bad_names = (
        pl.concat_str(bad, separator=",", ignore_nulls=True) if bad else pl.lit(None, pl.String)
    )
    extras = [c for c in raw.columns if c not in COLUMN_TYPES and c != "row_in_file"]
    return raw.select(
        pl.col("row_in_file"),
        *values,
        pl.when(bad_names != "").then(bad_names).otherwise(None).alias("bad_type_columns"),
        *extras,
    )


def add_context(
    typed: pl.DataFrame,
    last_t: float | None,
    seqs_seen: pl.Series | None,
    tasks_seen: pl.Series | None,
) -> pl.DataFrame:
    """``typed`` (from ``conform``) with ``prev_t``, ``seq_seen_before`` and
    ``task_seen_before``, given the log's last ``t`` and the ``seq``/``task_id`` values of
    this batch that earlier batches or runs of the same log already hold."""
    completion = pl.col("kind") == "completion"
    task = pl.when(completion).then(pl.col("task_id"))
    seq_earlier = (~pl.col("seq").is_first_distinct()).cast(pl.Int64)
    if seqs_seen is not None and len(seqs_seen):
        seq_earlier = seq_earlier + pl.col("seq").is_in(seqs_seen.implode()).cast(pl.Int64)
    task_earlier = (~task.is_first_distinct()).cast(pl.Int64)
    if tasks_seen is not None and len(tasks_seen):
        task_earlier = task_earlier + pl.col("task_id").is_in(tasks_seen.implode()).cast(pl.Int64)
    prev_t = pl.col("t").shift(1).forward_fill()
    if last_t is not None:
        prev_t = prev_t.fill_null(last_t)
    return typed.with_columns(
        prev_t.alias("prev_t"),
        pl.when(pl.col("seq").is_not_null()).then(seq_earlier).alias("seq_seen_before"),
        pl.when(completion & pl.col("task_id").is_not_null())
        .then(task_earlier)
        .alias("task_seen_before"),
    )


def _missing_list(columns: Sequence[str], when: pl.Expr | None = None) -> list[pl.Expr]:
    return [
        pl.when(pl.col(c).is_null() if when is None else (when & pl.col(c).is_null())).then(
            pl.lit(c)
        )
        for c in columns
    ]


def _detail_expr() -> pl.Expr:
    """A short reason per flagged row: which columns, which values."""
    completion = pl.col("kind") == "completion"
    missing = pl.concat_str(
        _missing_list(KEY_COLUMNS + COMMON_COLUMNS)
        + _missing_list(DECISION_REQUIRED, pl.col("kind") == "decision")
        + _missing_list(COMPLETION_REQUIRED, completion),
        separator=",",
        ignore_nulls=True,
    )
    parts = [
        pl.when(pl.col(Rule.BAD_TYPE.value)).then(
            pl.lit("bad type: ") + pl.col("bad_type_columns")
        ),
        pl.when(missing != "").then(pl.lit("null: ") + missing),
        pl.when(pl.col(Rule.UNKNOWN_KIND.value)).then(pl.lit("kind=") + pl.col("kind")),
        pl.when(pl.col(Rule.NON_POSITIVE_DURATION.value)).then(
            pl.lit("duration_s=") + pl.col("duration_s").cast(pl.String)
        ),
        pl.when(pl.col(Rule.UNKNOWN_TASK_TYPE.value)).then(
            pl.lit("task_type=") + pl.col("task_type")
        ),
        pl.when(pl.col(Rule.TIME_OUT_OF_ORDER.value)).then(
            pl.concat_str(
                [
                    pl.lit("t=") + pl.col("t").cast(pl.String),
                    pl.lit("prev_t=") + pl.col("prev_t").cast(pl.String),
                    pl.lit("submit_s=") + pl.col("submit_s").cast(pl.String),
                    pl.lit("start_s=") + pl.col("start_s").cast(pl.String),
                ],
                separator=" ",
                ignore_nulls=True,
            )
        ),
        pl.when(pl.col("seq_seen_before") > 0).then(
            pl.lit("seq ") + pl.col("seq").cast(pl.String) + pl.lit(" seen before")
        ),
        pl.when(completion & (pl.col("task_seen_before") > 0)).then(
            pl.lit("task ") + pl.col("task_id") + pl.lit(" completed before")
        ),
    ]
    return pl.concat_str(parts, separator="; ", ignore_nulls=True).alias("detail")


def _duck_type(dtype: pl.DataType) -> str:
    if dtype.is_integer():
        return "BIGINT"
    if dtype.is_float():
        return "DOUBLE"
    if dtype == pl.Boolean:
        return "BOOLEAN"
    if dtype == pl.Date:
        return "DATE"
    if isinstance(dtype, pl.Datetime):
        return "TIMESTAMP"
    return "VARCHAR"


def _merged_type(old: str, new: str) -> str:
    if old == new:
        return old
    if {old, new} == {"BIGINT", "DOUBLE"}:
        return "DOUBLE"
    return "VARCHAR"


def _as_storable(frame: pl.DataFrame, column: str) -> pl.Series:
    series = frame[column]
    if _duck_type(series.dtype) != "VARCHAR" or series.dtype == pl.String:
        return series
    return pl.Series(
        column,
        [None if v is None else json.dumps(v, default=str) for v in series.to_list()],
        dtype=pl.String,
    )


class _Loader:
    """Loads the batches of one file inside the caller's transaction."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        work: FileWork,
        settings: IngestSettings,
        auditor: Callable[[], GxAuditor],
        state: FileState,
    ) -> None:
        self.samples: list[pl.DataFrame] = []
        self.flagged_sampled = 0
        self.con = con
        self.work = work
        self.settings = settings
        self.auditor = auditor
        self.state = state
        self.report = FileReport(work.path, work.format.value, work.action.value)
        self.exprs = rule_exprs(settings.task_types)
        self.table_columns = {
            table: dict(
                con.execute(
                    "SELECT column_name, data_type FROM information_schema.columns "
                    "WHERE table_name = ?",
                    [table],
                ).fetchall()
            )
            for table in ("decisions", "completions")
        }

    def _history(self, column: str, values: pl.Series, tables: Sequence[str]) -> pl.Series:
        """The distinct ``values`` that rows of this log in ``tables`` already hold."""
        candidates = values.unique().to_frame(column).to_arrow()  # noqa: F841 (replacement scan)
        union = " UNION ALL ".join(
            f"SELECT {column} FROM {t} WHERE source = $source"
            + (" AND kind = 'completion'" if t == "quarantine" and column == "task_id" else "")
            for t in tables
        )
        found = self.con.execute(
            f"SELECT DISTINCT c.{column} FROM candidates c "
            f"WHERE c.{column} IN (SELECT {column} FROM ({union}))",
            {"source": self.work.path},
        ).fetchall()
        return pl.Series(column, [r[0] for r in found], dtype=values.dtype)

    def add(self, batch: RawBatch) -> None:
        if batch.malformed:
            self._quarantine_malformed(batch.malformed)
        if batch.frame.height:
            self._add_records(batch.frame)
        self.report.records_read += batch.records
        self.state = replace(
            self.state,
            records_read=self.state.records_read + batch.records,
            offset_bytes=batch.end_offset,
        )

    def _add_records(self, raw: pl.DataFrame) -> None:
        typed = conform(raw)
        seqs_seen = tasks_seen = None
        if self.state.max_seq is not None:
            seqs = typed["seq"].drop_nulls()
            seqs = seqs.filter(seqs <= self.state.max_seq)
            if len(seqs):
                seqs_seen = self._history("seq", seqs, ("decisions", "completions", "quarantine"))
        if self.state.records_read > 0:
            tasks = typed.filter(pl.col("kind") == "completion")["task_id"].drop_nulls()
            if len(tasks):
                tasks_seen = self._history("task_id", tasks, ("completions", "quarantine"))
        staged = add_context(typed, self.state.last_t, seqs_seen, tasks_seen)
        staged = staged.with_columns(self.exprs.values())
        rule_names = [r.value for r in ROW_RULES]
        flagged = pl.any_horizontal([pl.col(n) for n in rule_names])
        staged = staged.with_columns(flagged.alias("_flagged"))
        self._collect_audit(staged)

        good = staged.filter(~pl.col("_flagged"))
        for kind, table, columns in (
            ("decision", "decisions", DECISION_TABLE),
            ("completion", "completions", COMPLETION_TABLE),
        ):
            rows = good.filter(pl.col("kind") == kind)
            if rows.height:
                self._insert_records(table, rows, columns)
                if kind == "decision":
                    self.report.decisions_loaded += rows.height
                else:
                    self.report.completions_loaded += rows.height
        n_flagged = staged.height - good.height
        if n_flagged:
            mask = staged["_flagged"]
            self._quarantine_rows(staged.filter(mask), raw.filter(mask))

        last_t = staged["t"].drop_nulls()
        seq_maxima = (self.state.max_seq, staged["seq"].max())
        self.state = replace(
            self.state,
            last_t=float(last_t[-1]) if len(last_t) else self.state.last_t,
            max_seq=max(
                (int(s) for s in seq_maxima if s is not None),  # type: ignore[arg-type]
                default=None,
            ),
        )

    def _insert_records(self, table: str, rows: pl.DataFrame, columns: Sequence[str]) -> None:
        skip = {"row_in_file", "kind", "_flagged", *CONTEXT_COLUMNS, *columns}
        skip |= {r.value for r in ROW_RULES}
        extras = [
            c for c in rows.columns
            if c not in skip and rows[c].null_count() < rows.height
        ]
        known = self.table_columns[table]
        out = rows.select(columns)
        for c in extras:
            series = _as_storable(rows, c)
            new = _duck_type(series.dtype)
            if c not in known:
                self.con.execute(f'ALTER TABLE {table} ADD COLUMN "{c}" {new}').fetchall()
                known[c] = new
            elif (merged := _merged_type(known[c], new)) != known[c]:
                self.con.execute(f'ALTER TABLE {table} ALTER "{c}" TYPE {merged}').fetchall()
                known[c] = merged
            if known[c] == "VARCHAR" and series.dtype != pl.String:
                series = series.cast(pl.String)
            out = out.with_columns(series)
        batch = out.to_arrow()  # noqa: F841 (replacement scan)
        self.con.execute(
            f"INSERT INTO {table} BY NAME SELECT $source AS source, * FROM batch",
            {"source": self.work.path},
        ).fetchall()

    def _quarantine_rows(self, bad: pl.DataFrame, raw: pl.DataFrame) -> None:
        labels = first_rule_and_all(bad.select([r.value for r in ROW_RULES]))
        record_columns = [c for c in raw.columns if c != "row_in_file"]
        records = (
            raw.select(pl.struct(record_columns).struct.json_encode().alias("record"))
            if record_columns
            else pl.DataFrame({"record": [None] * raw.height}, schema={"record": pl.String})
        )
        frame = pl.concat(
            [
                labels,
                bad.select(_detail_expr(), "row_in_file", "kind", "seq", "task_id"),
                records,
            ],
            how="horizontal",
        )
        self._insert_quarantine(frame)
        for rule, n in frame["rule"].value_counts().iter_rows():
            self.report.quarantined[rule] = self.report.quarantined.get(rule, 0) + n

    def _quarantine_malformed(self, lines: list[tuple[int, str, str]]) -> None:
        rule = Rule.MALFORMED_RECORD.value
        frame = pl.DataFrame(
            {
                "rule": [rule] * len(lines),
                "rules": [rule] * len(lines),
                "detail": [e for _, _, e in lines],
                "row_in_file": [n for n, _, _ in lines],
                "kind": [None] * len(lines),
                "seq": [None] * len(lines),
                "task_id": [None] * len(lines),
                "record": [text for _, text, _ in lines],
            },
            schema={"rule": pl.String, "rules": pl.String, "detail": pl.String,
                    "row_in_file": pl.Int64, "kind": pl.String, "seq": pl.Int64,
                    "task_id": pl.String, "record": pl.String},
        )
        self._insert_quarantine(frame)
        self.report.quarantined[rule] = self.report.quarantined.get(rule, 0) + len(lines)

    def _insert_quarantine(self, frame: pl.DataFrame) -> None:
        rows = frame.to_arrow()  # noqa: F841 (replacement scan)
        self.con.execute(
            "INSERT INTO quarantine BY NAME SELECT $source AS source, * FROM rows",
            {"source": self.work.path},
        ).fetchall()

    def _collect_audit(self, staged: pl.DataFrame) -> None:
        """Every row goes to GX now when ``audit_rows`` is None (before the file commits);
        otherwise the flagged rows (up to ``audit_flagged_rows``) and an evenly spaced sample
        of ``audit_rows`` passed ones are kept for the run's audit."""
        if self.settings.audit_rows is None:
            chosen = staged
        else:
            room = max(0, self.settings.audit_flagged_rows - self.flagged_sampled)
            flagged = staged.filter(pl.col("_flagged")).head(room)
            self.flagged_sampled += flagged.height
            passed = staged.filter(~pl.col("_flagged"))
            step = max(1, passed.height // max(1, self.settings.audit_rows))
            chosen = pl.concat([flagged, passed.gather_every(step)])
        if not chosen.height:
            return
        sample = chosen.with_columns(pl.lit(self.work.path).alias("source")).select(AUDIT_COLUMNS)
        self.report.audited_rows += sample.height
        if self.settings.audit_rows is None:
            for rule, n in self.auditor().audit(sample).unexpected.items():
                self.report.gx_unexpected[rule] = self.report.gx_unexpected.get(rule, 0) + n
        else:
            self.samples.append(sample)

    def finish(self) -> FileReport:
        if self.samples:
            self.report.audit_sample = pl.concat(self.samples)
        self.report.pending_bytes = max(0, self.work.size_bytes - self.state.offset_bytes)
        head = self.state.content_hash
        if self.work.format is LogFormat.JSONL:
            head = _sha256(Path(self.work.path), min(self.state.offset_bytes, HEAD_BYTES))
        else:
            self.state = replace(self.state, offset_bytes=self.work.size_bytes)
        self.state = replace(
            self.state,
            status="loaded",
            size_bytes=self.work.size_bytes,
            mtime_ns=self.work.mtime_ns,
            content_hash=head,
            rows_loaded=self.state.rows_loaded + self.report.rows_loaded,
            rows_quarantined=self.state.rows_quarantined + self.report.rows_quarantined,
        )
        _save_state(self.con, self.state)
        return self.report


def _fresh_state(work: FileWork) -> FileState:
    return FileState(
        work.path, work.format, "loaded", work.size_bytes, work.mtime_ns, work.content_hash,
        0, 0, 0, 0, None, None,
    )


def _delete_source(con: duckdb.DuckDBPyConnection, source: str) -> None:
    for table in ("decisions", "completions", "quarantine"):
        con.execute(f"DELETE FROM {table} WHERE source = ?", [source]).fetchall()


def _quarantine_file(
    con: duckdb.DuckDBPyConnection, work: FileWork, rule: Rule, detail: str
) -> FileReport:
    """One quarantine row for the whole file; the file's state records what was seen."""
    con.begin()
    try:
        con.execute(
            "INSERT INTO quarantine (source, rule, rules, detail) VALUES (?, ?, ?, ?)",
            [work.path, rule.value, rule.value, detail],
        ).fetchall()
        prev = work.previous or _fresh_state(work)
        _save_state(con, replace(
            prev, status="quarantined", size_bytes=work.size_bytes, mtime_ns=work.mtime_ns,
            content_hash=work.content_hash if work.format is LogFormat.PARQUET
            else prev.content_hash,
        ))
        con.commit()
    except BaseException:
        con.rollback()
        raise
    return FileReport(
        work.path, work.format.value, work.action.value, file_rule=rule.value, detail=detail,
    )


def ingest_file(
    con: duckdb.DuckDBPyConnection,
    work: FileWork,
    settings: IngestSettings,
    auditor: Callable[[], GxAuditor] | None = None,
) -> FileReport:
    """Read, check and load one file in one transaction; return what happened.

    A file that cannot be read whole is quarantined (one row) instead, and its earlier rows
    stay. Any other error rolls the file back and propagates. With ``audit_rows=None`` GX
    checks every row before the commit (``auditor`` builds it, default ``gx_auditor``);
    otherwise the report carries the rows for the run's ``audit_samples``.
    """
    if auditor is None:
        auditor = functools.partial(gx_auditor, settings.task_types)
    started = time.perf_counter()
    if work.action is Action.TOUCHED:
        assert work.previous is not None
        _save_state(con, replace(work.previous, size_bytes=work.size_bytes,
                                 mtime_ns=work.mtime_ns))
        return FileReport(work.path, work.format.value, work.action.value)
    if work.action is Action.TRUNCATED:
        return _quarantine_file(con, work, Rule.TRUNCATED_FILE, work.detail or "truncated")
    replacing = work.action is Action.REPLACED
    state = (
        _fresh_state(work) if replacing or work.previous is None
        else replace(work.previous, status="loaded")
    )
    con.begin()
    try:
        if replacing:
            _delete_source(con, work.path)
        loader = _Loader(con, work, settings, auditor, state)
        batches: Iterator[RawBatch] = (
            parquet_batches(work.path, settings.batch_rows)
            if work.format is LogFormat.PARQUET
            else jsonl_batches(work.path, state.offset_bytes, state.records_read,
                               settings.jsonl_batch_bytes)
        )
        for batch in batches:
            loader.add(batch)
        report = loader.finish()
        con.commit()
    except WholeFileProblem as problem:
        con.rollback()
        report = _quarantine_file(con, work, problem.rule, problem.detail)
    except BaseException:
        con.rollback()
        raise
    report.seconds = time.perf_counter() - started
    return report


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


@dataclass
class IngestSummary:
    """What one ingestion run did, over all files."""

    files_seen: int
    files_read: int
    files_quarantined: list[str]
    files_failed: dict[str, str]
    decisions_loaded: int
    completions_loaded: int
    quarantined_by_rule: dict[str, int]
    files: list[FileReport]
    counts: dict[str, int]
    gx_rows_checked: int = 0
    gx_unexpected: dict[str, int] = field(default_factory=dict)
    gx_error: str | None = None

    @property
    def rows_loaded(self) -> int:
        return self.decisions_loaded + self.completions_loaded

    @property
    def rows_quarantined(self) -> int:
        return sum(self.quarantined_by_rule.values())

    def line(self) -> str:
        """The one-line summary the CLI prints."""
        rules = ", ".join(f"{k} {v}" for k, v in sorted(self.quarantined_by_rule.items()))
        text = (
            f"{self.files_read} of {self.files_seen} files read; {self.rows_loaded} rows loaded "
            f"({self.decisions_loaded} decisions, {self.completions_loaded} completions); "
            f"{self.rows_quarantined} rows quarantined" + (f" ({rules})" if rules else "")
        )
        if self.files_quarantined:
            text += f"; {len(self.files_quarantined)} files quarantined whole"
        if self.files_failed:
            text += f"; {len(self.files_failed)} files failed"
        if self.gx_error:
            text += "; GX audit failed"
        return text

    def as_dict(self) -> dict[str, Any]:
        return {
            "files_seen": self.files_seen,
            "files_read": self.files_read,
            "files_quarantined": self.files_quarantined,
            "files_failed": self.files_failed,
            "rows_loaded": self.rows_loaded,
            "decisions_loaded": self.decisions_loaded,
            "completions_loaded": self.completions_loaded,
            "rows_quarantined": self.rows_quarantined,
            "quarantined_by_rule": self.quarantined_by_rule,
            "gx_rows_checked": self.gx_rows_checked,
            "gx_unexpected": self.gx_unexpected,
            "counts": self.counts,
        }


def summarize(
    reports: Sequence[FileReport],
    files_seen: int,
    failed: dict[str, str],
    counts: dict[str, int],
    audit: AuditResult | None = None,
) -> IngestSummary:
    """Totals of a run from its file reports and its GX audit (of the samples, or of every
    row as the files loaded)."""
    by_rule: dict[str, int] = {}
    gx_unexpected = dict(audit.unexpected) if audit else {}
    for r in reports:
        for rule, n in r.quarantined.items():
            if n:
                by_rule[rule] = by_rule.get(rule, 0) + n
        for rule, n in r.gx_unexpected.items():
            gx_unexpected[rule] = gx_unexpected.get(rule, 0) + n
    return IngestSummary(
        files_seen=files_seen,
        files_read=sum(1 for r in reports if r.action != Action.TOUCHED.value),
        files_quarantined=[r.path for r in reports if r.file_rule],
        files_failed=dict(failed),
        decisions_loaded=sum(r.decisions_loaded for r in reports),
        completions_loaded=sum(r.completions_loaded for r in reports),
        quarantined_by_rule=by_rule,
        files=list(reports),
        counts=counts,
        gx_rows_checked=sum(r.audited_rows for r in reports),
        gx_unexpected=gx_unexpected,
    )


def report_table(summary: IngestSummary) -> list[dict[str, Any]]:
    """One row per file handled, for a table artifact."""
    return [
        {
            "file": r.path,
            "action": r.action,
            "records_read": r.records_read,
            "decisions_loaded": r.decisions_loaded,
            "completions_loaded": r.completions_loaded,
            "rows_quarantined": r.rows_quarantined,
            "quarantined_whole": r.file_rule or "",
            "detail": r.detail or "",
            "gx_audited_rows": r.audited_rows,
            "pending_bytes": r.pending_bytes,
            "seconds": round(r.seconds, 3),
        }
        for r in summary.files
    ] + [
        {"file": path, "action": "failed", "detail": error}
        for path, error in summary.files_failed.items()
    ]


def report_markdown(summary: IngestSummary, logs_dir: str, db_path: str) -> str:
    """The run's totals and quarantine by rule, as markdown."""
    agrees = f"no: {summary.gx_error}" if summary.gx_error else "yes"
    lines = [
        "# Log ingestion",
        "",
        f"Logs `{logs_dir}` into warehouse `{db_path}`.",
        "",
        "| | |",
        "|---|---:|",
        f"| files seen | {summary.files_seen} |",
        f"| files read | {summary.files_read} |",
        f"| rows loaded | {summary.rows_loaded} |",
        f"| decisions loaded | {summary.decisions_loaded} |",
        f"| completions loaded | {summary.completions_loaded} |",
        f"| rows quarantined | {summary.rows_quarantined} |",
        f"| files quarantined whole | {len(summary.files_quarantined)} |",
        f"| files failed | {len(summary.files_failed)} |",
        f"| rows re-checked by Great Expectations | {summary.gx_rows_checked} |",
        f"| Great Expectations agrees with the rules | {agrees} |",
        "",
        "## Rows quarantined by rule",
        "",
        "| rule | rows |",
        "|---|---:|",
        *[f"| {rule} | {n} |" for rule, n in sorted(summary.quarantined_by_rule.items())],
    ]
    if summary.files_quarantined:
        lines += ["", "## Files quarantined whole", ""]
        lines += [
            f"- `{r.path}`: {r.file_rule} ({r.detail})" for r in summary.files if r.file_rule
        ]
    if summary.files_failed:
        lines += ["", "## Files that failed (rolled back; read again next run)", ""]
        lines += [f"- `{p}`: {e}" for p, e in summary.files_failed.items()]
    lines += ["", "## Warehouse rows", "", "| table | rows |", "|---|---:|"]
    lines += [f"| {t} | {n} |" for t, n in summary.counts.items()]
    return "\n".join(lines) + "\n"
