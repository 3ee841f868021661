"""The writer's after-commit callables (the decision log's records): they run once their
batch has committed, in queue order, before any caller of the batch hears of its commit, and
never for a batch that failed; the log's lines are flushed to the OS by then."""

from __future__ import annotations

import json
import random
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import pytest

from desched.service.decision_log import DecisionLog
from desched.service.errors import StaleWrite, Unavailable
from desched.service.records import UNKNOWN_DURATIONS, LiveTask, NewTask
from desched.service.store import Store, Write, insert_write
from desched.service.writer import Pending, Writer
from tests import test_service
from tests.test_service import Backend

backend = test_service.backend  # the fixture: SQLite, and PostgreSQL when one answers


def task(seq: int) -> LiveTask:
    return LiveTask.submitted(seq, "a", NewTask(task_type="extract"), 1.0, UNKNOWN_DURATIONS, None)


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


# Every write committed or failed (issue 18) ------------------------------------------------


def open_store(db: str) -> Store:
    """A migrated store holding the writer lock: the writer's connection."""
    store = Store(db)
    store.migrate()
    assert store.try_writer_lock()
    return store


def sqlite_store(tmp_path: Path) -> tuple[Store, str]:
    db = str(tmp_path / "w.db")
    return open_store(db), db


def seqs_in(db: str) -> set[int]:
    """The seqs of the tasks committed in ``db`` (read on a connection of its own)."""
    store = Store(db)
    try:
        return {int(r[0]) for r in store.execute("SELECT seq FROM tasks").fetchall()}
    finally:
        store.close()


@pytest.fixture
def db(backend: Backend) -> str:
    """A fresh database: a SQLite file, and a PostgreSQL schema when a server answers."""
    return backend.fresh()


class SlippingCondition(threading.Condition):
    """A condition whose first timed wait times out and, before the waiter re-takes the
    lock, lets ``slip`` (an ``add`` from another thread) run: an interleaving any real
    ``Condition.wait(timeout)`` allows, here made certain."""

    def __init__(self, slip: Callable[[], None]) -> None:
        super().__init__(threading.Lock())
        self.slip = slip
        self.slipping = False
        self.slipped = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        if timeout is None or self.slipping:
            return super().wait(timeout)
        self.slipping = True
        self.release()  # the wait timed out: the lock is free until the waiter re-takes it
        try:
            other = threading.Thread(target=self.slip)
            other.start()
            other.join()
        finally:
            self.slipped.set()
            self.acquire()
        return False


def test_a_write_added_between_an_idle_timeout_and_the_relock_is_committed(db: str) -> None:
    """The lost wakeup of issue 18: the writer's idle wait times out, an ``add`` slips in
    before the writer re-takes the lock, and the writer must commit that write, not run an
    idle round and drop it (with its waiter) silently."""
    store = open_store(db)
    idle_rounds: list[float] = []
    failures: list[BaseException] = []
    writer = Writer(store, failures.append, on_idle=lambda: idle_rounds.append(0.0), idle_s=0.01)
    slipped: list[Pending] = []
    condition = SlippingCondition(
        lambda: slipped.append(writer.add([insert_write(task(7), None, None, None)]))
    )
    writer.cond = condition
    writer.start()
    try:
        assert condition.slipped.wait(10)
        assert len(slipped) == 1
        slipped[0].result(5)  # raises TimeoutError when the write was dropped
    finally:
        writer.stop()
        store.close()
    assert not failures
    assert seqs_in(db) == {7}


