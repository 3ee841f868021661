"""The write contract of the live service, in-process, on SQLite and PostgreSQL (issue 18).

A failed COMMIT leaves the connection usable; the read connection is only used under
``read_lock``, a takeover included; memory and database disagreeing (provoked here by
changing a row behind the service's back) is logged at ERROR with the evidence, counted in
``/metrics``, and the service recovers; the answers a client can act on (413 for a batch
over the burst, 503 with when to retry).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from desched.controls import TenantControl
from desched.service.app import create_app
from desched.service.clock import Clock
from desched.service.decision_log import DecisionLog
from desched.service.errors import Conflict, StaleWrite, Unavailable
from desched.service.records import NewTask, Role
from desched.service.scheduler import Scheduler
from desched.service.settings import ServiceSettings
from desched.service.store import Dialect, Store, Write, db_errors
from desched.service.writer import Writer, wait
from tests import test_service
from tests.test_service import Backend

backend = test_service.backend  # the fixture: SQLite, and PostgreSQL when one answers


class FakeTime:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def make_scheduler(db: str, folder: Path, **kw: Any) -> Scheduler:
    return Scheduler(
        Store(db),
        lease_s=10.0,
        max_retries=1,
        clock=Clock(source=FakeTime()),
        log=DecisionLog(folder / "logs"),
        **kw,
    )


@pytest.fixture
def db(backend: Backend) -> str:
    return backend.fresh()


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert match is not None, name
    return float(match.group(1))


# A failed COMMIT ---------------------------------------------------------------------------


def deferred_constraint(store: Store) -> None:
    """Tables whose foreign key is checked at COMMIT: a child without its parent makes the
    COMMIT itself fail."""
    if store.dialect is Dialect.SQLITE:
        store.execute("PRAGMA foreign_keys = ON")
    store.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    store.execute(
        "CREATE TABLE child (id INTEGER PRIMARY KEY, pid INTEGER REFERENCES parent (id) "
        "DEFERRABLE INITIALLY DEFERRED)"
    )


def test_a_commit_that_fails_rolls_back_and_leaves_the_connection_usable(db: str) -> None:
    store = Store(db)
    try:
        store.migrate()
        deferred_constraint(store)
        with pytest.raises(db_errors()), store.transaction():
            store.execute("INSERT INTO child (id, pid) VALUES (1, 99)")  # fails at COMMIT
        with store.transaction():  # would raise "within a transaction" if left open
            store.execute("INSERT INTO parent (id) VALUES (99)")
        other = Store(db)
        try:
            assert other.execute("SELECT id FROM parent").fetchall() == [(99,)]
            assert other.execute("SELECT COUNT(*) FROM child").fetchone()[0] == 0
        finally:
            other.close()
    finally:
        store.close()


def test_a_batch_whose_commit_fails_fails_its_waiters_and_the_next_batch_commits(
    db: str,
) -> None:
    store = Store(db)
    store.migrate()
    deferred_constraint(store)
    assert store.try_writer_lock()
    failures: list[BaseException] = []
    writer = Writer(store, failures.append)
    orphan = writer.add([Write("INSERT INTO child (id, pid) VALUES (?, ?)", (1, 99))])
    writer.start()
    try:
        assert isinstance(orphan.exception(10), db_errors())
        writer.add([Write("INSERT INTO parent (id) VALUES (?)", (99,))]).result(10)
    finally:
        writer.stop(timeout_s=10)
    assert len(failures) == 1
    assert store.execute("SELECT id FROM parent").fetchall() == [(99,)]
    assert store.execute("SELECT COUNT(*) FROM child").fetchone()[0] == 0
    store.close()


# The read connection -----------------------------------------------------------------------


def guard_read_connection(
    sched: Scheduler, monkeypatch: pytest.MonkeyPatch
) -> list[tuple[str, str]]:
    """Record every statement run on the scheduler's read connection while ``read_lock`` is
    free: ``(thread, sql)``. Request threads share that connection under the lock."""
    unguarded: list[tuple[str, str]] = []
    execute = sched.store.execute

    def checked(sql: str, params: Any = ()) -> Any:
        if not sched.read_lock.locked():
            unguarded.append((threading.current_thread().name, sql))
        return execute(sql, params)

    monkeypatch.setattr(sched.store, "execute", checked)
    return unguarded


def test_the_read_connection_is_used_only_under_the_read_lock_from_start_to_stop(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sched = make_scheduler(db, tmp_path, policy="vtc")
    unguarded = guard_read_connection(sched, monkeypatch)
    sched.start()
    try:
        ids, _, pending = sched.submit("acme", [NewTask("extract")])
        wait(pending)
        grant, pending = sched.poll("w", "slot")
        assert grant is not None
        wait(pending)
        sched.task_view("acme", ids[0])
    finally:
        sched.stop(timeout_s=10)
    assert unguarded == []


def test_a_standby_that_takes_over_writes_nothing_through_its_read_connection(
    backend: Backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if backend.kind != "postgres":
        pytest.skip("only PostgreSQL has a standby")
    db = backend.fresh()
    first = make_scheduler(db, tmp_path / "a", policy="ifs-memoryless")
    first.start()
    second = make_scheduler(db, tmp_path / "b", policy="vtc", standby_poll_s=0.05)
    unguarded = guard_read_connection(second, monkeypatch)
    try:
        second.start()
        assert first.active and not second.active
        first.stop(timeout_s=10)  # its session, and the writer lock with it, goes
        deadline = time.monotonic() + 30
        while not second.active and time.monotonic() < deadline:
            time.sleep(0.05)
        assert second.active
        with second.read_lock:
            recorded = second.store.recorded_policy()
        assert recorded is not None and '"vtc"' in recorded
    finally:
        second.stop(timeout_s=10)
    assert unguarded == []


def test_a_standby_whose_takeover_rebuild_fails_retries_it_and_serves(
    backend: Backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The standby got the writer lock but its rebuild hit a database error: it must not
    hold the lock without serving; the next idle round rebuilds again."""
    if backend.kind != "postgres":
        pytest.skip("only PostgreSQL has a standby")
    import psycopg

    db = backend.fresh()
    first = make_scheduler(db, tmp_path / "a")
    first.start()
    second = make_scheduler(db, tmp_path / "b", standby_poll_s=0.05)
    rebuild = second._rebuild
    broken = [1]

    def flaky_rebuild(spec: Any) -> None:
        if broken:
            broken.pop()
            raise psycopg.OperationalError("the server went away mid-rebuild")
        rebuild(spec)

    monkeypatch.setattr(second, "_rebuild", flaky_rebuild)
    try:
        second.start()
        ids, _, pending = first.submit("acme", [NewTask("extract")])
        wait(pending)
        first.stop(timeout_s=10)
        deadline = time.monotonic() + 30
        while not second.active and time.monotonic() < deadline:
            time.sleep(0.05)
        assert broken == [] and second.active
        assert second.health().queued == 1
        grant, pending = second.poll("w", "slot")
        assert grant is not None and grant.task.task_id == ids[0]
        wait(pending)
    finally:
        second.stop(timeout_s=10)


