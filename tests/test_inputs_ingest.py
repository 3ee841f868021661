"""Ingestion refuses what a discrete-event system cannot produce, and skips no file silently.

Each physically impossible record is quarantined under its own rule with a detail that names
the column and value; Great Expectations, checking every row, agrees with the polars rules.
Every file under the logs folder is read or named as skipped with its reason.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from desched.warehouse.settings import IngestSettings
from tests.test_ingest import completion, decision, query, run_once, simulated_log, write_jsonl

# case -> (records of one log, the line that breaks the rule, words the detail must hold)
CASES: dict[str, tuple[list[Any], int, tuple[str, ...]]] = {
    "negative_wait": (
        [decision(0, 1.0, "a", wait_s=-2.5)], 0, ("wait_s=-2.5",),
    ),
    "non_positive_duration": (
        [decision(0, 0.0, "a"), completion(1, 1.0, "a", duration_s=-1.0)], 1,
        ("duration_s=-1.0",),
    ),
    "start_before_submit": (
        [decision(0, 5.0, "a"), completion(1, 6.0, "a", submit_s=5.5, start_s=5.0)], 1,
        ("start_s=5.0", "submit_s=5.5"),
    ),
    "end_before_start": (
        [decision(0, 5.0, "a"), completion(1, 6.0, "a", start_s=7.0, submit_s=1.0)], 1,
        ("t=6.0", "start_s=7.0"),
    ),
    "end_after_clock": (
        [decision(0, 1.0, "a"), completion(1, 2.0, "a", start_s=1.0, duration_s=5.0)], 1,
        ("start_s+duration_s=6.0", "t=2.0"),
    ),
    "completion_without_decision": (
        [decision(0, 0.0, "a"), completion(1, 1.0, "ghost")], 1, ("ghost",),
    ),
    "time_out_of_order": (
        [decision(0, 3.0, "a"), decision(1, 2.0, "b")], 1, ("t=2.0", "prev_t=3.0"),
    ),
    "non_finite_value": (
        [decision(0, 0.0, "a"), completion(1, 1.0, "a", peak_mem_mb=math.inf)], 1,
        ("peak_mem_mb=inf",),
    ),
    "negative_amount": (
        [decision(0, 0.0, "a", queue_len=-1)], 0, ("queue_len=-1",),
    ),
    "unknown_status": (
        [decision(0, 0.0, "a"), completion(1, 1.0, "a", status="maybe")], 1, ("status=maybe",),
    ),
}


def _write(path: Path, records: list[Any]) -> Path:
    # json.dumps writes inf as Infinity, which JSON lines cannot hold: use Parquet for those
    if any(isinstance(v, float) and math.isinf(v) for r in records for v in r.values()):
        path = path.with_suffix(".parquet")
        path.parent.mkdir(parents=True, exist_ok=True)
        pl.from_dicts(records, infer_schema_length=None).write_parquet(path)
        return path
    return write_jsonl(path, records)


@pytest.mark.parametrize("rule", sorted(CASES))
def test_a_physically_impossible_record_is_quarantined_under_its_rule(tmp_path, rule):
    records, bad_line, words = CASES[rule]
    log = _write(tmp_path / "logs" / "live-log.jsonl", records)
    db = tmp_path / "w.duckdb"
    run_once(tmp_path / "logs", db)
    quarantined = query(db, "SELECT source, row_in_file, rule, detail FROM quarantine")
    assert quarantined.height == 1, quarantined
    row = quarantined.row(0, named=True)
    assert (row["source"], row["row_in_file"], row["rule"]) == (str(log), bad_line, rule)
    for word in words:
        assert word in row["detail"], (word, row["detail"])
    loaded = query(db, "SELECT count(*) AS n FROM decisions")["n"][0] + query(
        db, "SELECT count(*) AS n FROM completions")["n"][0]
    assert loaded == len(records) - 1


def test_gx_checking_every_row_agrees_with_the_physical_rules(tmp_path):
    # One log holding every case after the first clean record; GX re-checks every row and
    # raises RuleMismatch where it and polars disagree on any rule.
    records: list[Any] = []
    t = 0.0
    for name in sorted(CASES):
        if name in ("time_out_of_order", "non_finite_value"):
            continue  # t order spans the whole log; inf cannot go into JSON lines
        case, _, _ = CASES[name]
        for r in case:
            records.append({**r, "seq": len(records), "t": r["t"] + t,
                            "task_id": f"{name}-{r['task_id']}",
                            **({"start_s": r["start_s"] + t, "submit_s": r["submit_s"] + t}
                               if r["kind"] == "completion" else {})})
        t += 100.0
    write_jsonl(tmp_path / "logs" / "live-log.jsonl", records)
    reports = run_once(tmp_path / "logs", tmp_path / "w.duckdb", IngestSettings(audit_rows=None))
    # GX counts a row under every rule it breaks (end_before_start's row also ends after its
    # clock), the quarantine under the first: the same rules, and no RuleMismatch raised
    assert set(reports[0].gx_unexpected) == set(reports[0].quarantined)
    assert reports[0].gx_unexpected["end_after_clock"] == 2
    assert set(reports[0].quarantined) == set(CASES) - {"time_out_of_order", "non_finite_value"}


def test_a_completion_decided_in_an_earlier_log_is_not_an_orphan(tmp_path):
    write_jsonl(tmp_path / "logs" / "decision-log-day1.jsonl", [decision(0, 0.0, "a")])
    write_jsonl(tmp_path / "logs" / "decision-log-day2.jsonl", [completion(0, 1.0, "a")])
    run_once(tmp_path / "logs", tmp_path / "w.duckdb")
    assert query(tmp_path / "w.duckdb", "SELECT count(*) AS n FROM quarantine")["n"][0] == 0


def test_every_file_in_the_logs_folder_is_read_or_named_with_why_it_was_skipped(
    prefect_harness, tmp_path
):
    from click.testing import CliRunner
    from prefect.artifacts import Artifact

    from desched.cli import cli

    logs = tmp_path / "logs"
    run = simulated_log(logs / "run1")  # also writes tasks.parquet, decisions.parquet, ...
    pl.read_parquet(run).write_parquet(logs / "decisions-1.parquet")  # a log by content
    write_jsonl(logs / "run-2.jsonl", [decision(0, 0.0, "x"), completion(1, 1.0, "x")])
    write_jsonl(logs / "notes.jsonl", [{"note": "not a record"}])
    # a run of a trace that had a column named 'kind': it is carried into tasks.parquet,
    # which is still the run's table, not a log
    other = logs / "run3"
    other.mkdir()
    (other / "summary.json").write_text((run.parent / "summary.json").read_text())
    pl.read_parquet(run.parent / "tasks.parquet").with_columns(
        pl.lit("decision").alias("kind")).write_parquet(other / "tasks.parquet")
    (logs / "README.txt").write_text("what these are\n")
    result = CliRunner().invoke(
        cli, ["ingest", "--logs", str(logs), "--warehouse", str(tmp_path / "w.duckdb")]
    )
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    # decision-log.parquet and decisions-1.parquet (12 rows each: the second are duplicates
    # of nothing, being another file) and run-2.jsonl (2 rows)
    assert "3 of " in result.output and "26 rows loaded" in result.output
    every = {p.relative_to(logs).as_posix() for p in logs.rglob("*") if p.is_file()}
    read = {"run1/decision-log.parquet", "decisions-1.parquet", "run-2.jsonl"}
    for name in every - read:
        line = next((x for x in result.output.splitlines() if f"skipped {name}:" in x), None)
        assert line is not None, (name, result.output)
    assert "notes.jsonl: its first line is not a log record (no 'kind')" in result.output
    assert "run1/tasks.parquet: a simulation run's tasks.parquet, not a log" in result.output
    assert "run3/tasks.parquet: a simulation run's tasks.parquet, not a log" in result.output
    assert "README.txt: not a log format (.txt" in result.output
    markdown = str(Artifact.get("ingest-logs").data)  # type: ignore[union-attr]
    assert "## Files skipped" in markdown and "README.txt" in markdown


def test_an_empty_logs_folder_says_so_in_one_line(prefect_harness, tmp_path):
    from click.testing import CliRunner

    from desched.cli import cli

    (tmp_path / "logs").mkdir()
    result = CliRunner().invoke(
        cli, ["ingest", "--logs", str(tmp_path / "logs"), "--warehouse", str(tmp_path / "w.db")]
    )
    assert result.exit_code == 0
    assert result.output.strip() == f"{tmp_path / 'logs'}: no files, nothing to load"


def test_the_simulators_own_logs_keep_every_physical_rule(tmp_path):
    simulated_log(tmp_path / "logs" / "run1")
    run_once(tmp_path / "logs", tmp_path / "w.duckdb", IngestSettings(audit_rows=None))
    assert query(tmp_path / "w.duckdb", "SELECT count(*) AS n FROM quarantine")["n"][0] == 0
    assert query(tmp_path / "w.duckdb", "SELECT count(*) AS n FROM completions")["n"][0] == 6


@pytest.mark.parametrize(("args", "words"), [
    (["--warehouse", "NOTDB"], ["--warehouse", "cannot open it as a DuckDB database"]),
    (["--task-types", "re:["], ["task type pattern '['"]),
])
def test_a_bad_warehouse_or_task_type_pattern_is_one_line_before_prefect_starts(
    tmp_path, args, words
):
    from click.testing import CliRunner

    from desched.cli import cli

    (tmp_path / "logs").mkdir()
    (tmp_path / "notdb.duckdb").write_text("not a database\n")
    argv = ["ingest", "--logs", str(tmp_path / "logs"),
            *[str(tmp_path / "notdb.duckdb") if a == "NOTDB" else a for a in args]]
    if "--warehouse" not in argv:
        argv += ["--warehouse", str(tmp_path / "w.duckdb")]
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ")
    for word in words:
        assert word in lines[0]
    assert not (tmp_path / "w.duckdb").exists()  # refused before anything ran


# --- a QA pass over hostile logs (2026-12-07) ------------------------------------------------


def test_a_column_name_is_data_never_sql(tmp_path):
    # a column name was pasted into ALTER TABLE: this one wrote a file through COPY
    target = tmp_path / "pwned.csv"
    name = (f'x" BIGINT; COPY (SELECT 42 AS pwned) TO \'{target}\'; '
            'ALTER TABLE decisions ADD COLUMN "y')
    log = simulated_log(tmp_path / "run")
    logs = tmp_path / "logs"
    logs.mkdir()
    pl.read_parquet(log).with_columns(pl.lit(1).alias(name), pl.lit(2).alias('we"ird')
                                      ).write_parquet(logs / "hostile-log.parquet")
    [report] = run_once(logs, tmp_path / "w.duckdb")
    assert not target.exists()
    assert report.decisions_loaded == 6 and report.completions_loaded == 6
    quoted = '"' + name.replace('"', '""') + '"'
    stored = query(tmp_path / "w.duckdb",
                   f'SELECT {quoted} AS v, "we""ird" AS w FROM decisions')
    assert stored["v"].to_list() == [1] * 6 and stored["w"].to_list() == [2] * 6


def test_columns_duckdb_cannot_tell_apart_or_hold_are_kept_not_fatal(tmp_path):
    # 'Seq' beside 'seq' and a UInt64 past BIGINT made the file fail on every run
    log = simulated_log(tmp_path / "run")
    logs = tmp_path / "logs"
    logs.mkdir()
    pl.read_parquet(log).with_columns(
        pl.lit(7).alias("Seq"), pl.lit(2**64 - 1, dtype=pl.UInt64).alias("big"),
        pl.lit(3).alias("note"), pl.lit(4).alias("NOTE"),
    ).write_parquet(logs / "odd-log.parquet")
    [report] = run_once(logs, tmp_path / "w.duckdb")
    assert report.decisions_loaded == 6 and report.completions_loaded == 6
    row = query(tmp_path / "w.duckdb",
                "SELECT log_Seq, big, note, log_NOTE FROM decisions LIMIT 1").row(0)
    assert row == (7, str(2**64 - 1), 3, 4)


@pytest.mark.parametrize(("column", "values"), [
    ("worker", [True, False]),
    ("t", [pl.datetime(2026, 1, 1), pl.datetime(2026, 1, 2)]),
])
def test_a_boolean_or_a_timestamp_where_a_number_belongs_is_a_bad_type(tmp_path, column, values):
    # a true/false worker had loaded as 0/1 and a timestamp t as microseconds (a QA pass)
    logs = tmp_path / "logs"
    logs.mkdir()
    frame = pl.from_dicts([decision(0, 0.0, "a"), decision(1, 1.0, "b")])
    frame.with_columns(pl.select(pl.concat_list(values)).to_series().explode().alias(column)
                       ).write_parquet(logs / "typed-log.parquet")
    [report] = run_once(logs, tmp_path / "w.duckdb")
    assert report.decisions_loaded == 0 and report.quarantined == {"bad_type": 2}


def test_a_parquet_file_with_corrupt_pages_is_quarantined_whole_not_retried(tmp_path):
    log = simulated_log(tmp_path / "run")
    logs = tmp_path / "logs"
    logs.mkdir()
    raw = bytearray(log.read_bytes())
    for i in range(100, len(raw) - 4000):
        raw[i] ^= 0x55
    (logs / "corrupt-log.parquet").write_bytes(bytes(raw))
    [report] = run_once(logs, tmp_path / "w.duckdb")
    assert report.file_rule == "unreadable_file"


def test_a_file_another_run_loaded_after_this_one_planned_is_not_loaded_twice(tmp_path):
    from desched.warehouse.ledger import plan
    from desched.warehouse.load import ingest_file
    from desched.warehouse.schema import open_warehouse

    logs = tmp_path / "logs"
    simulated_log(logs / "run")
    settings = IngestSettings()
    db = tmp_path / "w.duckdb"
    with open_warehouse(db) as con:
        mine, _ = plan(con, logs, settings)  # two ingestions plan before either loads
        theirs, _ = plan(con, logs, settings)
        loaded = [ingest_file(con, w, settings) for w in theirs]
        again = [ingest_file(con, w, settings) for w in mine]
    assert sum(r.decisions_loaded for r in loaded) == 6
    skipped = [r for r in again if r.detail == "loaded by another run since this one planned"]
    assert len(skipped) == 1 and sum(r.decisions_loaded for r in again) == 0
    assert query(db, "SELECT count(*) AS n FROM decisions")["n"][0] == 6


def test_a_copy_of_a_parquet_log_stays_unloaded_after_its_original_changes(tmp_path):
    # the copy was skipped while the original held its bytes, then loaded once the original
    # was rewritten with more rows: every row twice (a QA pass)
    logs = tmp_path / "logs"
    log = simulated_log(logs / "run")
    copy = logs / "copy-of-decision-log.parquet"
    copy.write_bytes(log.read_bytes())
    db = tmp_path / "w.duckdb"
    run_once(logs, db)
    [holder] = query(db, "SELECT DISTINCT source FROM decisions")["source"].to_list()
    assert {holder} < {str(log), str(copy)}  # one of the two holds the rows, the other not
    frame = pl.read_parquet(holder)
    more = frame.filter(pl.col("kind") == "decision").tail(1).with_columns(
        pl.col("seq") + 100, pl.col("t") + 100, pl.col("task_id") + "-new")
    pl.concat([frame, more]).write_parquet(holder)  # it grows; the copy keeps the old bytes
    for _ in range(3):
        run_once(logs, db)
    assert query(db, "SELECT count(*) AS n FROM decisions")["n"][0] == 6 + 1
    assert query(db, "SELECT DISTINCT source FROM decisions")["source"].to_list() == [holder]


def test_a_rotated_or_copied_json_lines_log_is_read_on_from_what_was_loaded(tmp_path):
    logs = tmp_path / "logs"
    first = [decision(0, 0.0, "a"), completion(1, 1.0, "a")]
    later = [decision(2, 2.0, "b"), completion(3, 3.0, "b")]
    live = write_jsonl(logs / "decision-log.jsonl", first)
    db = tmp_path / "w.duckdb"
    run_once(logs, db)
    # a backup copy of what was loaded: nothing new in it
    (logs / "backup-log.jsonl").write_bytes(live.read_bytes())
    run_once(logs, db)
    assert query(db, "SELECT count(*) AS n FROM decisions")["n"][0] == 1
    # the log grows and is rotated (renamed away): the rotated file's rows loaded before are
    # not loaded again, the rest are (the path it left holds no log now)
    write_jsonl(logs / "decision-log.jsonl", first + later)
    live.rename(logs / "decision-log.1.jsonl")
    for _ in range(2):
        run_once(logs, db)
    ids = query(db, "SELECT task_id FROM decisions ORDER BY t")["task_id"].to_list()
    assert ids == ["a", "b"]
    assert query(db, "SELECT count(*) AS n FROM completions")["n"][0] == 2


@pytest.mark.parametrize("how", ["create", "create-later", "copytruncate"])
def test_a_new_log_at_a_rotated_logs_path_is_read_whole_not_quarantined(tmp_path, how):
    """logrotate's modes: the log renamed away and a new one created at its path (in one run
    or seen in the next), or copied away and truncated in place. Every record is loaded once,
    and nothing is quarantined as truncated."""
    logs = tmp_path / "logs"
    first = [decision(0, 0.0, "a"), completion(1, 1.0, "a")]
    more = [decision(2, 2.0, "b")]
    fresh = [decision(3, 3.0, "c"), completion(4, 4.0, "b"), completion(5, 5.0, "c")]
    live = write_jsonl(logs / "decision-log.jsonl", first)
    db = tmp_path / "w.duckdb"
    run_once(logs, db)
    write_jsonl(live, first + more)  # grows before the rotation
    rotated = logs / "decision-log.jsonl.1"
    if how == "copytruncate":
        rotated.write_bytes(live.read_bytes())
        write_jsonl(live, fresh)
    else:
        live.rename(rotated)
        if how == "create-later":
            run_once(logs, db)  # the path holds no log between the rename and the new one
        write_jsonl(live, fresh)
    for _ in range(2):
        run_once(logs, db)
    assert sorted(query(db, "SELECT task_id FROM decisions")["task_id"].to_list()) == [
        "a", "b", "c"]
    assert sorted(query(db, "SELECT task_id FROM completions")["task_id"].to_list()) == [
        "a", "b", "c"]
    assert query(db, "SELECT count(*) AS n FROM quarantine")["n"][0] == 0
    # the new log grows on: read from where it was read to
    write_jsonl(live, [*fresh, decision(6, 6.0, "d")])
    run_once(logs, db)
    assert query(db, "SELECT count(*) AS n FROM decisions")["n"][0] == 4


def test_numbered_rotations_shift_without_loading_a_record_twice(tmp_path):
    """logrotate's default: each rotation shifts ``.1`` to ``.2`` and the log to ``.1``. A
    file now at a loaded log's path that begins with another loaded log's bytes is that log
    moved there: read on from where it was read to, not again from its first byte."""
    logs, db = tmp_path / "logs", tmp_path / "w.duckdb"
    live = logs / "decision-log.jsonl"
    one, two = logs / "decision-log.jsonl.1", logs / "decision-log.jsonl.2"
    batches = [[decision(10 * k, 10.0 * k, f"k{k}"), completion(10 * k + 1, 10.0 * k + 1, f"k{k}")]
               for k in range(4)]
    write_jsonl(live, batches[0])
    run_once(logs, db)
    for k in range(1, 4):  # grows, is rotated (the older ones shift), a new log begins
        write_jsonl(live, [*live_records(live), decision(10 * k - 5, 10.0 * k - 5, f"x{k}")])
        if one.exists():
            one.rename(two)
        live.rename(one)
        write_jsonl(live, batches[k])
        run_once(logs, db)
    ids = sorted(query(db, "SELECT task_id FROM decisions")["task_id"].to_list())
    assert ids == sorted([f"k{k}" for k in range(4)] + [f"x{k}" for k in range(1, 4)])
    assert query(db, "SELECT count(*) AS n FROM completions")["n"][0] == 4
    assert query(db, "SELECT count(*) AS n FROM quarantine")["n"][0] == 0
    assert run_once(logs, db) == []


def live_records(path):
    import json

    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_copy_of_a_grown_json_lines_log_adds_only_what_it_adds_itself(tmp_path):
    logs = tmp_path / "logs"
    first = [decision(0, 0.0, "a"), completion(1, 1.0, "a")]
    write_jsonl(logs / "decision-log.jsonl", first)
    db = tmp_path / "w.duckdb"
    run_once(logs, db)
    # the log grows and is copied before the next run: the log's own run reads what is new,
    # the copy nothing; then the copy grows by itself: that is read from it
    grown = [*first, decision(10, 1.5, "g")]
    write_jsonl(logs / "decision-log.jsonl", grown)
    write_jsonl(logs / "copy-log.jsonl", grown)
    run_once(logs, db)
    write_jsonl(logs / "copy-log.jsonl", [*grown, decision(11, 1.6, "h")])
    run_once(logs, db)
    assert sorted(query(db, "SELECT task_id FROM decisions")["task_id"].to_list()) == [
        "a", "g", "h"]
    assert query(db, "SELECT count(*) AS n FROM quarantine")["n"][0] == 0
