"""The records the scheduler and its rooms pass around: who asks, what is submitted, what is
live, what a worker is handed, and the states a task and a token holder can be in.

``NewTask``, ``Principal``, ``Grant`` and ``Lease`` are frozen. ``LiveTask`` is the one
mutable record: the scheduler's memory of a queued or leased task, whose lease fields
(``worker``, ``worker_id``, ``lease_id``, ``lease_expires_at``) only the lease book sets and
clears, and which mirrors the task's row in the database once the writes queued for it
commit.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple


class RandomPool:
    """Bytes from the OS's CSPRNG (``os.urandom``), read ``chunk`` bytes at a time and handed
    out in order, each byte once: the same randomness as one ``os.urandom`` call per id, at
    one system call per few hundred ids. (``os.urandom`` releases the GIL: a call per id let
    the writer thread take the GIL in the middle of every poll.) Thread-safe; a forked child
    starts with a fresh pool, so parent and child never hand out the same bytes."""

    def __init__(self, chunk: int = 4096) -> None:
        self.chunk = chunk
        self._lock = threading.Lock()
        self._reset()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._buf = b""
        self._at = 0

    def take(self, n: int) -> bytes:
        """``n`` fresh random bytes."""
        with self._lock:
            at = self._at
            if at + n > len(self._buf):
                self._buf, at = os.urandom(max(self.chunk, n)), 0
            self._at = at + n
            return self._buf[at : at + n]


RANDOM = RandomPool()


def new_task_id() -> str:
    """A random UUID (version 4) in hex, as ``uuid.uuid4().hex``: 122 random bits."""
    b = bytearray(RANDOM.take(16))
    b[6] = (b[6] & 0x0F) | 0x40  # version 4
    b[8] = (b[8] & 0x3F) | 0x80  # RFC 4122 variant
    return b.hex()


def new_lease_id() -> str:
    """128 random bits, URL-safe base64 without padding, as ``secrets.token_urlsafe(16)``."""
    return base64.urlsafe_b64encode(RANDOM.take(16)).rstrip(b"=").decode("ascii")


class Role(StrEnum):
    """What a token may do: tenants submit and read their tasks, workers poll and report,
    operators read the operator page (``GET /ui/state``)."""

    TENANT = "tenant"
    WORKER = "worker"
    OPERATOR = "operator"


class TaskState(StrEnum):
    """Where a task is: queued and leased tasks are live; done, dead and cancelled ones have
    ended (cancelled: withdrawn by its tenant, queued or leased)."""

    QUEUED = "queued"
    LEASED = "leased"
    DONE = "done"
    DEAD = "dead"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class Principal:
    """The holder of a bearer token; ``expires_at`` (epoch seconds) is None for a token that
    does not expire."""

    role: Role
    name: str
    expires_at: float | None = None


@dataclass(frozen=True, slots=True)
class NewTask:
    """One task of a submit, as validated by the HTTP layer."""

    task_type: str
    document_ref: str = ""
    doc_bytes: int | None = None
    pages: int | None = None
    mem_mb: float | None = None
    priority: int = 0


class Durations(NamedTuple):
    """A task's predicted duration and its p50 and p90 quantiles (s), each NaN when unknown."""

    predicted_s: float
    p50_s: float = math.nan
    p90_s: float = math.nan


UNKNOWN_DURATIONS = Durations(math.nan)


@dataclass(slots=True)
class LiveTask:
    """A queued or leased task, in memory. ``predicted_s`` and its quantiles
    ``predicted_p50_s`` and ``predicted_p90_s`` (the Boost policies' labels) are NaN when unknown;
    ``lease_expires_at`` is NaN and ``lease_id`` None while the task is queued; ``start_s``
    is the start of its latest attempt (NaN before the first)."""

    seq: int
    task_id: str
    tenant: str
    task_type: str
    document_ref: str
    doc_bytes: int | None
    pages: int | None
    mem_mb: float | None
    submit_s: float
    predicted_s: float
    predicted_mem_mb: float | None = None
    priority: int = 0
    predicted_p50_s: float = math.nan
    predicted_p90_s: float = math.nan
    attempts: int = 0
    worker: str | None = None
    worker_id: str | None = None
    lease_id: str | None = None
    lease_expires_at: float = math.nan
    start_s: float = math.nan

    @classmethod
    def submitted(
        cls,
        seq: int,
        tenant: str,
        item: NewTask,
        now: float,
        durations: Durations,
        predicted_mem_mb: float | None,
    ) -> LiveTask:
        """The task ``item`` of ``tenant``, submitted at ``now``, queued."""
        return cls(
            seq=seq,
            task_id=new_task_id(),
            tenant=tenant,
            task_type=item.task_type,
            document_ref=item.document_ref,
            doc_bytes=item.doc_bytes,
            pages=item.pages,
            mem_mb=item.mem_mb,
            submit_s=now,
            predicted_s=durations.predicted_s,
            predicted_mem_mb=predicted_mem_mb,
            priority=item.priority,
            predicted_p50_s=durations.p50_s,
            predicted_p90_s=durations.p90_s,
        )

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> LiveTask:
        """The task of a stored row with the columns ``store.LIVE_COLUMNS`` (queued or leased)."""
        task = cls(
            seq=row["seq"],
            task_id=row["task_id"],
            tenant=row["tenant"],
            task_type=row["task_type"],
            document_ref=row["document_ref"],
            doc_bytes=row["doc_bytes"],
            pages=row["pages"],
            mem_mb=row["mem_mb"],
            submit_s=row["submit_s"],
            predicted_s=_nan_if_none(row["predicted_s"]),
            predicted_mem_mb=row.get("predicted_mem_mb"),
            priority=row.get("priority") or 0,
            predicted_p50_s=_nan_if_none(row.get("predicted_p50_s")),
            predicted_p90_s=_nan_if_none(row.get("predicted_p90_s")),
            attempts=row["attempts"],
        )
        if row["state"] == TaskState.LEASED.value:
            task.worker, task.worker_id = row["worker"], row["worker_id"]
            task.lease_id, task.lease_expires_at = row["lease_id"], row["lease_expires_at"]
            task.start_s = _nan_if_none(row["start_s"])
        return task


def _nan_if_none(value: float | None) -> float:
    return math.nan if value is None else value


@dataclass(frozen=True, slots=True)
class Lease:
    """A lease as it was when it ended (released or expired)."""

    lease_id: str
    worker: str | None
    worker_id: str | None
    expires_at: float


@dataclass(frozen=True, slots=True)
class Grant:
    """A task handed to a worker, with its lease."""

    task: LiveTask
    lease_id: str
    lease_expires_at: float
    attempt: int


def request_digest(items: Sequence[NewTask]) -> str:
    """SHA-256 of a submit's content: a replay with the same key must carry the same tasks."""
    # priority joins the digest only when set, so that digests of earlier submits still match
    body = json.dumps(
        [[t.task_type, t.document_ref, t.doc_bytes, t.pages, t.mem_mb]
         + ([t.priority] if t.priority else []) for t in items],
        separators=(",", ":"),
    )
    return hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()