# Memory and database disagreeing -----------------------------------------------------------


def test_a_row_changed_behind_the_services_back_is_logged_counted_and_recovered_from(
    db: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sched = make_scheduler(db, tmp_path)
    sched.start()
    try:
        assert metric(sched.metrics(), "desched_state_disagreements_total") == 0
        _, _, pending = sched.submit("acme", [NewTask("extract"), NewTask("extract")])
        wait(pending)
        grant, pending = sched.poll("w", "slot")
        assert grant is not None
        wait(pending)
        leased = grant.task.task_id
        intruder = Store(db)  # an operator's UPDATE, not through the service
        intruder.execute("UPDATE tasks SET lease_id = ? WHERE task_id = ?", ("forged", leased))
        intruder.close()
        with caplog.at_level(logging.ERROR, logger="desched.service"):
            failed = sched.complete("w", leased, grant.lease_id, 1.0)
            assert sched.health().leased == 0  # memory ran ahead by the queued write
            woke_to: list[int] = []  # what memory held when the caller heard of the failure
            failed.add_done_callback(lambda _: woke_to.append(sched.health().leased))
            with pytest.raises(StaleWrite) as caught:
                failed.result(10)
        assert caught.value.status == 503 and caught.value.retry_after_s == 1
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1
        line = errors[0]
        assert "memory and database disagree" in line
        assert f"seq={grant.task.seq}" in line and f"task_id={leased!r}" in line
        assert "lease_id='forged'" in line  # the row as committed
        assert f"lease_id={grant.lease_id!r}" in line  # what the write expected
        assert "memory held the task as" in line
        assert metric(sched.metrics(), "desched_state_disagreements_total") == 1
        assert woke_to == [1]  # rebuilt from the database before the caller woke
        # Memory was rebuilt from the database: it now agrees with the forged row.
        assert sched.health().leased == 1 and sched.health().queued == 1
        with pytest.raises(Conflict):
            sched.complete("w", leased, grant.lease_id, 1.0)
        wait(sched.complete("w", leased, "forged", 1.0))
        other, pending = sched.poll("w", "slot")
        assert other is not None and other.task.task_id != leased
        wait(pending)
        wait(sched.complete("w", other.task.task_id, other.lease_id, 1.0))
        with sched.read_lock:
            assert sched.store.count_by_state() == {"done": 2}
        assert metric(sched.metrics(), "desched_state_disagreements_total") == 1
    finally:
        sched.stop(timeout_s=10)


# Answers a client can act on ---------------------------------------------------------------


@pytest.fixture
def client(tmp_path: Path) -> Iterator[tuple[TestClient, Scheduler, dict[str, str]]]:
    db = str(tmp_path / "state.db")
    store = Store(db)
    store.migrate()
    token = store.add_principal(Role.TENANT, "acme")
    store.set_tenant_control("acme", TenantControl(rate=1.0, burst=3))
    store.close()
    settings = ServiceSettings(db=db, log_dir=tmp_path / "logs", predictor_registry=None)
    sched = make_scheduler(db, tmp_path)
    with TestClient(create_app(settings, sched)) as http:
        yield http, sched, {"Authorization": f"Bearer {token}"}


def task() -> dict[str, str]:
    return {"task_type": "extract", "document_ref": "s3://docs/1.pdf"}


def test_a_batch_that_can_never_pass_the_burst_is_refused_with_413_saying_so(
    client: tuple[TestClient, Scheduler, dict[str, str]],
) -> None:
    http, _, auth = client
    too_big = http.post("/v1/tasks", json=[task()] * 5, headers=auth)
    assert too_big.status_code == 413
    assert "Retry-After" not in too_big.headers
    detail = too_big.json()["detail"]
    assert "5 tasks can never pass" in detail and "burst of 3" in detail and "at most 3" in detail
    assert http.post("/v1/tasks", json=[task()] * 3, headers=auth).status_code == 201
    over = http.post("/v1/tasks", json=[task()], headers=auth)  # the bucket is empty now
    assert over.status_code == 429 and int(over.headers["Retry-After"]) >= 1
    assert over.json()["retry"] is True and over.json()["retry_after_s"] >= 1


def test_a_503_from_the_writer_says_to_retry_and_after_how_long(
    client: tuple[TestClient, Scheduler, dict[str, str]],
) -> None:
    http, sched, auth = client
    sched.drain(timeout_s=1)  # what SIGTERM does: the writer takes no more writes
    refused = http.post("/v1/tasks", json=[task()], headers={**auth, "Idempotency-Key": "k"})
    assert refused.status_code == 503
    body = refused.json()
    assert body["retry"] is True and body["retry_after_s"] == 1
    assert refused.headers["Retry-After"] == "1"
    assert "retry" in body["detail"] and "Idempotency-Key" in body["detail"]
    with pytest.raises(Unavailable):
        sched.flush(1)
