"""Log ingestion: rules and quarantine, incremental and idempotent loads, the flow's report."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest

from desched.policies import make_policy
from desched.runs import write_run
from desched.simulator import simulate
from desched.warehouse.audit import audit_samples, gx_auditor
from desched.warehouse.ledger import plan
from desched.warehouse.load import ingest_file
from desched.warehouse.report import summarize
from desched.warehouse.rules import Rule, TaskTypes
from desched.warehouse.schema import open_warehouse, table_counts
from desched.warehouse.settings import IngestSettings
from tests.builders import T, make_frame, make_tasks

DROP = object()


def decision(seq: int, t: float, task_id: Any, **over: Any) -> dict[str, Any]:
    record = {
        "kind": "decision", "seq": seq, "t": t, "worker": 0, "task_id": task_id,
        "tenant": "a", "policy": "fifo", "score": 1.0, "queue_len": 1, "tenant_backlog": 1,
        "wait_s": 0.0,
    }
    return {k: v for k, v in {**record, **over}.items() if v is not DROP}


def completion(seq: int, t: float, task_id: Any, **over: Any) -> dict[str, Any]:
    duration = over.get("duration_s", 1.0)
    record = {
        "kind": "completion", "seq": seq, "t": t, "worker": 0, "task_id": task_id,
        "tenant": "a", "task_type": "extract", "submit_s": 0.0, "start_s": t - max(duration, 0),
        "duration_s": duration, "status": "ok", "peak_mem_mb": None, "pages": 3,
    }
    return {k: v for k, v in {**record, **over}.items() if v is not DROP}


def write_jsonl(path: Path, records: list[Any], tail: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    path.write_text("".join(line + "\n" for line in lines) + tail)
    return path


def simulated_log(folder: Path) -> Path:
    """A run folder of the simulator; its decision-log.parquet has 6 decisions, 6 completions."""
    tasks = (
        T("a", 0, 3), T("b", 0, 2, task_type="ocr_clean"), T("a", 1, 1),
        T("c", 2, 4, task_type="embed"), T("b", 2, 1, task_type="classify"), T("a", 5, 2),
    )
    table = make_tasks(*tasks)
    result = simulate(table, make_policy("ifs-memoryless", table), 2)
    write_run(folder, make_frame(*tasks), result, components=("norm_backlog", "norm_wait"),
              params={}, seed=0)
    return folder / "decision-log.parquet"


# Every kind of bad row, one each (two duplicates), between good ones. Line numbers = list
# positions.
BAD_LOG: list[Any] = [
    decision(0, 0.0, "t0"),                                   # 0 good
    decision(1, 0.0, "t1"),                                   # 1 good
    completion(2, 1.0, "t0"),                                 # 2 good
    decision(3, "soon", "t2"),                                # 3 bad_type (t)
    decision(4, 1.0, None),                                   # 4 missing_key (task_id)
    decision(5, 1.0, "t9", kind="heartbeat"),                 # 5 unknown_kind
    decision(6, 1.5, "t3", score=DROP),                       # 6 missing_value (score)
    completion(7, 2.0, "t1", duration_s=0.0),                 # 7 non_positive_duration
    completion(8, 2.0, "t2", task_type="translate"),          # 8 unknown_task_type
    decision(9, 0.5, "t4"),                                   # 9 time_out_of_order
    decision(2, 2.5, "t5"),                                   # 10 duplicate_id (seq 2)
    completion(11, 3.0, "t0"),                                # 11 duplicate_id (task t0)
    "this is not json",                                       # 12 malformed_record
    completion(13, 4.0, "t3", task_type="app12"),             # 13 good (an SWF task type)
    decision(14, 4.0, "t6"),                                  # 14 good
    decision(15, 4.5, " "),                                   # 15 missing_key (blank task_id)
]
BAD_LINES = {
    3: "bad_type", 4: "missing_key", 5: "unknown_kind", 6: "missing_value",
    7: "non_positive_duration", 8: "unknown_task_type", 9: "time_out_of_order",
    10: "duplicate_id", 11: "duplicate_id", 12: "malformed_record", 15: "missing_key",
}


def run_once(logs: Path, db: Path, settings: IngestSettings | None = None) -> list[Any]:
    """The pure path the flow's tasks wrap: plan, then load every planned file; the reports
    of the files read (those skipped as not logs left out)."""
    settings = settings or IngestSettings()
    with open_warehouse(db) as con:
        work, _ = plan(con, logs, settings)
        reports = [ingest_file(con, w, settings) for w in work]
    audit_samples(reports, lambda: gx_auditor(settings.task_types))
    return [r for r in reports if r.action != "skipped"]  # a run folder's tables, summary


def query(db: Path, sql: str) -> pl.DataFrame:
    with duckdb.connect(str(db)) as con:
        return con.sql(sql).pl()


def counts(db: Path) -> dict[str, int]:
    with duckdb.connect(str(db)) as con:
        return table_counts(con)


# --- the flow -----------------------------------------------------------------------------------


def test_a_clean_log_loads_every_row_and_a_second_run_adds_nothing(prefect_harness, tmp_path):
    from prefect.artifacts import Artifact

    from desched.flows.ingest import ingest_logs

    log = simulated_log(tmp_path / "logs" / "run1")
    db = tmp_path / "warehouse.duckdb"
    first = ingest_logs(str(tmp_path / "logs"), str(db))
    assert (first.files_read, first.decisions_loaded, first.completions_loaded) == (1, 6, 6)
    assert first.rows_quarantined == 0
    after_first = counts(db)
    assert after_first == {"decisions": 6, "completions": 6, "quarantine": 0, "ingested_files": 1}
    raw = pl.read_parquet(log)
    loaded = query(db, "SELECT * FROM decisions ORDER BY seq")
    expected = raw.filter(pl.col("kind") == "decision").sort("seq")
    assert loaded["task_id"].to_list() == expected["task_id"].to_list()
    assert loaded["norm_wait"].to_list() == expected["norm_wait"].to_list()
    assert set(query(db, "SELECT DISTINCT source FROM completions")["source"]) == {str(log)}

    second = ingest_logs(str(tmp_path / "logs"), str(db))
    # the run folder's tasks.parquet, decisions.parquet and summary.json are named as skipped
    assert (second.files_seen, second.files_read, second.rows_loaded) == (4, 0, 0)
    assert sorted(Path(p).name for p in second.files_skipped) == [
        "decisions.parquet", "summary.json", "tasks.parquet"]
    assert counts(db) == after_first
    report = Artifact.get("ingest-logs")
    assert report is not None and "| rows loaded | 0 |" in str(report.data)


def test_every_kind_of_bad_row_ends_in_quarantine_with_its_rule_and_file(prefect_harness, tmp_path):
    from prefect.artifacts import Artifact

    from desched.flows.ingest import ingest_logs

    log = write_jsonl(tmp_path / "logs" / "service-log.jsonl", BAD_LOG)
    db = tmp_path / "warehouse.duckdb"
    summary = ingest_logs(str(tmp_path / "logs"), str(db))

    assert (summary.decisions_loaded, summary.completions_loaded) == (3, 2)
    quarantined = query(db, "SELECT * FROM quarantine ORDER BY row_in_file")
    assert dict(zip(quarantined["row_in_file"], quarantined["rule"])) == BAD_LINES
    assert set(quarantined["source"]) == {str(log)}
    assert summary.quarantined_by_rule == {
        "bad_type": 1, "missing_key": 2, "unknown_kind": 1, "missing_value": 1,
        "non_positive_duration": 1, "unknown_task_type": 1, "time_out_of_order": 1,
        "duplicate_id": 2, "malformed_record": 1,
    }
    by_line = {r["row_in_file"]: r for r in quarantined.iter_rows(named=True)}
    assert by_line[3]["rules"] == "bad_type,missing_value" and "t" in by_line[3]["detail"]
    assert by_line[6]["detail"] == "null: score"
    assert json.loads(by_line[8]["record"])["task_type"] == "translate"
    assert by_line[12]["record"] == "this is not json"
    loaded = query(db, "SELECT seq FROM decisions UNION ALL SELECT seq FROM completions")
    assert sorted(loaded["seq"]) == [0, 1, 2, 13, 14]
    assert query(db, "SELECT pages FROM completions WHERE seq = 13")["pages"].to_list() == [3]
    assert summary.gx_rows_checked == len(BAD_LOG) - 1  # GX re-checked every record
    markdown = str(Artifact.get("ingest-logs").data)  # type: ignore[union-attr]
    assert "| non_positive_duration | 1 |" in markdown and "| duplicate_id | 2 |" in markdown


def test_truncated_and_unreadable_files_are_quarantined_whole_and_the_others_still_load(
    prefect_harness, tmp_path
):
    from desched.flows.ingest import ingest_logs

    logs = tmp_path / "logs"
    good = simulated_log(logs / "run1")
    data = good.read_bytes()
    (logs / "cut").mkdir()
    (logs / "cut" / "decision-log.parquet").write_bytes(data[: len(data) // 2])
    (logs / "noise-log.parquet").write_bytes(b"not parquet at all" * 10)
    (logs / "binary-log.jsonl").write_bytes(bytes(range(256)) * 4 + b"\n")
    write_jsonl(logs / "tail-log.jsonl", [decision(0, 0.0, "x")])
    db = tmp_path / "warehouse.duckdb"

    summary = ingest_logs(str(logs), str(db))
    assert summary.decisions_loaded == 6 + 1 and summary.completions_loaded == 6
    whole = query(db, "SELECT source, rule, detail FROM quarantine WHERE row_in_file IS NULL")
    rules = {
        Path(s).relative_to(logs).as_posix(): r for s, r in zip(whole["source"], whole["rule"])
    }
    assert rules == {
        "cut/decision-log.parquet": "truncated_file",
        "noise-log.parquet": "unreadable_file",
        "binary-log.jsonl": "unreadable_file",
    }
    assert sorted(Path(p).name for p in summary.files_quarantined) == [
        "binary-log.jsonl", "decision-log.parquet", "noise-log.parquet"
    ]
    assert counts(db)["quarantine"] == 3
    again = ingest_logs(str(logs), str(db))
    assert again.files_read == 0 and counts(db)["quarantine"] == 3


def test_the_ingest_command_prints_one_line_and_refuses_a_missing_folder(prefect_harness, tmp_path):
    from click.testing import CliRunner

    from desched.cli import cli

    simulated_log(tmp_path / "logs" / "run1")
    db = tmp_path / "w.duckdb"
    ok = CliRunner().invoke(
        cli, ["ingest", "--logs", str(tmp_path / "logs"), "--warehouse", str(db)]
    )
    assert ok.exit_code == 0, ok.output
    assert "12 rows loaded (6 decisions, 6 completions); 0 rows quarantined" in ok.output
    missing = CliRunner().invoke(
        cli, ["ingest", "--logs", str(tmp_path / "nope"), "--warehouse", str(db)]
    )
    assert missing.exit_code == 2
    assert "error: logs folder" in missing.output and "does not exist" in missing.output


def test_a_missing_or_empty_logs_folder_completes_with_0_files(prefect_harness, tmp_path):
    """A fresh set-up: the ingest-logs schedule fires before any log exists."""
    from prefect.artifacts import Artifact

    from desched.flows.ingest import ingest_logs

    logs, db = tmp_path / "data" / "logs", tmp_path / "data" / "w.duckdb"
    for _ in range(2):  # missing (created by the run), then empty
        state = ingest_logs(str(logs), str(db), return_state=True)
        assert state.is_completed(), state.message
        summary = state.result()
        assert summary.line().startswith("0 of 0 files read; 0 rows loaded")
        assert logs.is_dir() and db.is_file()
    report = Artifact.get("ingest-logs")
    assert report is not None and "0 of 0 files read" in str(report.description)


def test_a_file_that_fails_to_load_is_rolled_back_and_reported_after_the_others_load(
    prefect_harness, tmp_path, monkeypatch
):
    from prefect.artifacts import Artifact

    import desched.tasks.ingest
    from desched.errors import DeschedError
    from desched.flows.ingest import ingest_logs

    logs, db = tmp_path / "logs", tmp_path / "w.duckdb"
    simulated_log(logs / "run1")
    write_jsonl(logs / "broken-log.jsonl", [decision(0, 0.0, "x")])
    real = desched.tasks.ingest.load_file

    def flaky(con, work, settings, auditor=None):
        if work.path.endswith("broken-log.jsonl"):
            raise RuntimeError("disk on fire")
        return real(con, work, settings, auditor)

    monkeypatch.setattr(desched.tasks.ingest, "load_file", flaky)
    with pytest.raises(DeschedError, match="1 log files failed to load.*broken-log.jsonl"):
        ingest_logs(str(logs), str(db))
    assert counts(db)["decisions"] == 6 and counts(db)["ingested_files"] == 1
    assert "broken-log.jsonl" in str(Artifact.get("ingest-logs").data)  # type: ignore[union-attr]
    monkeypatch.setattr(desched.tasks.ingest, "load_file", real)
    again = ingest_logs(str(logs), str(db))
    assert again.files_read == 1 and again.decisions_loaded == 1


# --- incremental loads (no Prefect) -------------------------------------------------------------


def test_a_growing_jsonl_file_is_read_from_where_it_stopped(tmp_path):
    logs, db = tmp_path / "logs", tmp_path / "w.duckdb"
    first = [decision(0, 0.0, "a"), decision(1, 1.0, "b"), completion(2, 2.0, "a")]
    partial = json.dumps(decision(3, 3.0, "c"))
    log = write_jsonl(logs / "live-log.jsonl", first, tail=partial[:20])

    [report] = run_once(logs, db)
    assert (report.action, report.records_read, report.rows_loaded) == ("new", 3, 3)
    assert report.pending_bytes == 20

    with log.open("a") as f:
        f.write(partial[20:] + "\n")
        f.write(json.dumps(completion(4, 4.0, "b")) + "\n")
        f.write(json.dumps(decision(1, 5.0, "d")) + "\n")  # seq 1 was read last run
        f.write(json.dumps(completion(6, 6.0, "a")) + "\n")  # task a completed last run
    [report] = run_once(logs, db)
    assert (report.action, report.records_read, report.rows_loaded) == ("grown", 4, 2)
    assert report.quarantined == {"duplicate_id": 2}
    dupes = query(db, "SELECT row_in_file, detail FROM quarantine ORDER BY row_in_file")
    assert dupes.rows() == [(5, "seq 1 seen before"), (6, "task a completed before")]
    assert counts(db)["decisions"] + counts(db)["completions"] == 5
    assert run_once(logs, db) == []


def test_a_jsonl_file_that_shrank_is_reported_truncated_and_keeps_its_rows(tmp_path):
    logs, db = tmp_path / "logs", tmp_path / "w.duckdb"
    log = write_jsonl(logs / "live-log.jsonl", [decision(i, float(i), f"t{i}") for i in range(4)])
    run_once(logs, db)
    write_jsonl(log, [decision(0, 0.0, "t0")])
    [report] = run_once(logs, db)
    assert report.file_rule == "truncated_file" and "shrank" in (report.detail or "")
    assert counts(db)["decisions"] == 4
    assert run_once(logs, db) == []


def test_a_jsonl_file_rewritten_with_other_first_bytes_is_reported_truncated(
    tmp_path: Path,
) -> None:
    logs, db = tmp_path / "logs", tmp_path / "w.duckdb"
    log = write_jsonl(logs / "live-log.jsonl", [decision(0, 0.0, "t0"), decision(1, 1.0, "t1")])
    run_once(logs, db)
    write_jsonl(log, [decision(i, float(i), f"u{i}") for i in range(4)])  # longer, other head
    [report] = run_once(logs, db)
    assert report.file_rule == "truncated_file" and "first bytes changed" in (report.detail or "")
    assert counts(db)["decisions"] == 2


def test_a_parquet_log_touched_without_change_is_not_read_again(tmp_path):
    import os

    logs, db = tmp_path / "logs", tmp_path / "w.duckdb"
    log = simulated_log(logs / "run1")
    run_once(logs, db)
    os.utime(log, ns=(log.stat().st_atime_ns, log.stat().st_mtime_ns + 10**9))
    [report] = run_once(logs, db)
    assert report.action == "touched" and report.records_read == 0
    assert counts(db)["decisions"] == 6 and run_once(logs, db) == []


def test_a_byte_identical_copy_of_a_parquet_log_is_skipped_not_loaded_twice(tmp_path):
    import shutil

    from desched.warehouse.ledger import Action

    logs, db = tmp_path / "logs", tmp_path / "w.duckdb"
    log = simulated_log(logs / "run1")
    shutil.copy(log, logs / "copy-in-the-same-run.parquet")
    run_once(logs, db)
    assert counts(db)["decisions"] == 6  # one of the two identical files loaded
    (logs / "later").mkdir()
    shutil.copy(log, logs / "later" / "rotated.parquet")
    with open_warehouse(db) as con:
        work, _ = plan(con, logs, IngestSettings())
    [skipped] = [w for w in work if w.path.endswith("rotated.parquet")]
    assert skipped.action is Action.SKIPPED and skipped.detail is not None
    assert skipped.detail.startswith("the same bytes as ") and "loaded already" in skipped.detail
    assert run_once(logs, db) == [] and counts(db)["decisions"] == 6
    pl.read_parquet(log).head(4).write_parquet(logs / "later" / "other.parquet")
    [report] = run_once(logs, db)  # other bytes: loaded
    assert report.action == "new" and counts(db)["decisions"] + counts(db)["completions"] == 16


def test_gx_checking_every_row_agrees_with_the_rules_on_every_kind_of_bad_row(tmp_path):
    logs, db = tmp_path / "logs", tmp_path / "w.duckdb"
    write_jsonl(logs / "a-log.jsonl", BAD_LOG)
    [report] = run_once(logs, db, IngestSettings(audit_rows=None))
    assert report.audited_rows == len(BAD_LOG) - 1 and report.audit_sample is None
    assert report.rows_quarantined == len(BAD_LINES) and report.rows_loaded == 5
    summary = summarize([report], 1, {}, {})
    assert summary.gx_rows_checked == len(BAD_LOG) - 1
    assert summary.gx_unexpected["duplicate_id"] == 2  # what GX saw while loading is kept


def test_a_rewritten_parquet_log_replaces_what_its_earlier_version_loaded(tmp_path):
    logs, db = tmp_path / "logs", tmp_path / "w.duckdb"
    log = simulated_log(logs / "run1")
    run_once(logs, db)
    frame = pl.read_parquet(log)
    frame.head(4).write_parquet(log)
    [report] = run_once(logs, db)
    assert report.action == "replaced" and report.records_read == 4
    assert counts(db)["decisions"] + counts(db)["completions"] == 4


def test_a_parquet_log_read_in_many_batches_checks_order_and_ids_across_batches(tmp_path):
    logs, db = tmp_path / "logs", tmp_path / "w.duckdb"
    records = [decision(i, float(i), f"t{i}") for i in range(10)]
    records[7] = decision(3, 7.0, "t7")  # seq 3 again, in a later batch
    records[8] = decision(8, 2.0, "t8")  # earlier than the record before
    (logs).mkdir()
    pl.DataFrame(records).write_parquet(logs / "decision-log.parquet")
    [report] = run_once(logs, db, IngestSettings(batch_rows=3))
    assert report.quarantined == {"duplicate_id": 1, "time_out_of_order": 1}
    assert query(db, "SELECT row_in_file, rule FROM quarantine ORDER BY 1").rows() == [
        (7, "duplicate_id"), (8, "time_out_of_order")
    ]


def test_a_parquet_log_without_a_key_column_is_quarantined_whole(tmp_path):
    logs, db = tmp_path / "logs", tmp_path / "w.duckdb"
    logs.mkdir()
    pl.DataFrame([decision(0, 0.0, "a")]).drop("seq").write_parquet(logs / "decision-log.parquet")
    [report] = run_once(logs, db)
    assert report.file_rule == Rule.MISSING_COLUMN.value and "'seq'" in (report.detail or "")


# --- rules ------------------------------------------------------------------------------------


def test_known_task_types_take_names_and_patterns():
    types = TaskTypes.parse("extract, re:app\\d+")
    pattern = pl.Series(["extract", "app7", "apps", "embed"]).str.contains(types.regex)
    assert pattern.to_list() == [True, True, False, False]
    assert TaskTypes.parse(None) == TaskTypes()


def test_a_gx_verdict_that_differs_from_the_rules_fails_the_file_before_it_commits(tmp_path):
    from desched.warehouse.audit import RuleMismatch

    logs, db = tmp_path / "logs", tmp_path / "w.duckdb"
    write_jsonl(logs / "a-log.jsonl", BAD_LOG)
    every_row = IngestSettings(audit_rows=None)
    narrow = gx_auditor(TaskTypes(("nothing",), ()))  # knows fewer task types than the rules
    with open_warehouse(db) as con:
        [work], _ = plan(con, logs, every_row)
        with pytest.raises(RuleMismatch, match="unknown_task_type"):
            ingest_file(con, work, every_row, lambda: narrow)
        assert table_counts(con)["decisions"] == 0  # the file was rolled back


def test_the_run_audit_checks_the_sample_that_the_load_kept(tmp_path):
    from desched.warehouse.audit import RuleMismatch

    logs, db = tmp_path / "logs", tmp_path / "w.duckdb"
    write_jsonl(logs / "a-log.jsonl", BAD_LOG)
    settings = IngestSettings()
    with open_warehouse(db) as con:
        [work], _ = plan(con, logs, settings)
        report = ingest_file(con, work, settings)
    sample = report.audit_sample
    assert sample is not None and sample.height == len(BAD_LOG) - 1
    narrow = gx_auditor(TaskTypes(("nothing",), ()))
    with pytest.raises(RuleMismatch, match="unknown_task_type"):
        narrow.audit(sample)
    agreed = audit_samples([report], lambda: gx_auditor(settings.task_types))
    assert agreed.rows == len(BAD_LOG) - 1 and agreed.unexpected["duplicate_id"] == 2


def test_a_column_the_log_adds_becomes_a_column_of_its_table_and_widens_with_its_values(
    tmp_path,
):
    logs, db = tmp_path / "logs", tmp_path / "w.duckdb"
    log = write_jsonl(logs / "live-log.jsonl", [
        decision(0, 0.0, "a"),
        completion(1, 1.0, "a", pages=2, lang={"code": "fr"}),
        decision(2, 1.0, "b", norm_wait=0.5),
    ])
    run_once(logs, db)
    with log.open("a") as f:
        f.write(json.dumps(completion(3, 2.0, "b", pages=2.5)) + "\n")
    run_once(logs, db)
    completions = query(db, "SELECT pages, lang FROM completions ORDER BY seq")
    assert completions["pages"].to_list() == [2.0, 2.5]
    assert json.loads(completions["lang"][0]) == {"code": "fr"}
    b = query(db, "SELECT norm_wait FROM decisions WHERE task_id = 'b'")
    assert b["norm_wait"].to_list() == [0.5]
    assert "norm_wait" not in query(db, "SELECT * FROM completions").columns


def test_only_io_failures_are_retried():
    from types import SimpleNamespace

    from desched.errors import DeschedError
    from desched.tasks.ingest import _transient

    def retried(exc: BaseException) -> bool:
        return _transient(None, None, SimpleNamespace(data=exc))

    assert retried(OSError("gone")) and retried(duckdb.IOException("Could not set lock"))
    assert not retried(DeschedError("no such folder")) and not retried(RuntimeError("bug"))


def test_cancel_records_of_the_live_service_are_accepted_and_loaded_into_no_table(tmp_path):
    logs, db = tmp_path / "logs", tmp_path / "w.duckdb"
    cancel = {
        "kind": "cancel", "seq": 2, "t": 2.0, "worker": 7, "worker_name": "w/s0",
        "task_id": "b", "tenant": "a", "task_type": "extract", "submit_s": 0.0,
        "start_s": 1.0, "was": "leased",
    }
    write_jsonl(
        logs / "decision-log-1.jsonl",
        [decision(0, 0.0, "a"), decision(1, 1.0, "b"), cancel, completion(3, 3.0, "a")],
    )
    [report] = run_once(logs, db)
    assert (report.records_read, report.rows_loaded, report.quarantined) == (4, 3, {})
    assert counts(db)["decisions"] == 2 and counts(db)["completions"] == 1


def test_ingest_task_runs_are_named_by_folder_and_file_not_absolute_path(prefect_harness, tmp_path):
    import asyncio
    import time

    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    from desched.flows.ingest import ingest_logs

    simulated_log(tmp_path / "logs" / "run-a")
    state = ingest_logs(str(tmp_path / "logs"), str(tmp_path / "w.duckdb"), return_state=True)
    assert state.is_completed()
    runs = FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id]))

    async def names() -> list[str]:
        async with get_client() as client:
            return [r.name for r in await client.read_task_runs(flow_run_filter=runs)]

    deadline = time.monotonic() + 60  # task runs reach the API through events, a bit later
    seen = asyncio.run(names())
    while not any(n.startswith("ingest-") for n in seen):
        assert time.monotonic() < deadline, seen
        time.sleep(1)
        seen = asyncio.run(names())
    assert [n for n in seen if n.startswith("ingest-")] == ["ingest-run-a-decision-log.parquet"]
    assert not any(str(tmp_path) in n for n in seen)


@pytest.mark.parametrize("column", ["duration_s", "start_s", "submit_s", "t"])
@pytest.mark.parametrize("value", [math.inf, -math.inf])
def test_an_infinite_time_is_quarantined_as_non_finite_and_gx_agrees(tmp_path, column, value):
    # A completion with an infinite duration made the polars rules flag end_after_clock as
    # well (start + inf > t), which GX's pair test skips: the audit failed the whole file.
    log = simulated_log(tmp_path / "logs" / "run1")
    frame = pl.read_parquet(log)
    row = frame.with_row_index("i").filter(pl.col("kind") == "completion")["i"][2]
    frame = frame.with_columns(pl.when(pl.int_range(frame.height) == row).then(value)
                               .otherwise(pl.col(column)).alias(column))
    frame.write_parquet(log)
    [report] = run_once(tmp_path / "logs", tmp_path / "w.duckdb", IngestSettings(audit_rows=None))
    assert report.rows_quarantined >= 1 and report.audited_rows == frame.height
    rules = query(tmp_path / "w.duckdb", "SELECT rule FROM quarantine")["rule"].to_list()
    assert "non_finite_value" in rules
