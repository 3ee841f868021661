"""Durable state of the service: tasks, tokens and the live policy, in SQLite or PostgreSQL.

One ``Store`` wraps one DB-API connection (``sqlite3`` or psycopg 3) and hides the few
dialect differences: placeholders (``?`` vs ``%s``), how a write transaction starts
(``BEGIN IMMEDIATE`` vs ``BEGIN``), and how a second service is kept off the same database
(an ``flock`` on a file beside the SQLite database, a session advisory lock in PostgreSQL;
the kernel or the server drops either when the process dies, even by SIGKILL). SQL is
written once with ``?`` placeholders and types both engines accept.

The writer lock is taken on the connection that commits the service's writes (the writer
thread's ``Store``), so a write is only ever committed by a session that holds it: when that
session is lost, the lock goes with it, and a reconnect that cannot take the lock again
raises ``LostLeadership`` before anything is written (a standby may have taken over). On
PostgreSQL every session asks the server for TCP keepalives, so the lock of a machine that
vanished is released within about ``PG_KEEPALIVE_S`` seconds.

Durability (``durability``): a commit survives a crash of the service process in both modes;
"machine" also makes it survive a crash of the machine or of the database server, at the
price of one WAL flush per commit, which the single writer cannot overlap.

Every SQL statement of the service is in this module (the tables' definitions in
``desched.service.schema``). The scheduler changes tasks only
through ``Write``s built here (``insert_write``, ``lease_write``, ...): each must change exactly
one row, and its ``WHERE`` names the state the scheduler believes the row is in, so a write
that finds the row otherwise fails its batch instead of overwriting it.

A ``Store`` is not thread-safe: the scheduler serialises every call with its lock. Admin
commands (``desched tenants add``) open their own ``Store`` from another process; SQLite's WAL
mode and a busy timeout let them write beside a running service.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import secrets
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from desched.controls import Controls, TenantControl
from desched.errors import DeschedError
from desched.service.errors import LostLeadership, Unavailable
from desched.service.records import LiveTask, Role, TaskState
from desched.service.schema import SCHEMA


class Dialect(StrEnum):
    SQLITE = "sqlite"
    POSTGRES = "postgresql"


_SUBMITTED_COLUMNS = (
    "seq",
    "task_id",
    "tenant",
    "task_type",
    "document_ref",
    "doc_bytes",
    "pages",
    "mem_mb",
    "predicted_mem_mb",
    "submit_s",
    "predicted_s",
    "priority",
    "predicted_p50_s",
    "predicted_p90_s",
)
TASK_COLUMNS = (*_SUBMITTED_COLUMNS, "batch_key", "batch_index", "request_sha256", "state")
"""What a submit inserts, in the order of ``INSERT_TASK``'s parameters."""
LIVE_COLUMNS = (
    *_SUBMITTED_COLUMNS,
    "state",
    "attempts",
    "worker",
    "worker_id",
    "lease_id",
    "lease_expires_at",
    "start_s",
)
VIEW_COLUMNS = (
    "task_id",
    "tenant",
    "task_type",
    "state",
    "attempts",
    "submit_s",
    "start_s",
    "end_s",
    "predicted_s",
    "predicted_p50_s",
    "predicted_p90_s",
    "predicted_mem_mb",
    "priority",
    "duration_s",
    "peak_mem_mb",
    "result_ref",
    "error",
)
ROW_COLUMNS = ("seq", "task_id", "state", "attempts", "worker", "lease_id")
"""What ``task_row`` reads: the columns a conditional write's ``WHERE`` names, and who."""
ADDED_COLUMNS = (
    ("tasks", "predicted_mem_mb", "DOUBLE PRECISION"),
    ("principals", "expires_at", "DOUBLE PRECISION"),
    ("principals", "revoked_at", "DOUBLE PRECISION"),
    ("tasks", "priority", "INTEGER NOT NULL DEFAULT 0"),
    ("tasks", "predicted_p50_s", "DOUBLE PRECISION"),
    ("tasks", "predicted_p90_s", "DOUBLE PRECISION"),
)
"""``(table, column, type)`` added after the first release: ``migrate`` adds them to an old
database."""
_ADVISORY_KEY = 0x64657363  # "desc"
_MIGRATE_KEY = 0x6D696772  # "migr": serialises concurrent migrations on PostgreSQL
_TRY_LOCK = "SELECT pg_try_advisory_lock(CAST(? AS INTEGER), hashtext(current_schema()))"
PG_KEEPALIVE_S = (5, 2, 3)
"""TCP keepalive idle, interval (seconds) and count the server uses on each session."""
TOKEN_EPOCH_KEY = "token_epoch"
"""Config row counting token revocations; a running service re-reads it every sweep."""
TOKEN_EPOCH_SEEN_KEY = "token_epoch_seen"
"""Config row where the active service acknowledges the revocations it has applied."""
POLICY_KEY = "policy"
"""Config row holding the live policy: ``{"name", "params", "set_at"}``."""
SET_CONFIG = (
    "INSERT INTO config (key, value) VALUES (?, ?) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)
"""Write config row ``(key, value)``, replacing an earlier value."""
CONTROLS_EPOCH_KEY = "controls_epoch"
"""Config row counting changes of the tenant controls; a running service re-reads the
controls every sweep when it moved."""
CONTROLS_EPOCH_SEEN_KEY = "controls_epoch_seen"
"""Config row where the active service acknowledges the controls epoch it applies."""
POLICY_STATE_KEY = "policy_state"
"""Config row holding the live policy's per-tenant state (``PolicyHost.state_write``)."""


@dataclass(frozen=True, slots=True)
class Write:
    """One SQL statement and its parameters that must change exactly one row (the writer
    fails the whole batch otherwise)."""

    sql: str
    params: tuple[Any, ...]


def _update_sql(values: Sequence[str], expect: Sequence[str]) -> str:
    sets = ", ".join(f"{k} = ?" for k in values)
    where = "".join(f" AND {k} = ?" for k in expect)
    return f"UPDATE tasks SET {sets} WHERE seq = ?{where}"


INSERT_TASK = (
    f"INSERT INTO tasks ({', '.join(TASK_COLUMNS)}) VALUES ({', '.join('?' for _ in TASK_COLUMNS)})"
)
LEASE_TASK = _update_sql(
    ("state", "attempts", "worker", "worker_id", "lease_id", "lease_expires_at", "start_s"),
    ("state",),
)
EXTEND_LEASE = _update_sql(("lease_expires_at",), ("lease_id",))
COMPLETE_TASK = _update_sql(
    ("state", "end_s", "duration_s", "peak_mem_mb", "result_ref", "lease_expires_at"),
    ("state", "lease_id"),
)
REQUEUE_TASK = _update_sql(
    ("state", "error", "lease_expires_at", "lease_id", "worker", "worker_id"),
    ("state", "lease_id"),
)
DEAD_LETTER_TASK = _update_sql(
    ("state", "error", "lease_expires_at", "end_s"), ("state", "lease_id")
)
CANCEL_QUEUED = _update_sql(("state", "end_s", "error"), ("state",))
CANCEL_LEASED = _update_sql(
    ("state", "end_s", "error", "lease_expires_at"), ("state", "lease_id")
)
CANCELLED_ERROR = "cancelled by its tenant"


def insert_write(
    task: LiveTask, batch_key: str | None, batch_index: int | None, request_sha256: str | None
) -> Write:
    """Insert a submitted task, queued (a NaN prediction is stored as NULL)."""
    return Write(
        INSERT_TASK,
        (
            task.seq,
            task.task_id,
            task.tenant,
            task.task_type,
            task.document_ref,
            task.doc_bytes,
            task.pages,
            task.mem_mb,
            task.predicted_mem_mb,
            task.submit_s,
            None if math.isnan(task.predicted_s) else task.predicted_s,
            task.priority,
            None if math.isnan(task.predicted_p50_s) else task.predicted_p50_s,
            None if math.isnan(task.predicted_p90_s) else task.predicted_p90_s,
            batch_key,
            batch_index,
            request_sha256,
            TaskState.QUEUED.value,
        ),
    )


def lease_write(
    seq: int,
    attempt: int,
    worker: str,
    worker_id: str,
    lease_id: str,
    *,
    lease_expires_at: float,
    start_s: float,
) -> Write:
    """Lease the queued task ``seq`` to ``worker``: attempt ``attempt`` starts at ``start_s``."""
    return Write(
        LEASE_TASK,
        (
            TaskState.LEASED.value,
            attempt,
            worker,
            worker_id,
            lease_id,
            lease_expires_at,
            start_s,
            seq,
            TaskState.QUEUED.value,
        ),
    )


def extend_write(seq: int, lease_id: str, lease_expires_at: float) -> Write:
    """Move the expiry of lease ``lease_id`` of task ``seq`` (a heartbeat)."""
    return Write(EXTEND_LEASE, (lease_expires_at, seq, lease_id))


def complete_write(
    seq: int,
    lease_id: str,
    *,
    end_s: float,
    duration_s: float,
    peak_mem_mb: float | None,
    result_ref: str | None,
) -> Write:
    """Mark task ``seq`` done, if it is still leased under ``lease_id`` (so at most once)."""
    return Write(
        COMPLETE_TASK,
        (
            TaskState.DONE.value,
            end_s,
            duration_s,
            peak_mem_mb,
            result_ref,
            None,
            seq,
            TaskState.LEASED.value,
            lease_id,
        ),
    )


def requeue_write(seq: int, lease_id: str, error: str) -> Write:
    """End attempt ``lease_id`` of task ``seq`` with ``error`` and queue the task again."""
    return Write(
        REQUEUE_TASK,
        (
            TaskState.QUEUED.value,
            error,
            None,
            None,
            None,
            None,
            seq,
            TaskState.LEASED.value,
            lease_id,
        ),
    )


def dead_letter_write(seq: int, lease_id: str, error: str, end_s: float) -> Write:
    """End attempt ``lease_id`` of task ``seq`` with ``error`` and dead-letter the task."""
    return Write(
        DEAD_LETTER_TASK,
        (TaskState.DEAD.value, error, None, end_s, seq, TaskState.LEASED.value, lease_id),
    )


def cancel_write(seq: int, lease_id: str | None, end_s: float) -> Write:
    """Cancel task ``seq``: queued (``lease_id`` None) or leased under ``lease_id``. The lease
    columns stay, to show who held it."""
    cancelled, why = TaskState.CANCELLED.value, CANCELLED_ERROR
    if lease_id is None:
        return Write(CANCEL_QUEUED, (cancelled, end_s, why, seq, TaskState.QUEUED.value))
    return Write(
        CANCEL_LEASED, (cancelled, end_s, why, None, seq, TaskState.LEASED.value, lease_id)
    )


def config_write(key: str, value: str) -> Write:
    """Write config row ``key`` (inserted or replaced: one row either way)."""
    return Write(SET_CONFIG, (key, value))


def policy_state_write(value: str) -> Write:
    """Record the live policy's saved state (a JSON document) in ``config``."""
    return Write(SET_CONFIG, (POLICY_STATE_KEY, value))


def _pg_errors() -> tuple[type[Exception], ...]:
    try:
        import psycopg
    except ImportError:
        return ()
    return (psycopg.Error,)


def db_errors() -> tuple[type[Exception], ...]:
    """The database drivers' error classes (sqlite3's, and psycopg's when installed)."""
    return (sqlite3.Error, *_pg_errors())


def new_token() -> str:
    """A fresh bearer token (256 random bits)."""
    return secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """The stored form of a token: its SHA-256, hex. Tokens themselves are never stored."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def parse_db(url: str) -> tuple[Dialect, str]:
    """``(dialect, target)``: a SQLite file path, or a PostgreSQL conninfo URL."""
    if url.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
        return Dialect.POSTGRES, url.replace("postgresql+psycopg://", "postgresql://", 1)
    if url.startswith("sqlite:///"):
        return Dialect.SQLITE, url[len("sqlite:///") :]
    if "://" in url:
        raise DeschedError(f"--store {url!r}: expected a SQLite path or a postgresql:// URL")
    return Dialect.SQLITE, url


class Store:
    """One connection to the state database; see the module docstring."""

    def __init__(self, url: str, *, durability: Literal["process", "machine"] = "process") -> None:
        self.url = url
        self.durability = durability
        self.dialect, self.target = parse_db(url)
        self._lock_file: Any = None
        self._holds_pg_lock = False
        self._relock = False
        """A lost session held the writer lock: the next statement takes it again first."""
        self.lock_attempts = 0
        self.conn: Any
        self._connect()

    def _connect(self) -> None:
        durability = self.durability
        if self.dialect is Dialect.SQLITE:
            path = Path(self.target)
            path.parent.mkdir(parents=True, exist_ok=True)
            self.conn = sqlite3.connect(
                path, isolation_level=None, check_same_thread=False, timeout=30.0
            )
            self.conn.execute("PRAGMA journal_mode=WAL")
            sync = "NORMAL" if durability == "process" else "FULL"
            self.conn.execute(f"PRAGMA synchronous={sync}")
            self.conn.execute("PRAGMA busy_timeout=30000")
        else:
            import psycopg

            try:
                conn = psycopg.connect(self.target, autocommit=True, connect_timeout=10)
            except psycopg.OperationalError as exc:
                # Unavailable (a DeschedError): one line at start-up, and a 503 to retry, not
                # a 400, when a request finds the server down (a restart) and reconnects.
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else "no detail"
                raise Unavailable(f"cannot connect to PostgreSQL: {first}") from None
            try:
                sync = "off" if durability == "process" else "on"
                conn.execute(f"SET synchronous_commit = {sync}")
                idle, interval, count = PG_KEEPALIVE_S
                conn.execute(f"SET tcp_keepalives_idle = {idle}")
                conn.execute(f"SET tcp_keepalives_interval = {interval}")
                conn.execute(f"SET tcp_keepalives_count = {count}")
            except BaseException:
                conn.close()  # half set up: the next statement connects again
                raise
            self.conn = conn

    def _alive(self) -> None:
        """Reconnect a PostgreSQL session that was lost (server restart, killed backend) or
        left unusable, then take the writer lock again if the lost session held it
        (``LostLeadership`` when another service took it meanwhile). The statement that
        found the session lost has already failed; this makes the next one work. A lock
        that could not be asked for again (the server went away once more) is asked for
        before the next statement, never skipped."""
        if self.dialect is Dialect.SQLITE:
            return
        if self._session_lost():
            if self._holds_pg_lock:
                self._holds_pg_lock, self._relock = False, True
            self.conn.close()
            self._connect()  # a failure leaves it closed: the next statement connects again
        if self._relock:
            row = self.conn.execute(
                self._sql(_TRY_LOCK), (_ADVISORY_KEY,)
            ).fetchone()  # a failure leaves _relock set: the next statement asks again
            self._relock = False
            self._holds_pg_lock = bool(row[0])
            if not self._holds_pg_lock:
                raise LostLeadership(
                    "lost the database session, and another desched service took the "
                    "writer lock meanwhile: standing by"
                )

    def _session_lost(self) -> bool:
        """Whether the PostgreSQL session cannot run a statement: closed, broken, or left
        mid-command. A "terminating connection" error read before the socket is seen closed
        can leave psycopg neither closed nor broken but in pipeline mode (``executemany``) or
        with results unread; every statement then fails in the client, never reaching the
        socket. Between two statements of the one thread using a ``Store``, neither state is
        ever legitimate."""
        from psycopg import pq

        conn = self.conn
        if conn.closed or conn.broken:
            return True
        busy = (pq.TransactionStatus.ACTIVE, pq.TransactionStatus.UNKNOWN)
        pgconn = conn.pgconn
        return bool(
            pgconn.pipeline_status != pq.PipelineStatus.OFF or pgconn.transaction_status in busy
        )

    def close(self) -> None:
        try:
            self.conn.close()
        finally:
            if self._lock_file is not None:
                self._lock_file.close()
                self._lock_file = None

    def _sql(self, sql: str) -> str:
        return sql if self.dialect is Dialect.SQLITE else sql.replace("?", "%s")

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """Run one statement (its own transaction unless inside ``transaction``)."""
        self._alive()
        return self.conn.execute(self._sql(sql), params)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        """Run ``sql`` once per row (pipelined on PostgreSQL); the total rows changed."""
        if self.dialect is Dialect.SQLITE:
            return int(self.conn.executemany(sql, rows).rowcount)
        with self.conn.cursor() as cur:
            cur.executemany(self._sql(sql), rows)
            return int(cur.rowcount)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """A write transaction: committed on normal exit, rolled back on an exception. A
        COMMIT that fails (a deferred constraint, a full disk, a busy database) rolls back
        too and raises: the connection is never left inside a transaction. (psycopg's own
        transaction block does the same on PostgreSQL, where a failed COMMIT ends the
        transaction anyway.)"""
        if self.dialect is Dialect.POSTGRES:
            self._alive()
            with self.conn.transaction():
                yield
            return
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            self.conn.execute("COMMIT")
        except BaseException:
            if self.conn.in_transaction:  # SQLite may have rolled back already
                try:
                    self.conn.execute("ROLLBACK")
                except sqlite3.Error:  # the error that got us here is the one to report
                    pass
            raise

    def migrate(self) -> None:
        """Create missing tables, and add the columns later versions added to an older
        database (idempotent; services starting at once on PostgreSQL take turns)."""
        with self.transaction():
            if self.dialect is Dialect.POSTGRES:
                self.execute(
                    "SELECT pg_advisory_xact_lock(CAST(? AS INTEGER), hashtext(current_schema()))",
                    (_MIGRATE_KEY,),
                )
            for statement in SCHEMA:
                self.execute(statement)
            missing: tuple[type[Exception], ...] = (sqlite3.Error, *_pg_errors())
            for table, column, kind in ADDED_COLUMNS:
                try:
                    with self._savepoint():
                        self.execute(f"SELECT {column} FROM {table} WHERE 1 = 0").fetchall()
                except missing:
                    self.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")

    @contextmanager
    def _savepoint(self) -> Iterator[None]:
        """A nested transaction: a failed statement inside rolls back only itself."""
        if self.dialect is Dialect.POSTGRES:
            with self.conn.transaction():
                yield
            return
        self.conn.execute("SAVEPOINT probe")
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK TO probe")
            raise
        finally:
            self.conn.execute("RELEASE probe")

    @property
    def holds_writer_lock(self) -> bool:
        """Whether this connection holds the writer lock (``try_writer_lock``); also while
        its lost session's lock is being taken again (the next statement takes it, or
        raises ``LostLeadership``)."""
        return self._holds_pg_lock or self._relock or self._lock_file is not None

    def try_writer_lock(self) -> bool:
        """Take the lock that makes this the one service writing the database, unless another
        service holds it; whether this connection holds it now. Cost: one query (PostgreSQL)
        or one ``flock`` (SQLite)."""
        if self.holds_writer_lock:
            return True
        self.lock_attempts += 1
        if self.dialect is Dialect.POSTGRES:
            row = self.execute(_TRY_LOCK, (_ADVISORY_KEY,)).fetchone()
            self._holds_pg_lock = bool(row[0])
            return self._holds_pg_lock
        handle = self._lock_path.open("a")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            return False
        self._lock_file = handle
        return True

    @property
    def _lock_path(self) -> Path:
        """By the real path: a symbolic link names the same lock (hard links: unsupported)."""
        return Path(f"{os.path.realpath(self.target)}.serve-lock")

    def acquire_writer_lock(self) -> None:
        """Become the one service writing this database, or raise if another one is."""
        if self.try_writer_lock():
            return
        if self.dialect is Dialect.POSTGRES:
            raise DeschedError("another desched service already owns this database (and schema)")
        raise DeschedError(
            f"another desched service already owns {self.target} (lock {self._lock_path})"
        )

    def ping(self) -> None:
        """One trivial query: finds a lost session (the next statement reconnects)."""
        self.execute("SELECT 1").fetchall()

    def service_running(self) -> bool:
        """Whether some service holds this database's writer lock now (read, not taken)."""
        if self.holds_writer_lock:
            return True
        if self.dialect is Dialect.POSTGRES:
            row = self.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted "
                "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                "AND classid = CAST(CAST(? AS INTEGER) AS oid) "
                "AND objid = CAST(hashtext(current_schema()) AS oid) AND objsubid = 2)",
                (_ADVISORY_KEY,),
            ).fetchone()
            return bool(row[0])
        if not self._lock_path.exists():
            return False
        with self._lock_path.open("a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                return True
            fcntl.flock(handle, fcntl.LOCK_UN)
        return False

    def add_principal(self, role: Role, name: str, expires_at: float | None = None) -> str:
        """Register ``name`` in ``role`` and return its new token (printed once, stored
        hashed); the token expires at ``expires_at`` (epoch seconds) if given. A name whose
        token was revoked gets a fresh one; a name with a live token is refused."""
        token = new_token()
        with self.transaction():
            row = self.execute(
                "SELECT revoked_at FROM principals WHERE role = ? AND name = ?",
                (role.value, name),
            ).fetchone()
            if row is not None and row[0] is None:
                raise DeschedError(
                    f"{role.value} {name!r} already exists (revoke it first for a new token)"
                )
            if row is not None:
                self.execute(
                    "DELETE FROM principals WHERE role = ? AND name = ?", (role.value, name)
                )
            self.execute(
                "INSERT INTO principals (token_sha256, role, name, created_at, expires_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (hash_token(token), role.value, name, time.time(), expires_at),
            )
        return token

    def revoke_principal(self, role: Role, name: str) -> int:
        """Revoke ``name``'s token in ``role`` and count the revocation in the token epoch
        (one transaction); the new epoch, which a running service acknowledges in
        ``token_epoch_seen`` once it refuses the token. ``DeschedError`` for an unknown name;
        revoking twice changes nothing the second time."""
        with self.transaction():
            row = self.execute(
                "SELECT revoked_at FROM principals WHERE role = ? AND name = ?",
                (role.value, name),
            ).fetchone()
            if row is None:
                raise DeschedError(f"no {role.value} {name!r}")
            if row[0] is None:
                self.execute(
                    "UPDATE principals SET revoked_at = ? WHERE role = ? AND name = ?",
                    (time.time(), role.value, name),
                )
            epoch = self.token_epoch() + 1
            self.execute(SET_CONFIG, (TOKEN_EPOCH_KEY, str(epoch)))
        return epoch

    def token_epoch(self) -> int:
        """Revocations so far (``TOKEN_EPOCH_KEY``)."""
        value = self.get_config(TOKEN_EPOCH_KEY)
        return int(value) if value is not None else 0

    def token_epoch_seen(self) -> int:
        """The token epoch the active service last acknowledged."""
        value = self.get_config(TOKEN_EPOCH_SEEN_KEY)
        return int(value) if value is not None else 0

    def principal(self, token_sha256: str) -> tuple[Role, str, float | None, float | None] | None:
        """``(role, name, expires_at, revoked_at)`` of the token with this hash, or None."""
        row = self.execute(
            "SELECT role, name, expires_at, revoked_at FROM principals WHERE token_sha256 = ?",
            (token_sha256,),
        ).fetchone()
        return (Role(row[0]), row[1], row[2], row[3]) if row else None

    def principals(self, role: Role) -> list[str]:
        rows = self.execute(
            "SELECT name FROM principals WHERE role = ? ORDER BY name", (role.value,)
        ).fetchall()
        return [r[0] for r in rows]

    def principal_rows(self, role: Role) -> list[tuple[str, float, float | None, float | None]]:
        """``(name, created_at, expires_at, revoked_at)`` of every principal in ``role``."""
        rows = self.execute(
            "SELECT name, created_at, expires_at, revoked_at FROM principals WHERE role = ? "
            "ORDER BY name",
            (role.value,),
        ).fetchall()
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    def set_tenant_control(self, tenant: str, control: TenantControl) -> int:
        """Record ``tenant``'s controls and count the change in the controls epoch (one
        transaction); the new epoch, which a running service acknowledges in
        ``CONTROLS_EPOCH_SEEN_KEY`` once it applies them."""
        with self.transaction():
            self.execute(
                "INSERT INTO tenant_controls (tenant, weight, cap, rate, burst, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (tenant) DO UPDATE SET "
                "weight = excluded.weight, cap = excluded.cap, rate = excluded.rate, "
                "burst = excluded.burst, updated_at = excluded.updated_at",
                (tenant, control.weight, control.cap, control.rate, control.burst, time.time()),
            )
            epoch = self.controls_epoch() + 1
            self.execute(SET_CONFIG, (CONTROLS_EPOCH_KEY, str(epoch)))
        return epoch

    def tenant_controls(self) -> Controls:
        """Every tenant's recorded controls."""
        rows = self.execute(
            "SELECT tenant, weight, cap, rate, burst FROM tenant_controls ORDER BY tenant"
        ).fetchall()
        return Controls(
            {r[0]: TenantControl(weight=r[1], cap=r[2], rate=r[3], burst=r[4]) for r in rows}
        )

    def controls_epoch(self) -> int:
        """Changes of the tenant controls so far (``CONTROLS_EPOCH_KEY``)."""
        value = self.get_config(CONTROLS_EPOCH_KEY)
        return int(value) if value is not None else 0

    def controls_epoch_seen(self) -> int:
        """The controls epoch the active service last acknowledged."""
        value = self.get_config(CONTROLS_EPOCH_SEEN_KEY)
        return int(value) if value is not None else 0

    def get_config(self, key: str) -> str | None:
        row = self.execute("SELECT value FROM config WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_config(self, key: str, value: str) -> None:
        self.execute(SET_CONFIG, (key, value))

    def recorded_policy(self) -> str | None:
        """The live policy's config row as recorded (``set_policy``), or None."""
        return self.get_config(POLICY_KEY)

    def saved_policy_state(self) -> str | None:
        """The policy state last saved (``policy_state_write``), or None."""
        return self.get_config(POLICY_STATE_KEY)

    def set_policy(self, name: str, params: dict[str, Any]) -> None:
        """Record the live policy; a running service switches to it within one sweep."""
        self.set_config(
            POLICY_KEY, json.dumps({"name": name, "params": params, "set_at": time.time()})
        )

    def max_seq(self) -> int:
        row = self.execute("SELECT MAX(seq) FROM tasks").fetchone()
        return int(row[0]) if row and row[0] is not None else -1

    def latest_time(self) -> float:
        """The latest past instant the tasks record (submit, start, end; not lease expiries,
        which lie ahead): the service clock never goes below it."""
        row = self.execute("SELECT MAX(submit_s), MAX(start_s), MAX(end_s) FROM tasks").fetchone()
        values = [v for v in (row or ()) if v is not None]
        return max(values, default=0.0)

    def batch(self, tenant: str, batch_key: str) -> list[tuple[str, str | None]]:
        """``(task_id, request_sha256)`` of an earlier submit with this idempotency key."""
        rows = self.execute(
            "SELECT task_id, request_sha256 FROM tasks WHERE tenant = ? AND batch_key = ? "
            "ORDER BY batch_index",
            (tenant, batch_key),
        ).fetchall()
        return [(r[0], r[1]) for r in rows]

    def live_tasks(self) -> list[dict[str, Any]]:
        """Every queued or leased task, in submission order (the index is rebuilt from it)."""
        cols = ", ".join(LIVE_COLUMNS)
        rows = self.execute(
            f"SELECT {cols} FROM tasks WHERE state IN ('queued', 'leased') ORDER BY seq"
        ).fetchall()
        return [dict(zip(LIVE_COLUMNS, r)) for r in rows]

    def task_view(self, task_id: str) -> dict[str, Any] | None:
        cols = ", ".join(VIEW_COLUMNS)
        row = self.execute(f"SELECT {cols} FROM tasks WHERE task_id = ?", (task_id,)).fetchone()
        return dict(zip(VIEW_COLUMNS, row)) if row else None

    def task_row(self, seq: int) -> dict[str, Any] | None:
        """Task ``seq``'s state and lease columns (``ROW_COLUMNS``), as committed; None if
        there is no such row."""
        cols = ", ".join(ROW_COLUMNS)
        row = self.execute(f"SELECT {cols} FROM tasks WHERE seq = ?", (seq,)).fetchone()
        return dict(zip(ROW_COLUMNS, row)) if row else None

    def task_state(self, task_id: str) -> str | None:
        row = self.execute("SELECT state FROM tasks WHERE task_id = ?", (task_id,)).fetchone()
        return row[0] if row else None

    def count_by_state(self) -> dict[str, int]:
        rows = self.execute("SELECT state, COUNT(*) FROM tasks GROUP BY state").fetchall()
        return {r[0]: int(r[1]) for r in rows}

    def ended_since(self, since: float, limit: int) -> list[tuple[Any, ...]]:
        """``(seq, tenant, submit_s, start_s, end_s, duration_s, state)`` of the tasks that ran
        and ended (done, dead, cancelled) at or after ``since``, newest first, ``limit`` rows."""
        return list(self.execute(
            "SELECT seq, tenant, submit_s, start_s, end_s, duration_s, state FROM tasks WHERE "
            "end_s >= ? AND start_s IS NOT NULL AND state IN ('done', 'dead', 'cancelled') "
            "ORDER BY seq DESC LIMIT ?", (since, limit)).fetchall())

    def tenant_state_counts(self) -> list[tuple[Any, ...]]:
        """``(tenant, state, count, earliest submit_s)`` per tenant and state."""
        return list(self.execute("SELECT tenant, state, COUNT(*), MIN(submit_s) FROM tasks "
                                 "GROUP BY tenant, state").fetchall())

    def leased_rows(self) -> list[tuple[Any, ...]]:
        """``(tenant, submit_s, start_s)`` of every leased task that has started."""
        return list(self.execute("SELECT tenant, submit_s, start_s FROM tasks WHERE state = "
                                 "'leased' AND start_s IS NOT NULL").fetchall())
