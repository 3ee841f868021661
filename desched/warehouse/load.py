"""The incremental, idempotent load of log files into the warehouse.

``ingest_file`` reads one file's new bytes (``desched.warehouse.readers``), stages them
(``desched.warehouse.staging``), routes every row by the rules (``desched.warehouse.rules``)
into ``decisions``/``completions`` or ``quarantine``, and records the file in the ledger
(``desched.warehouse.ledger``), in one transaction.

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
import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from desched.warehouse.audit import GxAuditor, gx_auditor
from desched.warehouse.ledger import (
    HEAD_BYTES,
    Action,
    FileReport,
    FileState,
    FileWork,
    LogFormat,
    save_state,
    sha256_of,
)
from desched.warehouse.readers import RawBatch, WholeFileProblem, jsonl_batches, parquet_batches
from desched.warehouse.rules import (
    AUDIT_COLUMNS,
    CONTEXT_COLUMNS,
    ROW_RULES,
    Rule,
    first_rule_and_all,
    rule_exprs,
)
from desched.warehouse.schema import COMPLETION_TABLE, DECISION_TABLE
from desched.warehouse.settings import IngestSettings
from desched.warehouse.staging import add_context, conform, detail_expr

if TYPE_CHECKING:
    import duckdb


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


def _quoted(name: str) -> str:
    """``name`` as a DuckDB identifier: in double quotes, each one inside doubled (a log's
    column name is data, never SQL)."""
    return '"' + name.replace('"', '""') + '"'


def _stored_name(name: str, known: Mapping[str, str]) -> str:
    """The table column a log's extra column ``name`` goes to: itself, or ``log_<name>``
    (again, until free) where it differs from a table column only in case, which DuckDB's
    identifiers do not tell apart."""
    taken = {k.lower(): k for k in known}
    while name not in known and name.lower() in taken:
        name = f"log_{name}"
    return name


def _as_storable(frame: pl.DataFrame, column: str) -> pl.Series:
    series = frame[column]
    if series.dtype == pl.UInt64 and (series.max() or 0) > 2**63 - 1:  # type: ignore[operator]
        return series.cast(pl.String)  # past BIGINT: kept exact, as text
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

    def _decided(self, task_ids: pl.Series) -> pl.Series:
        """The ``task_ids`` that a decision record loaded before names (this log or another,
        loaded or quarantined): their completions were decided before them."""
        candidates = task_ids.to_frame("task_id").to_arrow()  # noqa: F841 (replacement scan)
        found = self.con.execute(
            "SELECT DISTINCT c.task_id FROM candidates c WHERE c.task_id IN ("
            "SELECT task_id FROM decisions UNION ALL "
            "SELECT task_id FROM quarantine WHERE kind = 'decision')"
        ).fetchall()
        return pl.Series("task_id", [r[0] for r in found], dtype=pl.String)

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
        undecided = staged.filter(pl.col("task_decided_before") == 0)["task_id"].unique()
        if len(undecided):
            staged = add_context(
                typed, self.state.last_t, seqs_seen, tasks_seen, self._decided(undecided)
            )
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
        for name in extras:
            c = _stored_name(name, known)
            series = _as_storable(rows, name).alias(c)
            new = _duck_type(series.dtype)
            if c not in known:
                self.con.execute(f"ALTER TABLE {table} ADD COLUMN {_quoted(c)} {new}").fetchall()
                known[c] = new
            elif (merged := _merged_type(known[c], new)) != known[c]:
                self.con.execute(f"ALTER TABLE {table} ALTER {_quoted(c)} TYPE {merged}"
                                 ).fetchall()
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
                bad.select(detail_expr(), "row_in_file", "kind", "seq", "task_id"),
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
            head = sha256_of(Path(self.work.path), min(self.state.offset_bytes, HEAD_BYTES))
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
        save_state(self.con, self.state)
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
        save_state(con, replace(
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
    if work.action is Action.SKIPPED:
        if work.copy_of is not None:  # kept in the ledger: never loaded once its original changes
            save_state(con, FileState(
                work.path, work.format, "copy", work.size_bytes, work.mtime_ns,
                work.content_hash, 0, 0, 0, 0, None, None))
        return FileReport(work.path, work.format.value, work.action.value, detail=work.detail)
    if work.action is Action.TOUCHED:
        assert work.previous is not None
        save_state(con, replace(work.previous, size_bytes=work.size_bytes,
                                 mtime_ns=work.mtime_ns))
        return FileReport(work.path, work.format.value, work.action.value)
    if work.action is Action.TRUNCATED:
        return _quarantine_file(con, work, Rule.TRUNCATED_FILE, work.detail or "truncated")
    replacing = work.action is Action.REPLACED
    current = con.execute(
        "SELECT size_bytes, mtime_ns, content_hash, offset_bytes FROM ingested_files "
        "WHERE path = ?", [work.path]).fetchall()
    # a continuation: no row of its own yet, or the row of the log it moved onto
    seen = work.replaces if work.continues else work.previous
    if (tuple(current[0]) if current else None) != (
            None if seen is None
            else (seen.size_bytes, seen.mtime_ns, seen.content_hash, seen.offset_bytes)):
        # another run loaded it between this run's plan and now (two ingestions at once):
        # loading it again would double its rows
        return FileReport(work.path, work.format.value, Action.SKIPPED.value,
                          detail="loaded by another run since this one planned")
    if replacing or work.previous is None:
        state = _fresh_state(work)
    elif work.restarts:  # a new log at a rotated one's path: its rows so far stay counted
        state = replace(_fresh_state(work), rows_loaded=work.previous.rows_loaded,
                        rows_quarantined=work.previous.rows_quarantined)
    else:
        state = replace(work.previous, status="loaded")
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
