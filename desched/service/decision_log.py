"""The live decision log: JSON lines with the columns of ``desched.runs`` (DESIGN.md, Files).

One file per process and UTC day: ``<dir>/decision-log-<YYYYMMDD>-<pid>-<start>.jsonl`` (the
ingestion flow reads ``*log*.jsonl``); ``seq`` counts the records of one file from 0 and ``t``
never decreases within a file. Decision records carry ``kind="decision"`` and
``DECISION_COLUMNS`` plus the policy's components and ``free_mem_mb``; completion records
carry ``kind="completion"`` and ``COMPLETION_COLUMNS`` plus the task's features and
``predicted_s``. A task has one completion record, for its outcome: ``ok``, or ``failed``
once dead-lettered (a retried attempt shows as a second decision for the task). A task its
tenant cancelled has a record of kind ``cancel`` instead (``CANCEL_COLUMNS``; ``was``: queued
or leased, and for a leased one the worker that held it), which ingestion accepts and loads
into no table (``desched.warehouse.rules.IGNORED_KINDS``). ``worker``
is a stable integer code of the worker instance, ``worker_name`` its readable
``name/worker_id``. NaN is written as null.

A record is written after its state change is committed to the database (by the
scheduler's writer thread, which runs the record's ``line`` after the commit and flushes
once per batch, before the change's caller hears of it), so a crash between the two loses
that record (the database stays the source of truth); a record is never written for a
change that did not commit.
``decision_record`` and ``completion_record`` build the records from the scheduler's state.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from desched.service.records import LiveTask

if TYPE_CHECKING:
    from desched.policies.base import Policy


_ENCODE = json.JSONEncoder(allow_nan=False).encode
"""``json.dumps(..., allow_nan=False)`` without building an encoder per call."""


class DecisionLog:
    """Appends records, one JSON line each: ``write`` flushes its line to the OS (not
    fsynced); ``append`` (and the callable ``line`` returns) leaves it in the buffer until
    ``flush``. Thread-safe."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.lock = threading.Lock()
        self.seq = 0
        self._day = ""
        self._day_span = (math.inf, -math.inf)
        """[start, end) of ``_day`` in epoch seconds: a record inside it needs no date."""
        self._file: IO[str] | None = None
        self._started = int(time.time())

    @property
    def path(self) -> Path | None:
        return Path(self._file.name) if self._file is not None else None

    def _open(self, t: float) -> IO[str]:
        start, end = self._day_span
        if self._file is not None and start <= t < end:
            return self._file
        when = datetime.fromtimestamp(t, tz=UTC)
        day = when.strftime("%Y%m%d")
        midnight = when.replace(hour=0, minute=0, second=0, microsecond=0)
        self._day_span = (midnight.timestamp(), (midnight + timedelta(days=1)).timestamp())
        if self._file is None or day != self._day:
            if self._file is not None:
                self._file.close()
            self.folder.mkdir(parents=True, exist_ok=True)
            name = f"decision-log-{day}-{os.getpid()}-{self._started}.jsonl"
            self._file = (self.folder / name).open("a", encoding="utf-8")
            self._day = day
            self.seq = 0
        return self._file

    def write(self, kind: str, t: float, record: dict[str, Any]) -> None:
        """Append the record and flush it to the OS."""
        with self.lock:
            self._append(kind, t, record)
            if self._file is not None:
                self._file.flush()

    def append(self, kind: str, t: float, record: dict[str, Any]) -> None:
        """Append the record; it reaches the OS at the next ``flush`` (or a full buffer)."""
        with self.lock:
            self._append(kind, t, record)

    def line(self, kind: str, t: float, record: dict[str, Any]) -> Callable[[], None]:
        """What appends the record when called (the writer thread calls it after the
        record's change commits; ``Writer.add(after=...)``)."""
        return functools.partial(self.append, kind, t, record)

    def flush(self) -> None:
        with self.lock:
            if self._file is not None:
                self._file.flush()

    def _append(self, kind: str, t: float, record: dict[str, Any]) -> None:
        """Under ``lock``."""
        out = self._open(t)
        line = {"kind": kind, "seq": self.seq, "t": t}
        for k, v in record.items():
            # NaN and infinities (numpy's float64 is a float too) are written as null
            line[k] = None if isinstance(v, float) and not math.isfinite(v) else v
        out.write(_ENCODE(line) + "\n")
        self.seq += 1

    def close(self) -> None:
        with self.lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def worker_columns(worker: str, worker_id: str) -> dict[str, Any]:
    """``worker``: a stable Int64 for ``name/worker_id`` (the decision log's worker column is
    an integer, as in the simulator); ``worker_name``: the readable form."""
    code, name = _worker_code(worker, worker_id)
    return {"worker": code, "worker_name": name}


