"""Readers of log files: batches of raw records, numbered by their place in the file.

A Parquet file is read in record batches; a JSON-lines file from a byte offset, in chunks of
complete lines (a last line without its newline waits for a later run). A line that is not a
JSON object becomes a ``malformed`` entry of its batch; a file that cannot be read at all
raises ``WholeFileProblem`` with its rule. pyarrow is imported inside ``parquet_batches``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from desched.warehouse.rules import FILE_REQUIRED, Rule
from desched.warehouse.schema import RESERVED


class WholeFileProblem(Exception):
    """A file that is quarantined whole; raised by the readers."""

    def __init__(self, rule: Rule, detail: str) -> None:
        super().__init__(detail)
        self.rule = rule
        self.detail = detail


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
    except (pa.ArrowException, OSError) as exc:
        if (isinstance(exc, OSError) and not isinstance(exc, pa.ArrowInvalid)
                and not _undecodable(exc)):
            raise  # an I/O error: transient, retried
        raise _parquet_problem(p, exc) from None


def _undecodable(exc: Exception) -> bool:
    """Whether pyarrow's ``OSError`` says the bytes are there but do not decode (a corrupt
    page), which no retry mends, rather than that reading them failed."""
    text = str(exc).lower()
    return any(word in text for word in ("decompress", "corrupt", "deserializ", "invalid"))


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
