"""The writer's after-commit callables (the decision log's records): they run once their
batch has committed, in queue order, before any caller of the batch hears of its commit, and
never for a batch that failed; the log's lines are flushed to the OS by then."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from desched.service.decision_log import DecisionLog
from desched.service.errors import StaleWrite
from desched.service.records import LiveTask, NewTask
from desched.service.store import Store, Write, insert_write
from desched.service.writer import Writer


def task(seq: int) -> LiveTask:
    return LiveTask.submitted(seq, "a", NewTask(task_type="extract"), 1.0, float("nan"), None)


def rows(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM tasks").fetchone()[0])


def test_after_callables_run_after_the_commit_in_order_before_the_waiters(tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    store = Store(str(db))
    store.migrate()
    store.try_writer_lock()
    events: list[tuple[str, int, int]] = []  # (what, which, rows committed at that moment)
    failures: list[BaseException] = []
    writer = Writer(store, failures.append, after_batch=lambda: events.append(("batch", -1, 0)))
    pendings = []
    for k in range(5):  # queued before the writer starts: one batch
        pending = writer.add(
            [insert_write(task(k), None, None, None)],
            after=lambda k=k: events.append(("after", k, rows(db))),
        )
        pending.add_done_callback(lambda _, k=k: events.append(("woke", k, rows(db))))
        pendings.append(pending)
    writer.start()
    for pending in pendings:
        pending.result(10)
    writer.stop()
    store.close()
    assert not failures
    afters = [e for e in events if e[0] == "after"]
    assert [k for _, k, _ in afters] == [0, 1, 2, 3, 4]
    assert all(n == 5 for _, _, n in afters)  # committed before any after ran
    first_woke = next(j for j, e in enumerate(events) if e[0] == "woke")
    last_after = max(j for j, e in enumerate(events) if e[0] == "after")
    assert last_after < first_woke
    assert any(e[0] == "batch" for e in events[last_after:first_woke])  # the flush between


def test_a_failed_batch_runs_no_after_callable(tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    store = Store(str(db))
    store.migrate()
    store.try_writer_lock()
    ran: list[str] = []
    failures: list[BaseException] = []
    writer = Writer(store, failures.append, after_batch=lambda: ran.append("batch"))
    stale = Write("UPDATE tasks SET state = 'done' WHERE seq = ?", (12345,))  # changes no row
    pending = writer.add([stale], after=lambda: ran.append("after"))
    writer.start()
    try:
        pending.result(10)
        raise AssertionError("a batch whose write changed no row must fail")
    except StaleWrite:
        pass
    writer.stop()
    store.close()
    assert ran == []
    assert len(failures) == 1 and isinstance(failures[0], StaleWrite)


def test_the_logs_lines_reach_the_file_before_the_waiter_wakes(tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    store = Store(str(db))
    store.migrate()
    store.try_writer_lock()
    log = DecisionLog(tmp_path / "logs")
    writer = Writer(store, lambda exc: None, after_batch=log.flush)
    seen: list[list[dict[str, object]]] = []

    def read_log(_: object) -> None:  # in the writer thread, as the waiter is told
        assert log.path is not None
        seen.append([json.loads(x) for x in log.path.read_text().splitlines()])

    writer.start()
    for k in range(3):
        record = {"task_id": f"t{k}", "score": float("nan")}
        pending = writer.add(
            [insert_write(task(k), None, None, None)], after=log.line("decision", 1.0 + k, record)
        )
        pending.add_done_callback(read_log)
        pending.result(10)
    writer.stop()
    log.close()
    store.close()
    assert [len(lines) for lines in seen] == [1, 2, 3]
    assert [x["task_id"] for x in seen[-1]] == ["t0", "t1", "t2"]
    assert [x["seq"] for x in seen[-1]] == [0, 1, 2]
    assert all(x["score"] is None for x in seen[-1])