@functools.lru_cache(maxsize=65_536)
def _worker_code(worker: str, worker_id: str) -> tuple[int, str]:
    name = f"{worker}/{worker_id}"
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:7], "big"), name


def decision_record(
    task: LiveTask,
    policy: Policy,
    *,
    worker: str,
    worker_id: str,
    queue_len: int,
    tenant_backlog: int,
    wait_s: float,
    free_mem_mb: float | None,
    skipped_unfit: int,
) -> dict[str, Any]:
    """The record of ``policy``'s decision to lease ``task``, right after it popped it (its
    ``score`` and ``parts`` are that decision's); queue sizes as before the decision."""
    record = {
        **worker_columns(worker, worker_id),
        "task_id": task.task_id,
        "tenant": task.tenant,
        "policy": policy.name,
        "score": policy.score,
        "queue_len": queue_len,
        "tenant_backlog": tenant_backlog,
        "wait_s": wait_s,
        "free_mem_mb": free_mem_mb,
        "predicted_mem_mb": task.predicted_mem_mb,
        "skipped_unfit": skipped_unfit,
    }
    record.update(zip(policy.components, policy.parts))
    return record


def _ended_columns(task: LiveTask, worker: str | None, worker_id: str | None) -> dict[str, Any]:
    """The columns every record of a task's end starts with: its worker, ids and times."""
    return {
        **worker_columns(worker or "", worker_id or ""),
        "task_id": task.task_id,
        "tenant": task.tenant,
        "task_type": task.task_type,
        "submit_s": task.submit_s,
        "start_s": task.start_s,
    }


def cancel_record(
    task: LiveTask, was: str, worker: str | None, worker_id: str | None
) -> dict[str, Any]:
    """The record of ``task``'s cancellation by its tenant, in state ``was``."""
    return {**_ended_columns(task, worker, worker_id), "was": was}


def completion_record(
    task: LiveTask,
    worker: str | None,
    worker_id: str | None,
    status: str,
    duration_s: float,
    peak_mem_mb: float | None,
) -> dict[str, Any]:
    """The record of ``task``'s outcome: ``ok``, or ``failed`` once dead-lettered."""
    return {
        **_ended_columns(task, worker, worker_id),
        "duration_s": duration_s,
        "status": status,
        "peak_mem_mb": peak_mem_mb,
        "doc_bytes": task.doc_bytes,
        "pages": task.pages,
        "predicted_s": task.predicted_s,
        "predicted_mem_mb": task.predicted_mem_mb,
    }


def completion_line(
    log: DecisionLog | None,
    now: float,
    task: LiveTask,
    worker: str | None,
    worker_id: str | None,
    status: str,
    duration_s: float,
    peak_mem_mb: float | None,
) -> Callable[[], None] | None:
    """What writes ``task``'s outcome to ``log``, for the writer to run once the outcome's
    write commits (``Writer.add(after=...)``); None without a log."""
    if log is None:
        return None
    record = completion_record(task, worker, worker_id, status, duration_s, peak_mem_mb)
    return log.line("completion", now, record)
