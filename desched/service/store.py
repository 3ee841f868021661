"""Durable state of the service: tasks, tokens and the live policy, in SQLite or PostgreSQL.

One ``Store`` wraps one DB-API connection (``sqlite3`` or psycopg 3) and hides the few
dialect differences: placeholders (``?`` vs ``%s``), how a write transaction starts
(``BEGIN IMMEDIATE`` vs ``BEGIN``), and how a second service is kept off the same database
(an ``flock`` on a file beside the SQLite database, a session advisory lock in PostgreSQL;
the kernel or the server drops either when the process dies, even by SIGKILL). SQL is
written once with ``?`` placeholders and types both engines accept.

Durability (``durability``): a commit survives a crash of the service process in both modes;
"machine" also makes it survive a crash of the machine or of the database server, at the
price of one WAL flush per commit, which the single writer cannot overlap.

A ``Store`` is not thread-safe: the scheduler serialises every call with its lock. Admin
commands (``desched tenants add``) open their own ``Store`` from another process; SQLite's WAL
mode and a busy timeout let them write beside a running service.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from desched.errors import DeschedError


class Dialect(StrEnum):
    SQLITE = "sqlite"
    POSTGRES = "postgresql"


class Role(StrEnum):
    """What a token may do: tenants submit and read their tasks, workers poll and report."""

    TENANT = "tenant"
    WORKER = "worker"


class TaskState(StrEnum):
    QUEUED = "queued"
    LEASED = "leased"
    DONE = "done"
    DEAD = "dead"


SCHEMA = (
    """CREATE TABLE IF NOT EXISTS principals (
        token_sha256 TEXT PRIMARY KEY,
        role TEXT NOT NULL,
        name TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        UNIQUE (role, name)
    )""",
    """CREATE TABLE IF NOT EXISTS tasks (
        seq BIGINT PRIMARY KEY,
        task_id TEXT NOT NULL UNIQUE,
        tenant TEXT NOT NULL,
        task_type TEXT NOT NULL,
        document_ref TEXT NOT NULL,
        doc_bytes BIGINT,
        pages BIGINT,
        mem_mb DOUBLE PRECISION,
        predicted_mem_mb DOUBLE PRECISION,
        submit_s DOUBLE PRECISION NOT NULL,
        predicted_s DOUBLE PRECISION,
        batch_key TEXT,
        batch_index INTEGER,
        request_sha256 TEXT,
        state TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        worker TEXT,
        worker_id TEXT,
        lease_id TEXT,
        lease_expires_at DOUBLE PRECISION,
        start_s DOUBLE PRECISION,
        end_s DOUBLE PRECISION,
        duration_s DOUBLE PRECISION,
        peak_mem_mb DOUBLE PRECISION,
        result_ref TEXT,
        error TEXT,
        UNIQUE (tenant, batch_key, batch_index)
    )""",
    "CREATE INDEX IF NOT EXISTS tasks_live ON tasks (seq) WHERE state IN ('queued', 'leased')",
    """CREATE TABLE IF NOT EXISTS config (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    )""",
)

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
)
TASK_COLUMNS = (*_SUBMITTED_COLUMNS, "batch_key", "batch_index", "request_sha256", "state")
"""What a submit inserts, in the order of the scheduler's ``INSERT_TASK`` parameters."""
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
    "predicted_mem_mb",
    "duration_s",
    "peak_mem_mb",
    "result_ref",
    "error",
)
ADDED_COLUMNS = (("predicted_mem_mb", "DOUBLE PRECISION"),)
"""Columns of ``tasks`` added after the first release: ``migrate`` adds them to an old database."""
_ADVISORY_KEY = 0x64657363  # "desc"
POLICY_KEY = "policy"
SET_CONFIG = (
    "INSERT INTO config (key, value) VALUES (?, ?) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)
"""Write config row ``(key, value)``, replacing an earlier value."""
POLICY_STATE_KEY = "policy_state"
"""Config row holding the live policy's per-tenant state (``Scheduler.save_policy_state``)."""


def _pg_errors() -> tuple[type[Exception], ...]:
    try:
        import psycopg
    except ImportError:
        return ()
    return (psycopg.Error,)


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
        raise DeschedError(f"--db {url!r}: expected a SQLite path or a postgresql:// URL")
    return Dialect.SQLITE, url


class Store:
    """One connection to the state database; see the module docstring."""

    def __init__(self, url: str, *, durability: Literal["process", "machine"] = "process") -> None:
        self.url = url
        self.durability = durability
        self.dialect, self.target = parse_db(url)
        self._lock_file: Any = None
        self._holds_pg_lock = False
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
                self.conn = psycopg.connect(self.target, autocommit=True, connect_timeout=10)
            except psycopg.OperationalError as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else "no detail"
                raise DeschedError(f"cannot connect to PostgreSQL: {first}") from None
            sync = "off" if durability == "process" else "on"
            self.conn.execute(f"SET synchronous_commit = {sync}")

    def _alive(self) -> None:
        """Reconnect a PostgreSQL session that was lost (server restart, killed backend),
        taking the writer lock again if this session held it. The statement that found the
        connection broken has already failed; this makes the next one work."""
        if self.dialect is Dialect.SQLITE or not (self.conn.closed or self.conn.broken):
            return
        self._connect()
        if self._holds_pg_lock:
            self._holds_pg_lock = False
            self.acquire_writer_lock()

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
        """A write transaction: committed on normal exit, rolled back on an exception."""
        if self.dialect is Dialect.POSTGRES:
            self._alive()
            with self.conn.transaction():
                yield
            return
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def migrate(self) -> None:
        """Create the tables if they do not exist, and add the columns later versions added
        to an older database (idempotent)."""
        with self.transaction():
            for statement in SCHEMA:
                self.execute(statement)
        missing: tuple[type[Exception], ...] = (sqlite3.Error, *_pg_errors())
        for column, kind in ADDED_COLUMNS:
            try:
                self.execute(f"SELECT {column} FROM tasks WHERE 1 = 0").fetchall()
            except missing:
                self.execute(f"ALTER TABLE tasks ADD COLUMN {column} {kind}")

    def acquire_writer_lock(self) -> None:
        """Become the one service writing this database, or raise if another one is."""
        if self.dialect is Dialect.POSTGRES:
            row = self.execute(
                "SELECT pg_try_advisory_lock(CAST(? AS INTEGER), hashtext(current_schema()))",
                (_ADVISORY_KEY,),
            ).fetchone()
            if not row[0]:
                raise DeschedError(
                    "another desched service already owns this database (and schema)"
                )
            self._holds_pg_lock = True
            return
        import fcntl

        lock_path = Path(f"{self.target}.serve-lock")
        handle = lock_path.open("a")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            raise DeschedError(
                f"another desched service already owns {self.target} (lock {lock_path})"
            ) from None
        self._lock_file = handle

    # Principals -----------------------------------------------------------------------------

    def add_principal(self, role: Role, name: str) -> str:
        """Register ``name`` in ``role`` and return its new token (printed once, stored hashed)."""
        token = new_token()
        with self.transaction():
            exists = self.execute(
                "SELECT 1 FROM principals WHERE role = ? AND name = ?", (role.value, name)
            ).fetchone()
            if exists:
                raise DeschedError(f"{role.value} {name!r} already exists")
            self.execute(
                "INSERT INTO principals (token_sha256, role, name, created_at) VALUES (?, ?, ?, ?)",
                (hash_token(token), role.value, name, time.time()),
            )
        return token

    def principal(self, token_sha256: str) -> tuple[Role, str] | None:
        row = self.execute(
            "SELECT role, name FROM principals WHERE token_sha256 = ?", (token_sha256,)
        ).fetchone()
        return (Role(row[0]), row[1]) if row else None

    def principals(self, role: Role) -> list[str]:
        rows = self.execute(
            "SELECT name FROM principals WHERE role = ? ORDER BY name", (role.value,)
        ).fetchall()
        return [r[0] for r in rows]

    # Config ----------------------------------------------------------------------------------

    def get_config(self, key: str) -> str | None:
        row = self.execute("SELECT value FROM config WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_config(self, key: str, value: str) -> None:
        self.execute(SET_CONFIG, (key, value))

    def set_policy(self, name: str, params: dict[str, Any]) -> None:
        """Record the live policy; a running service switches to it within one sweep."""
        self.set_config(
            POLICY_KEY, json.dumps({"name": name, "params": params, "set_at": time.time()})
        )

    # Tasks -----------------------------------------------------------------------------------

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

    def task_state(self, task_id: str) -> str | None:
        row = self.execute("SELECT state FROM tasks WHERE task_id = ?", (task_id,)).fetchone()
        return row[0] if row else None

    def count_by_state(self) -> dict[str, int]:
        rows = self.execute("SELECT state, COUNT(*) FROM tasks GROUP BY state").fetchall()
        return {r[0]: int(r[1]) for r in rows}
