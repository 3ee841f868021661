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
same head, unless the log was rotated: a file now there that begins with the bytes another
loaded log was read to is that log moved (numbered rotations shift ``log.1`` to ``log.2``),
read on from there; else, where another log (a new file in the run continuing its loaded
bytes, below, or one loaded before) begins with the bytes it was read to, the file now at its
path is a new log, read from its first byte.

Copies. A Parquet log byte-identical to one loaded (or loaded earlier in the run) is skipped
and kept in the ledger as a ``copy``, so no later run loads it when its original changes. A
new JSON-lines log that begins with the bytes a loaded one was read to (the first 64 KiB of
them, whose hash the ledger keeps) is that log copied or rotated: it is read on from there,
and where the loaded log's file still begins with all of its bytes, it is a copy of it, read
to its end. (Rows are identified by their file: a log whose rows another file holds too,
without being a copy of it, is loaded again.)

Nothing is skipped silently. Every file under the logs folder is either read as a log or
named with the reason it was skipped (``survey``): a file whose name matches a pattern of
``IngestSettings.patterns`` is a log; any other ``.parquet`` file with a ``kind`` column, or
``.jsonl``/``.ndjson`` file whose first line is a record with a ``kind``, is a log by its
content (``decisions-1.parquet``, ``run-2.jsonl``); a rotated JSON-lines log is read as the
log whose name it ends (``run-log.jsonl.1``, ``run-log.jsonl-20261207``; not a compressed
one); every other file is skipped, reported with
its reason (a simulator's ``tasks.parquet`` and ``decisions.parquet``, beside the run's
``summary.json``, are not logs even where a trace column named ``kind`` was carried into
them; a ``summary.json`` is not a log format).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from desched.errors import DeschedError

if TYPE_CHECKING:
    import duckdb

    from desched.warehouse.settings import IngestSettings

RUN_TABLES = ("tasks.parquet", "decisions.parquet")
"""A simulation run folder's tables beside its ``summary.json``: never logs, whatever their
columns."""

HEAD_BYTES = 64 * 1024
"""Bytes at the start of a JSON-lines file whose hash tells a grown file from a new one."""


class LogFormat(StrEnum):
    PARQUET = "parquet"
    JSONL = "jsonl"

    @classmethod
    def from_path(cls, path: Path) -> LogFormat:
        return cls.PARQUET if path.suffix.lower() == ".parquet" else cls.JSONL


class Action(StrEnum):
    """What a run does with a file that changed since the last run."""

    NEW = "new"
    GROWN = "grown"
    REPLACED = "replaced"
    TRUNCATED = "truncated"
    TOUCHED = "touched"
    SKIPPED = "skipped"
    """Not a log (``survey``): reported with its reason, never read."""


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
    copy_of: str | None = None
    """A Parquet log skipped as a byte-identical copy of this loaded one: recorded in the
    ledger (status ``copy``), so that no later run loads it once the original changes."""
    continues: str | None = None
    """A new JSON-lines log that begins with the bytes of this loaded one (a copied or
    rotated log): ``previous`` is that log's state, and the file is read on from where that
    log was read to."""
    replaces: FileState | None = None
    """A continuation at the path of another loaded log (numbered rotations shift
    ``log.1`` onto ``log.2``): that path's own ledger row, which this file's replaces."""
    restarts: bool = False
    """A new JSON-lines log at the path of one rotated away (another file in this run
    continues its loaded bytes): ``previous`` is the rotated log's state, and the file is read
    from its first byte."""


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


LOG_SUFFIXES = (".parquet", ".jsonl", ".ndjson")


ROTATED = re.compile(r"(?P<log>.+\.(?:jsonl|ndjson))(?:[.-][0-9]+)+", re.IGNORECASE)
"""A rotated JSON-lines log's name (logrotate's ``run-log.jsonl.1``, ``run-log.jsonl-20261207``):
read as the log whose name it ends (a compressed one, ``.gz``, is not read)."""


def log_name(name: str) -> str:
    """``name`` without a rotation's numbered tail (``ROTATED``)."""
    rotated = ROTATED.fullmatch(name)
    return rotated.group("log") if rotated else name