def test_with_a_near_zero_idle_period_every_waiter_resolves_and_every_committed_row_exists(
    db: str,
) -> None:
    """Threads add inserts (and now and then a write that matches no row, which fails its
    batch) at random pauses while the writer's idle wait times out between almost every
    two of them, and another thread fails what is queued at random moments: every
    ``Pending`` resolves; those resolved have their row, those failed have none."""
    store = open_store(db)
    idle_rounds = [0]
    failures: list[BaseException] = []

    def idle() -> None:
        idle_rounds[0] += 1

    writer = Writer(store, failures.append, on_idle=idle, idle_s=0.0005)
    writer.start()
    done: list[tuple[int | None, Pending]] = []  # (seq inserted, or None for a stale write)
    added = threading.Lock()
    adders_done = threading.Event()

    class FailedOnPurpose(Exception):
        pass

    def adder(worker: int) -> None:
        rng = random.Random(worker)
        for k in range(120):
            time.sleep(rng.uniform(0.0, 0.003))
            if rng.random() < 0.04:
                write, seq = Write("UPDATE tasks SET state = 'done' WHERE seq = ?", (-1,)), None
            else:
                seq = worker * 1000 + k
                write = insert_write(task(seq), None, None, None)
            with added:  # the scheduler's lock: queue order is the order of ``done``
                done.append((seq, writer.add([write])))

    def failer() -> None:
        rng = random.Random(99)
        while not adders_done.wait(rng.uniform(0.005, 0.03)):
            writer.fail_queued(FailedOnPurpose())

    threads = [threading.Thread(target=adder, args=(w,)) for w in range(4)]
    chaos = threading.Thread(target=failer)
    for t in (*threads, chaos):
        t.start()
    for t in threads:
        t.join()
    adders_done.set()
    chaos.join()
    rounds_before = idle_rounds[0]
    deadline = time.monotonic() + 30
    while idle_rounds[0] == rounds_before and time.monotonic() < deadline:
        time.sleep(0.001)  # an idle gap: the writer's wait times out at least once more
    last = writer.add([insert_write(task(99_999), None, None, None)])
    done.append((99_999, last))
    outcomes: dict[int | None, list[str]] = {}
    try:
        for seq, pending in done:
            try:
                pending.result(10)
                outcome = "committed"
            except (StaleWrite, FailedOnPurpose) as exc:
                outcome = type(exc).__name__
            outcomes.setdefault(seq, []).append(outcome)
    finally:
        writer.stop()
        store.close()
    assert all(len(v) == 1 for s, v in outcomes.items() if s is not None)
    committed = {s for s, v in outcomes.items() if s is not None and v == ["committed"]}
    tally = Counter(o for v in outcomes.values() for o in v)
    print(
        f"{len(done)} writes: {dict(tally)}; {writer.batches} batches, "
        f"{idle_rounds[0]} idle rounds, {len(failures)} failed batches"
    )
    assert seqs_in(db) == committed
    assert outcomes.get(None) and "committed" not in outcomes[None]  # stale writes never commit
    assert 99_999 in committed  # the write after the idle gap
    assert idle_rounds[0] > rounds_before  # how many rounds depends on the machine's load
    assert all(isinstance(f, StaleWrite) for f in failures)


def test_a_writer_stopped_before_it_started_fails_what_was_queued(tmp_path: Path) -> None:
    store, _ = sqlite_store(tmp_path)
    writer = Writer(store, lambda exc: None)
    pending = writer.add([insert_write(task(0), None, None, None)])
    writer.stop(timeout_s=1)
    store.close()
    with pytest.raises(Unavailable, match="retry"):
        pending.result(1)
    with pytest.raises(Unavailable):
        writer.add([])


class BlockedStore:
    """Stands for a store whose transaction waits on a database lock until ``release``."""

    holds_writer_lock = True

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.committed = 0

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self.entered.set()
        self.release.wait(30)
        yield
        self.committed += 1

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        return len(rows)


@pytest.fixture
def thread_errors(monkeypatch: pytest.MonkeyPatch) -> list[BaseException]:
    """Exceptions that end any thread (``threading.excepthook``)."""
    seen: list[BaseException] = []
    monkeypatch.setattr(
        threading, "excepthook", lambda args: seen.append(args.exc_value)  # type: ignore[arg-type]
    )
    return seen


