"""Import of Standard Workload Format logs (Parallel Workloads Archive) as traces.

An SWF file (plain or gzip, recognised by its magic bytes, not its name) has one job a line,
18 whitespace-separated numeric fields, header lines starting with ';' and -1 for unknown
(data/samples/traces/SOURCE.md). A job becomes one trace row:

==============  =========================================================================
column          from (field number, 1-based)
==============  =========================================================================
task_id         ``"j{job}"`` (1)
tenant          ``"u{user}"`` (12); ``"unknown"`` when -1
task_type       ``"app{executable}"`` (14), else ``"q{queue}"`` (15), else ``"unknown"``
submit_s        submit time (2) minus the earliest kept submit time
duration_s      run time (4)
req_procs       requested processors (8), else allocated processors (5), else null
req_time_s      requested time (9), null when -1
procs           allocated processors (5), null when -1
used_mem_kb     used memory (7), null when -1
group           ``"g{group}"`` (13), null when -1
status          status (11): 1 completed, 0 failed, 5 cancelled; null when -1
swf_wait_s      the logged queue wait (3), null when -1: when the job really started, for
                leakage-safe history features; never a feature itself
==============  =========================================================================

Jobs that cannot be used are dropped and counted by reason in the ``SwfReport``, never
silently, in this order of precedence: a malformed line (not 18 fields, a field that is not
a number, a non-integer job, processor count, status or id, or one past 2^53), no submit time (negative), no
run time (negative, normally -1), zero run time (a trace needs ``duration_s > 0``), out of
range (a submit or run time above ``desched.trace.MAX_SECONDS``, 1e12 s), and a job number
seen on an earlier kept line. A UTF-8 byte-order mark at the start of the file is skipped. Rows keep file order, stably sorted by ``submit_s``.
The report's ``rejected`` frame is the quarantine: one row per dropped job with its line
number (1-based, counted as in ``lines_read``), its reason and the raw line.
"""

from __future__ import annotations

import gzip
import os
import re
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from desched.errors import DeschedError
from desched.trace import MAX_SECONDS, read_trace, validate_trace

FIELDS: tuple[str, ...] = (
    "job",
    "submit",
    "wait",
    "run_time",
    "procs",
    "cpu_time",
    "used_mem_kb",
    "req_procs",
    "req_time",
    "req_mem",
    "status",
    "user",
    "group",
    "executable",
    "queue",
    "partition",
    "preceding_job",
    "think_time",
)
"""The 18 SWF fields, in file order."""

_INTEGER_FIELDS = (
    "job",
    "procs",
    "req_procs",
    "status",
    "user",
    "group",
    "executable",
    "queue",
)
_GZIP_MAGIC = b"\x1f\x8b"
_OTHER_COMPRESSION = {b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz", b"PK\x03\x04": "zip",
                      b"\x28\xb5\x2f\xfd": "zstd", b"\x04\x22\x4d\x18": "lz4"}
"""Magic bytes of the compressions an SWF archive file may come in besides gzip."""
_COMPRESSED_SUFFIXES = {".bz2": "bzip2", ".xz": "xz", ".zip": "zip", ".zst": "zstd",
                        ".lz4": "lz4", ".7z": "7-zip"}


def _compression_refused(path: Path, kind: str) -> DeschedError:
    return DeschedError(f"{path}: compressed with {kind}; desched reads SWF logs as plain "
                        "text or gzip (.swf, .swf.gz): decompress it first")
REJECTED_SCHEMA = {"line": pl.Int64, "reason": pl.String, "text": pl.String}
"""Columns of ``SwfReport.rejected``."""