def _not_a_log(path: Path) -> str | None:
    """Why ``path``, whose name matches no log pattern, is not a log by its content (None: it
    is one)."""
    suffix = Path(log_name(path.name)).suffix.lower()
    if suffix not in LOG_SUFFIXES:
        return f"not a log format ({suffix or 'no suffix'}; logs are .parquet or .jsonl)"
    if path.name in RUN_TABLES and (path.parent / "summary.json").is_file():
        # a trace column named 'kind' is carried into tasks.parquet: the name decides here
        return (f"a simulation run's {path.name}, not a log (the run's log is "
                "decision-log.parquet)")
    if suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            names = pq.read_schema(path).names
        except (pa.ArrowException, OSError, ValueError) as exc:
            return f"not a readable Parquet file ({type(exc).__name__})"
        if "kind" in names:
            return None
        shown = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
        return f"a Parquet table without a 'kind' column, not a decision log (columns: {shown})"
    with path.open("rb") as f:
        first = f.readline(1 << 20).strip()
    if not first:
        return "empty: no record yet"
    try:
        record = json.loads(first)
    except (ValueError, UnicodeDecodeError):
        return "its first line is not JSON"
    if not isinstance(record, dict) or "kind" not in record:
        return "its first line is not a log record (no 'kind')"
    return None


def survey(logs_dir: str | Path, patterns: Sequence[str]) -> tuple[list[Path], dict[str, str]]:
    """Every file under ``logs_dir`` (recursively): the logs to read, sorted, and the others
    with the reason each is skipped (module docstring)."""
    root = Path(logs_dir)
    if not root.is_dir():
        raise DeschedError(f"logs folder {root} does not exist or is not a folder")
    logs: set[Path] = set()
    skipped: dict[str, str] = {}
    for p in sorted(root.rglob("*")):
        if not p.is_file():
            continue
        path = p.resolve()
        if any(part.startswith(".") for part in p.relative_to(root).parts):
            skipped[str(path)] = "hidden file"
        elif any(fnmatch.fnmatch(log_name(p.name), pattern) for pattern in patterns) or (
                reason := _not_a_log(p)) is None:
            logs.add(path)
        else:
            skipped[str(path)] = reason
    return sorted(logs), skipped


def find_logs(logs_dir: str | Path, patterns: Sequence[str]) -> list[Path]:
    """The log files under ``logs_dir`` (``survey``)."""
    return survey(logs_dir, patterns)[0]


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


def _read_before(path: Path, size: int, states: dict[str, FileState], claimed: set[str]
                 ) -> FileState | None:
    """The loaded JSON-lines log (another path) whose bytes read so far begin ``path`` (the
    first ``min(offset, HEAD_BYTES)`` of them, those its ledger row keeps the hash of), the
    one read furthest where several do; ``None`` where none does."""
    found: FileState | None = None
    heads: dict[int, str] = {}
    for st in states.values():
        if (st.format is LogFormat.PARQUET or st.status != "loaded" or not st.content_hash
                or st.path == str(path) or st.path in claimed
                or not 0 < st.offset_bytes <= size):
            continue
        n = min(st.offset_bytes, HEAD_BYTES)
        if n not in heads:
            heads[n] = sha256_of(path, n)
        if heads[n] == st.content_hash and (found is None
                                            or st.offset_bytes > found.offset_bytes):
            found = st
    return found


def _continuation(path: Path, key: str, fmt: LogFormat, size: int, mtime: int,
                  earlier: FileState, replaces: FileState | None = None) -> FileWork:
    """The work of a new JSON-lines log that begins with ``earlier``'s bytes read so far.
    Where ``earlier``'s file still begins with all of this one's bytes, it is a copy of it:
    recorded as read to its end (``earlier``'s own run reads what is new in both); else (a
    rotated log: ``earlier``'s path holds another file now) it is read on from ``earlier``'s
    offset. ``replaces``: the ledger row of ``path`` itself, where a loaded log was there
    before (a numbered rotation moved ``earlier``'s file onto it)."""
    state = replace(earlier, path=key, status="loaded", size_bytes=size, mtime_ns=mtime,
                    rows_loaded=0, rows_quarantined=0)
    detail = f"begins with the {earlier.offset_bytes:,} bytes of {earlier.path} loaded already"
    source = Path(earlier.path)
    if (size > earlier.offset_bytes and source.is_file() and source.stat().st_size >= size
            and sha256_of(source, size) == sha256_of(path, size)):
        with path.open("rb") as f:
            lines = sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 20), b""))
        state = replace(state, offset_bytes=size, records_read=lines,
                        content_hash=sha256_of(path, min(size, HEAD_BYTES)))
    action = Action.GROWN if size > state.offset_bytes else Action.TOUCHED
    return FileWork(key, fmt, action, size, mtime, state.content_hash, state, detail,
                    continues=earlier.path, replaces=replaces)


