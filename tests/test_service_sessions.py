"""A ``Store`` whose PostgreSQL session is lost: the next statement reconnects, and a store
that held the writer lock holds it again before anything else runs on the new session.

Two ways a session is lost that once left a service answering 503 to every write while
``/healthz`` said ok (CI, a PostgreSQL restart under load):

- psycopg may leave a connection neither closed nor broken, but in pipeline mode or with a
  command's results unread, when the server's "terminating connection" error interrupts a
  call before the socket is seen closed; every statement after that failed in the client
  ("PQsendQuery not allowed in pipeline mode", "another command is already in progress")
  and nothing reconnected.
- a reconnect whose lock query failed (the server went away again) forgot that the session
  had held the lock: the writer then refused every batch (``Standby``).

Each test runs in a throw-away database on the server at 127.0.0.1:5432 (``pg_db``).
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from desched.service.store import Store
from tests.test_service_ha import lock_holder, pg_db  # noqa: F401 - pg_db: the fixture


def backend_pid(store: Store) -> int:
    return int(store.execute("SELECT pg_backend_pid()").fetchone()[0])


def terminate(db: str, pid: int) -> None:
    """End backend ``pid`` and wait until it has exited: ``pg_terminate_backend`` only sends
    the signal, and the backend's advisory locks go with its exit a moment later."""
    import time

    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        deadline = time.monotonic() + 10.0
        while conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s",
                           (pid,)).fetchone() is not None:
            assert time.monotonic() < deadline, f"backend {pid} still there after 10 s"
            time.sleep(0.01)


def writer_store(db: str) -> Store:
    store = Store(db)
    store.migrate()
    assert store.try_writer_lock()
    return store


def left_in_pipeline_mode(conn: psycopg.Connection[Any]) -> None:
    conn.pgconn.enter_pipeline_mode()


def left_mid_command(conn: psycopg.Connection[Any]) -> None:
    conn.pgconn.send_query(b"SELECT 1")  # its results never read


@pytest.mark.parametrize(
    ("leave", "refusal"),
    [(left_in_pipeline_mode, "pipeline mode"), (left_mid_command, "already in progress")],
)
def test_a_session_left_unusable_is_replaced_and_the_lock_taken_again(
    pg_db: str,  # noqa: F811
    leave: Any,
    refusal: str,
) -> None:
    store = writer_store(pg_db)
    try:
        first = backend_pid(store)
        assert lock_holder(pg_db) == first
        # The states psycopg was seen to leave behind after a PostgreSQL restart, neither
        # closed nor broken; the raw connection can run nothing in them.
        leave(store.conn)
        assert not (store.conn.closed or store.conn.broken)
        with pytest.raises(psycopg.OperationalError, match=refusal):
            store.conn.execute("SELECT 1")
        second = backend_pid(store)
        assert second != first
        assert store.holds_writer_lock and lock_holder(pg_db) == second
    finally:
        store.close()


def test_a_lock_that_could_not_be_asked_for_again_is_asked_for_before_the_next_statement(
    pg_db: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = writer_store(pg_db)
    try:
        terminate(pg_db, backend_pid(store))
        with pytest.raises(psycopg.OperationalError):
            store.execute("SELECT 1")  # finds the session gone
        connect = store._connect
        tries: list[int] = []

        def connect_then_lose_it(*args: Any) -> None:
            # The server goes away again between the reconnect and the lock query.
            connect(*args)
            tries.append(1)
            if len(tries) == 1:
                terminate(pg_db, int(store.conn.info.backend_pid))

        monkeypatch.setattr(store, "_connect", connect_then_lose_it)
        with pytest.raises(psycopg.OperationalError):
            store.execute("SELECT 1")  # the lock query on the new session fails
        assert store.holds_writer_lock  # still owed, not forgotten
        assert lock_holder(pg_db) is None
        pid = backend_pid(store)
        assert len(tries) == 2
        assert store.holds_writer_lock and lock_holder(pg_db) == pid
    finally:
        store.close()


def test_a_lock_taken_by_another_service_meanwhile_is_lost_leadership(
    pg_db: str,  # noqa: F811
) -> None:
    from desched.service.errors import LostLeadership

    store = writer_store(pg_db)
    other = Store(pg_db)
    try:
        terminate(pg_db, backend_pid(store))
        assert other.try_writer_lock()
        with pytest.raises(psycopg.OperationalError):
            store.execute("SELECT 1")
        with pytest.raises(LostLeadership):
            store.execute("SELECT 1")
        assert not store.holds_writer_lock
        assert lock_holder(pg_db) == backend_pid(other)
        assert backend_pid(store) != lock_holder(pg_db)  # standing by, no lock asked for
    finally:
        store.close()
        other.close()