def test_stop_fails_the_writes_of_a_writer_blocked_on_a_database_lock_by_its_deadline(
    thread_errors: list[BaseException],
) -> None:
    store = BlockedStore()
    writer = Writer(cast(Store, store), lambda exc: None)
    in_flight = writer.add([Write("UPDATE x", ())])
    writer.start()
    assert store.entered.wait(10)
    queued = writer.add([Write("UPDATE y", ())])
    writer.stop(timeout_s=0.2)  # returns although the writer is still blocked
    assert writer.is_alive()
    for pending in (in_flight, queued):
        with pytest.raises(Unavailable, match="stopped before this write committed"):
            pending.result(0)
        assert isinstance(pending.exception(), Unavailable)
        assert pending.exception().retry_after_s == 1  # type: ignore[union-attr]
    with pytest.raises(Unavailable):
        writer.add([])
    store.release.set()  # the late commit neither resolves a failed waiter nor kills the thread
    writer.join(10)
    assert not writer.is_alive()
    assert store.committed == 1
    assert thread_errors == []
    assert isinstance(in_flight.exception(), Unavailable)


class Boom(BaseException):
    """Not an ``Exception``: nothing in the writer catches it, so its thread dies."""


def test_a_writer_thread_that_dies_fails_every_write_it_held_and_refuses_new_ones(
    tmp_path: Path, thread_errors: list[BaseException]
) -> None:
    store, db = sqlite_store(tmp_path)
    behind: list[Pending] = []

    def broken_recovery(exc: BaseException) -> None:
        behind.append(writer.add([insert_write(task(5), None, None, None)]))
        raise Boom()

    writer = Writer(store, broken_recovery)
    stale = Write("UPDATE tasks SET state = 'done' WHERE seq = ?", (-1,))
    failing = [writer.add([stale]), writer.add([insert_write(task(1), None, None, None)])]
    writer.start()
    writer.join(10)
    assert not writer.is_alive()
    assert [type(e) for e in thread_errors] == [Boom]
    for pending in (*failing, *behind):
        assert isinstance(pending.exception(1), Unavailable)
    with pytest.raises(Unavailable, match="shutting down"):
        writer.add([])
    store.close()
    assert seqs_in(db) == set()


def test_a_failing_idle_round_or_after_callable_leaves_the_writer_committing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, db = sqlite_store(tmp_path)

    idle_failed = threading.Event()

    def bad_idle() -> None:
        idle_failed.set()
        raise RuntimeError("idle round broke")

    def bad_after() -> None:
        raise RuntimeError("after broke")

    writer = Writer(store, lambda exc: None, on_idle=bad_idle, idle_s=0.001)
    writer.start()
    try:
        assert idle_failed.wait(10)  # an idle round failed
        first = writer.add([insert_write(task(1), None, None, None)], after=bad_after)
        first.result(10)  # committed: its caller hears so although its after failed
        second = writer.add([insert_write(task(2), None, None, None)])
        second.result(10)
    finally:
        writer.stop(timeout_s=5)
        store.close()
    assert seqs_in(db) == {1, 2}
    messages = [r.getMessage() for r in caplog.records]
    assert "writer idle round failed" in messages
    assert "after-commit callback failed" in messages