def plan(
    con: duckdb.DuckDBPyConnection, logs_dir: str | Path, settings: IngestSettings
) -> tuple[list[FileWork], int]:
    """The files this run must handle (those it skips, as not logs or as byte-identical
    copies of a Parquet log loaded already or earlier in this run, among them as
    ``Action.SKIPPED`` with the reason in ``detail``), and how many log files it leaves as
    they are."""
    states = load_states(con)
    logs, skipped = survey(logs_dir, settings.patterns)
    work: list[FileWork] = [
        FileWork(path, LogFormat.from_path(Path(path)), Action.SKIPPED, 0, 0, None, None, why)
        for path, why in skipped.items()
    ]
    unchanged = 0
    # a Parquet log's whole-file hash -> the file that holds those rows (loaded, or new in
    # this run): a byte-identical copy elsewhere (a copied or rotated log) is skipped, not
    # loaded twice
    holder = {st.content_hash: key for key, st in states.items()
              if st.format is LogFormat.PARQUET and st.status == "loaded" and st.content_hash}
    claimed: set[str] = set()  # JSON-lines logs a new file in this run continues
    for path in logs:
        key = str(path)
        stat = path.stat()
        size, mtime = stat.st_size, stat.st_mtime_ns
        prev = states.get(key)
        if prev is not None and prev.size_bytes == size and prev.mtime_ns == mtime:
            unchanged += 1
            continue
        fmt = LogFormat.from_path(path)
        detail: str | None = None
        if fmt is LogFormat.PARQUET:
            whole = sha256_of(path)
            content_hash: str | None = whole
            if prev is None:
                action = Action.NEW
            elif prev.content_hash == content_hash:
                action = Action.TOUCHED
            else:
                action = Action.REPLACED
            other = holder.get(whole)
            copy_of = None
            if other is not None and other != key and (
                    action is Action.NEW or (prev is not None and prev.status == "copy")):
                action, detail = Action.SKIPPED, f"the same bytes as {other}, loaded already"
                copy_of = other
            else:
                holder.setdefault(whole, key)
            if copy_of is not None:
                work.append(FileWork(key, fmt, action, size, mtime, content_hash, prev, detail,
                                     copy_of=copy_of))
                continue
        elif prev is None:
            content_hash, action = None, Action.NEW
            earlier = _read_before(path, size, states, claimed)
            if earlier is not None:  # a copied or rotated log: on from where it was read to
                claimed.add(earlier.path)
                work.append(_continuation(path, key, fmt, size, mtime, earlier))
                continue
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
            if action is Action.TRUNCATED:
                earlier = _read_before(path, size, states, claimed)
                if earlier is not None:  # another loaded log moved here (rotations shift)
                    claimed.add(earlier.path)
                    work.append(_continuation(path, key, fmt, size, mtime, earlier, prev))
                    continue
        work.append(FileWork(key, fmt, action, size, mtime, content_hash, prev, detail))
    # A log rotated away (its loaded bytes continued by a new file in this run, or held by
    # another loaded log since an earlier one) leaves its path to a new log: read that from
    # its first byte, not quarantined as truncated, and after the rest (the rotated log's
    # records come before the new log's)
    work = [_restarted(w) if w.action is Action.TRUNCATED and (
                w.path in claimed or _held_elsewhere(w, states)) else w
            for w in work]
    return [w for w in work if not w.restarts] + [w for w in work if w.restarts], unchanged


def _held_elsewhere(work: FileWork, states: dict[str, FileState]) -> bool:
    """Whether another loaded JSON-lines log (a rotated or copied one, loaded in an earlier
    run) begins with the bytes ``work``'s path was read to: the first ``min(offset,
    HEAD_BYTES)`` of them, whose hash its ledger row keeps."""
    prev = work.previous
    if prev is None or work.format is LogFormat.PARQUET or not prev.content_hash:
        return False
    n = min(prev.offset_bytes, HEAD_BYTES)
    for st in states.values():
        if (st.path == prev.path or st.format is LogFormat.PARQUET or st.status != "loaded"
                or st.offset_bytes < prev.offset_bytes or n == 0):
            continue
        other = Path(st.path)
        try:
            if other.stat().st_size >= n and sha256_of(other, n) == prev.content_hash:
                return True
        except OSError:
            continue
    return False


def _restarted(work: FileWork) -> FileWork:
    """The work of a new JSON-lines log at the path of one rotated away: read from its
    first byte (the rows loaded from the path before stay: the rotated file holds their
    bytes, and its continuation reads on after them)."""
    path = Path(work.path)
    return replace(work, action=Action.NEW, restarts=True,
                   content_hash=sha256_of(path, min(work.size_bytes, HEAD_BYTES)),
                   detail="a new log where the rotated one was")