@dataclass(frozen=True, slots=True)
class SwfReport:
    """What ``import_swf`` read, kept and dropped.

    Invariant: ``job_lines == jobs_kept + dropped_total == jobs_kept + rejected.height`` and
    ``lines_read == header_lines + blank_lines + job_lines``. ``rejected`` holds the dropped
    jobs (``REJECTED_SCHEMA``: line, reason as in ``dropped``, raw text) in file order.
    """

    source: str
    lines_read: int
    header_lines: int
    blank_lines: int
    jobs_kept: int
    dropped_malformed: int
    dropped_no_submit_time: int
    dropped_no_run_time: int
    dropped_zero_run_time: int
    dropped_duplicate_job: int
    dropped_out_of_range: int = 0
    rejected: pl.DataFrame = field(
        default_factory=lambda: pl.DataFrame(schema=REJECTED_SCHEMA), repr=False, compare=False
    )

    @property
    def job_lines(self) -> int:
        """Lines that are neither headers nor blank: the jobs in the file."""
        return self.lines_read - self.header_lines - self.blank_lines

    @property
    def dropped(self) -> dict[str, int]:
        """Dropped jobs per reason, in precedence order."""
        return {
            "malformed": self.dropped_malformed,
            "no submit time": self.dropped_no_submit_time,
            "no run time": self.dropped_no_run_time,
            "zero run time": self.dropped_zero_run_time,
            "out of range": self.dropped_out_of_range,
            "duplicate job": self.dropped_duplicate_job,
        }

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())

    def summary(self) -> str:
        """One line: the file, jobs read, kept, and dropped per reason."""
        reasons = ", ".join(f"{reason} {count}" for reason, count in self.dropped.items())
        return (
            f"{self.source}: {self.job_lines} jobs in {self.lines_read} lines; "
            f"kept {self.jobs_kept}, dropped {self.dropped_total} ({reasons})"
        )


def _read_text(path: Path) -> str:
    if not path.is_file():
        raise DeschedError(f"{path}: no such SWF file")
    try:
        raw = path.read_bytes()
        if raw.startswith(_GZIP_MAGIC):
            raw = gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise DeschedError(
            f"{path}: not a readable SWF file ({type(exc).__name__}: {exc})"
        ) from None
    for magic, kind in _OTHER_COMPRESSION.items():
        if raw.startswith(magic):
            raise _compression_refused(path, kind)
    raw = raw.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte-order mark
    if b"\x00" in raw:
        raise DeschedError(f"{path}: not a readable SWF file (binary content)")
    return raw.decode("latin-1")


_LINE_END = re.compile(r"\r\n|\r|\n")


def split_lines(text: str) -> list[str]:
    r"""The lines of ``text``, ended by ``\n``, ``\r\n`` or ``\r`` only (``str.splitlines``
    also breaks at form feeds, U+0085 and other separators, which a latin-1 read of a
    Windows-1252 comment holds: a fake line, and every later line number off by one)."""
    lines = _LINE_END.split(text)
    if lines and lines[-1] == "":
        lines.pop()  # the file's last line break ends a line, it does not start one
    return lines


_MAX_EXACT = float(2**53)
"""Where float64 stops holding every whole number (2^53 + 1 reads as 2^53): an integer field
(an id, a count) at or past it is malformed, not rounded into another job's id or
overflowing an Int64 cast."""


def _parse(lines: pl.Series) -> pl.DataFrame:
    """One row per job line: the 18 fields as f64 and ``malformed`` (fields may be null then)."""
    frame = pl.DataFrame({"text": lines})
    tokens = pl.col("text").str.extract_all(r"\S+")
    frame = frame.with_columns(tokens.alias("tokens")).with_columns(
        (pl.col("tokens").list.len() == len(FIELDS)).alias("width_ok")
    )
    frame = frame.with_columns(
        pl.when(pl.col("width_ok"))
        .then(pl.col("tokens").list.get(i, null_on_oob=True))
        .otherwise(None)
        .cast(pl.Float64, strict=False)
        .alias(name)
        for i, name in enumerate(FIELDS)
    )
    numeric_ok = pl.all_horizontal(
        pl.col(name).is_not_null() & pl.col(name).is_finite() for name in FIELDS
    )
    integral_ok = pl.all_horizontal(  # whole, and exact as a float (an id past 2^53 is not)
        (pl.col(name) == pl.col(name).round(0)) & (pl.col(name).abs() < _MAX_EXACT)
        for name in _INTEGER_FIELDS
    )
    malformed = ~(pl.col("width_ok") & numeric_ok.fill_null(False) & integral_ok.fill_null(False))
    return frame.select(*FIELDS, malformed.alias("malformed"))


