"""The live decision log: JSON lines with the columns of ``desched.runs`` (DESIGN.md, Files).

One file per process and UTC day: ``<dir>/decision-log-<YYYYMMDD>-<pid>-<start>.jsonl`` (the
ingestion flow reads ``*log*.jsonl``); ``seq`` counts the records of one file from 0 and ``t``
never decreases within a file. Decision records carry ``kind="decision"`` and
``DECISION_COLUMNS`` plus the policy's components and ``free_mem_mb``; completion records
carry ``kind="completion"`` and ``COMPLETION_COLUMNS`` plus the task's features and
``predicted_s``. A task has one completion record, for its outcome: ``ok``, or ``failed``
once dead-lettered (a retried attempt shows as a second decision for the task). ``worker``
is a stable integer code of the worker instance, ``worker_name`` its readable
``name/worker_id``. NaN is written as null.

A record is written after its state change is committed to the database (by the
scheduler's writer thread), so a crash between the two loses that record (the database stays
the source of truth); a record is never written for a change that did not commit.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any


def _clean(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


class DecisionLog:
    """Appends records; each ``write`` is one line flushed to the OS (not fsynced).
    Thread-safe."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.lock = threading.Lock()
        self.seq = 0
        self._day = ""
        self._file: IO[str] | None = None
        self._started = int(time.time())

    @property
    def path(self) -> Path | None:
        return Path(self._file.name) if self._file is not None else None

    def _open(self, t: float) -> IO[str]:
        day = datetime.fromtimestamp(t, tz=UTC).strftime("%Y%m%d")
        if self._file is None or day != self._day:
            if self._file is not None:
                self._file.close()
            self.folder.mkdir(parents=True, exist_ok=True)
            name = f"decision-log-{day}-{os.getpid()}-{self._started}.jsonl"
            self._file = (self.folder / name).open("a", encoding="utf-8", buffering=1)
            self._day = day
            self.seq = 0
        return self._file

    def write(self, kind: str, t: float, record: dict[str, Any]) -> None:
        with self.lock:
            out = self._open(t)
            line = {"kind": kind, "seq": self.seq, "t": t}
            line.update({k: _clean(v) for k, v in record.items()})
            out.write(json.dumps(line, allow_nan=False) + "\n")
            self.seq += 1

    def close(self) -> None:
        with self.lock:
            if self._file is not None:
                self._file.close()
                self._file = None