@pytest.mark.parametrize("ended_by", ["an idle round", "a commit"])
def test_a_database_outage_in_the_idle_rounds_is_logged_once_when_it_starts_and_once_at_its_end(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, ended_by: str
) -> None:
    # A PostgreSQL restart made every idle round (every 0.25 s) log a traceback: a few KiB a
    # second of stderr for as long as the server was down.
    store, db = sqlite_store(tmp_path)
    rounds = [0]
    failed_20, committed = threading.Event(), threading.Event()

    def idle() -> None:
        rounds[0] += 1
        if rounds[0] <= 10:
            raise Unavailable('cannot connect to PostgreSQL: connection to server at '
                              '"127.0.0.1", port 5432 failed: Connection refused')
        if rounds[0] > 20:
            failed_20.set()
        if rounds[0] <= 20 or (ended_by == "a commit" and not committed.is_set()):
            raise sqlite3.OperationalError("server closed the connection unexpectedly\nmore")

    writer = Writer(store, lambda exc: None, on_idle=idle, idle_s=0.001)
    with caplog.at_level("INFO", logger="desched.service"):
        writer.start()
        try:
            assert failed_20.wait(10)
            # In the writer thread, after the commit: the idle rounds get through from then on.
            writer.add([insert_write(task(1), None, None, None)], after=committed.set).result(10)
            records = [r for r in caplog.records if r.name == "desched.service"]
        finally:
            writer.stop(timeout_s=5)
            store.close()
    assert seqs_in(db) == {1}
    assert [r.levelname for r in records] == ["WARNING", "WARNING"], records
    assert not any(r.exc_info for r in records)
    lost, over = (r.getMessage() for r in records)
    assert lost.startswith("the writer's database session is lost, retrying every 0.00 s: ")
    assert lost.endswith("port 5432 failed: Connection refused") and "\n" not in lost
    assert over.startswith("the writer's database session is back after ")


def test_a_recovery_that_fails_still_fails_the_batch_waiters_and_the_writer_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, db = sqlite_store(tmp_path)

    def broken_recovery(exc: BaseException) -> None:
        raise RuntimeError("rebuild broke")

    writer = Writer(store, broken_recovery)
    stale = Write("UPDATE tasks SET state = 'done' WHERE seq = ?", (-1,))
    failed = writer.add([stale])
    writer.start()
    try:
        assert isinstance(failed.exception(10), StaleWrite)  # the batch's own error
        writer.add([insert_write(task(3), None, None, None)]).result(10)
    finally:
        writer.stop(timeout_s=5)
        store.close()
    assert seqs_in(db) == {3}
    assert "recovery after a failed commit failed" in [r.getMessage() for r in caplog.records]


def test_failing_says_why_from_a_failed_commit_until_a_commit_or_a_checking_idle_round_gets_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # /healthz says degraded while ``failing`` is set: a PostgreSQL session that psycopg had
    # left unusable once failed every write for a minute while /healthz said ok.
    store, db = sqlite_store(tmp_path)
    reached = threading.Event()  # whether an idle round checks the database (PostgreSQL)
    writer = Writer(store, lambda exc: None, on_idle=reached.is_set, idle_s=0.001)
    executemany = store.executemany

    def disk_error(sql: str, rows: Any) -> int:
        raise sqlite3.OperationalError("disk I/O error (injected)\nsecond line")

    writer.start()
    try:
        assert writer.failing is None
        stale = Write("UPDATE tasks SET state = 'done' WHERE seq = ?", (-1,))
        assert isinstance(writer.add([stale]).exception(10), StaleWrite)
        assert writer.failing is None  # memory and database disagree; the database works
        monkeypatch.setattr(store, "executemany", disk_error)
        failed = writer.add([insert_write(task(1), None, None, None)])
        assert isinstance(failed.exception(10), sqlite3.OperationalError)
        assert writer.failing == "disk I/O error (injected)"
        writer.add([]).result(10)  # a barrier writes nothing, and an idle round checks nothing
        time.sleep(0.05)
        assert writer.failing == "disk I/O error (injected)"
        monkeypatch.setattr(store, "executemany", executemany)
        writer.add([insert_write(task(2), None, None, None)]).result(10)
        assert writer.failing is None
        monkeypatch.setattr(store, "executemany", disk_error)
        assert writer.add([insert_write(task(3), None, None, None)]).exception(10) is not None
        assert writer.failing == "disk I/O error (injected)"
        reached.set()
        deadline = time.monotonic() + 10
        while writer.failing is not None:
            assert time.monotonic() < deadline, "a checking idle round did not clear it"
            time.sleep(0.001)
    finally:
        writer.stop(timeout_s=5)
        store.close()
    assert seqs_in(db) == {2}