def _code(column: str, prefix: str) -> pl.Expr:
    """``prefix{n}`` for a known (>= 0) integer field, else null."""
    value = pl.col(column)
    return pl.when(value >= 0).then(pl.lit(prefix) + value.cast(pl.Int64).cast(pl.String))


def _known(column: str) -> pl.Expr:
    return pl.when(pl.col(column) >= 0).then(pl.col(column))


def import_swf(path: str | Path) -> tuple[pl.DataFrame, SwfReport]:
    """Read an SWF log (``.swf`` or ``.swf.gz``) into a validated trace and its report.

    Columns and drop rules are in the module docstring. Cost: one pass of vectorised polars
    over the file's lines (the 122k-job LANL log takes well under a second). Raises
    ``DeschedError`` naming the file when it is missing, unreadable, or has no usable job.
    """
    path = Path(path)
    text = _read_text(path)
    lines = pl.Series("text", split_lines(text), pl.String)
    stripped = lines.str.strip_chars()
    header = stripped.str.starts_with(";")
    blank = stripped.str.len_chars() == 0
    job_line = ~header & ~blank
    jobs = _parse(lines.filter(job_line)).with_columns(
        pl.Series("line", job_line.arg_true() + 1, pl.Int64), lines.filter(job_line)
    )

    reason = (
        pl.when(pl.col("malformed"))
        .then(pl.lit("malformed"))
        .when(pl.col("submit") < 0)
        .then(pl.lit("no submit time"))
        .when(pl.col("run_time") < 0)
        .then(pl.lit("no run time"))
        .when(pl.col("run_time") == 0)
        .then(pl.lit("zero run time"))
        .when((pl.col("submit") > MAX_SECONDS) | (pl.col("run_time") > MAX_SECONDS))
        .then(pl.lit("out of range"))
    )
    jobs = jobs.with_columns(reason.alias("reason"))
    usable = jobs.filter(pl.col("reason").is_null())
    first = pl.col("job").is_first_distinct()
    kept = usable.filter(first)
    rejected = pl.concat(
        [
            jobs.filter(pl.col("reason").is_not_null()),
            usable.filter(~first).with_columns(pl.lit("duplicate job").alias("reason")),
        ]
    ).sort("line").select(*REJECTED_SCHEMA)
    counts = dict(rejected["reason"].value_counts().iter_rows())

    report = SwfReport(
        source=str(path),
        lines_read=lines.len(),
        header_lines=int(header.sum()),
        blank_lines=int(blank.sum()),
        jobs_kept=kept.height,
        dropped_malformed=counts.get("malformed", 0),
        dropped_no_submit_time=counts.get("no submit time", 0),
        dropped_no_run_time=counts.get("no run time", 0),
        dropped_zero_run_time=counts.get("zero run time", 0),
        dropped_duplicate_job=counts.get("duplicate job", 0),
        dropped_out_of_range=counts.get("out of range", 0),
        rejected=rejected,
    )
    if kept.height == 0:
        raise DeschedError(f"{path}: no usable job ({report.summary()})")

    first_submit = kept["submit"].min()
    req_procs = _known("req_procs").fill_null(_known("procs")).cast(pl.Int64)
    trace = kept.select(
        (pl.lit("j") + pl.col("job").cast(pl.Int64).cast(pl.String)).alias("task_id"),
        _code("user", "u").fill_null(pl.lit("unknown")).alias("tenant"),
        _code("executable", "app")
        .fill_null(_code("queue", "q"))
        .fill_null(pl.lit("unknown"))
        .alias("task_type"),
        (pl.col("submit") - first_submit).alias("submit_s"),
        pl.col("run_time").alias("duration_s"),
        req_procs.alias("req_procs"),
        _known("req_time").alias("req_time_s"),
        _known("procs").cast(pl.Int64).alias("procs"),
        _known("used_mem_kb").alias("used_mem_kb"),
        _code("group", "g").alias("group"),
        _known("status").cast(pl.Int64).alias("status"),
        _known("wait").cast(pl.Float64).alias("swf_wait_s"),
    ).sort("submit_s", maintain_order=True)
    return validate_trace(trace, str(path)), report


