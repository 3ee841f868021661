"""The records the scheduler and its rooms pass around: who asks, what is submitted, what is
live, what a worker is handed, and the states a task and a token holder can be in.

``NewTask``, ``Principal``, ``Grant`` and ``Lease`` are frozen. ``LiveTask`` is the one
mutable record: the scheduler's memory of a queued or leased task, whose lease fields
(``worker``, ``worker_id``, ``lease_id``, ``lease_expires_at``) only the lease book sets and
clears, and which mirrors the task's row in the database once the writes queued for it
commit.
"""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Role(StrEnum):
    """What a token may do: tenants submit and read their tasks, workers poll and report."""

    TENANT = "tenant"
    WORKER = "worker"


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


@dataclass(slots=True)
class LiveTask:
    """A queued or leased task, in memory. ``predicted_s`` is NaN when unknown;
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
        predicted_s: float,
        predicted_mem_mb: float | None,
    ) -> LiveTask:
        """The task ``item`` of ``tenant``, submitted at ``now``, queued."""
        return cls(
            seq=seq,
            task_id=uuid.uuid4().hex,
            tenant=tenant,
            task_type=item.task_type,
            document_ref=item.document_ref,
            doc_bytes=item.doc_bytes,
            pages=item.pages,
            mem_mb=item.mem_mb,
            submit_s=now,
            predicted_s=predicted_s,
            predicted_mem_mb=predicted_mem_mb,
            priority=item.priority,
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
            predicted_s=row["predicted_s"] if row["predicted_s"] is not None else math.nan,
            predicted_mem_mb=row.get("predicted_mem_mb"),
            priority=row.get("priority") or 0,
            attempts=row["attempts"],
        )
        if row["state"] == TaskState.LEASED.value:
            task.worker, task.worker_id = row["worker"], row["worker_id"]
            task.lease_id, task.lease_expires_at = row["lease_id"], row["lease_expires_at"]
            task.start_s = row["start_s"] if row["start_s"] is not None else math.nan
        return task


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