def is_swf(path: str | Path) -> bool:
    """Whether ``path`` names an SWF log (``.swf`` or ``.swf.gz``, in any case)."""
    return Path(path).name.lower().endswith((".swf", ".swf.gz"))


def log_stem(path: str | Path) -> str:
    """The log's name without ``.gz`` and ``.swf`` (in any case): ``LANL-CM5-1994-4.1-cln`` for
    ``.../LANL-CM5-1994-4.1-cln.swf.gz``."""
    name = Path(path).name
    for suffix in (".gz", ".swf"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
    return name


def read_trace_or_swf(path: str | Path, replacing: tuple[str, ...] = ()) -> pl.DataFrame:
    """A trace Parquet file, or an SWF log (``.swf``, ``.swf.gz``) imported as a trace (as
    ``desched import-swf`` does, without writing it; its ``swf_wait_s`` gives the history
    features the jobs' real end times). Errors name the file. ``replacing``: as
    ``read_trace``'s."""
    name = Path(path).name.lower()
    stem, dot, ext = name.rpartition(".")
    if dot and stem.endswith(".swf") and f".{ext}" in _COMPRESSED_SUFFIXES:
        raise _compression_refused(Path(path), _COMPRESSED_SUFFIXES[f".{ext}"])
    if is_swf(path):
        frame, report = import_swf(path)
        if frame.height == 0:
            raise DeschedError(f"{path}: no usable job in this SWF log")
        note_dropped(report)
        return frame
    return read_trace(path, replacing)


_NOTED: set[str] = set()
NOTES_SEEN_ENV = "DESCHED_NOTES_SEEN"
"""Names the file of the notes already said by this process or the one that started it
(``share_notes``): a command and its pool's processes say each note once between them."""


_MADE_NOTES: list[tuple[int, str]] = []
"""The notes file this process made (its pid and path): it alone removes it."""


def share_notes() -> None:
    """Let this process and every process it starts from now on say each note once between
    them: the notes said go to a file named in the environment, which children inherit
    (``desched.bench.pool`` calls this before it starts processes). The process that made
    the file removes it at exit (``drop_shared_notes``; ``desched.bench.pool.exit_now``
    too, which skips the interpreter's exit hooks)."""
    if os.environ.get(NOTES_SEEN_ENV):
        return
    import atexit
    import tempfile

    fd, path = tempfile.mkstemp(prefix="desched-notes-")
    os.close(fd)
    os.environ[NOTES_SEEN_ENV] = path
    _MADE_NOTES.append((os.getpid(), path))
    atexit.register(drop_shared_notes)


def drop_shared_notes() -> None:
    """Remove the notes file this process made (``share_notes``), if any."""
    while _MADE_NOTES:
        pid, path = _MADE_NOTES.pop()
        if pid == os.getpid():
            Path(path).unlink(missing_ok=True)


def _first_to_say(line: str) -> bool:
    """Whether ``line`` was not yet said by this process, nor (where ``share_notes`` named a
    file) by a process sharing it; marks it said."""
    if line in _NOTED:
        return False
    _NOTED.add(line)
    shared = os.environ.get(NOTES_SEEN_ENV)
    if not shared:
        return True
    try:
        import fcntl

        # "r+": a file its maker already removed is not made again (and left behind)
        with open(shared, "r+", encoding="utf-8") as f:
            fcntl.flock(f, fcntl.LOCK_EX)  # two processes reading one log at once
            if line in f.read().splitlines():
                return False
            f.write(line + "\n")
            return True
    except (ImportError, OSError):  # no file locks here, or the file is gone: per process
        return True


def note_dropped(report: SwfReport) -> None:
    """One line on stderr when the import dropped jobs (``report.summary()``): a log imported
    on the fly says what it left out, as ``desched import-swf`` does; once for the same words
    in a process and in the processes sharing its notes (``share_notes``: a bench that reads
    one log for several steps, or on several of its pool's processes, says it once)."""
    line = f"note: {report.summary()}"
    if report.dropped_total and _first_to_say(line):
        print(line, file=sys.stderr, flush=True)
