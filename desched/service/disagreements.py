"""Memory and database disagreeing: the evidence of a ``StaleWrite``, and its report.

Every write of a task is conditional: its ``WHERE`` names the state memory believes the row
is in (``store``), and a batch in which one matches no row fails whole (``StaleWrite``).
Memory runs ahead of the database only by the writes queued and not yet committed, in queue
order; a failed batch fails everything queued behind it and memory is rebuilt from the
database before any of its callers hears of it (``scheduler``). So in normal operation a
conditional write always finds the row as memory expects, and a ``StaleWrite`` is a bug, or a
row changed behind the service's back. When one happens the writer replays its batch, one
write at a time, in a transaction it then rolls back (``find_stale``), so the report names
the first write that matched no row, the row as committed and what the write expected; the
scheduler adds what its memory held for that task, logs it at ERROR and counts it
(``desched_state_disagreements_total``). Cost: nothing until a batch fails.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from desched.service.errors import StaleWrite
from desched.service.records import LiveTask
from desched.service.store import Store, Write

logger = logging.getLogger("desched.service")


class _Discard(Exception):
    """Ends the replay's transaction, which is always rolled back."""


@dataclass(frozen=True, slots=True)
class StaleRow:
    """The first write of a failed batch that matched no row, and that row as committed."""

    write: Write
    seq: int | None
    """The task the write names (None for a write that is not a task update)."""
    expected: Mapping[str, Any]
    """The columns the write's ``WHERE`` names, with the values it expected."""
    found: Mapping[str, Any] | None
    """The row as the database holds it (``Store.task_row``); None when there is none."""

    def describe(self) -> str:
        statement = self.write.sql.split(" SET ", 1)[0]
        expected = _columns(self.expected)
        if self.seq is None:
            return f"{statement} {self.write.params!r} changed no row"
        if self.found is None:
            return f"{statement} expected task seq={self.seq} with {expected}: no such row"
        return (
            f"{statement} expected task seq={self.seq} with {expected}; the database has "
            f"{_columns(self.found)}"
        )


def _columns(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in values.items())


def _where(write: Write) -> tuple[int | None, dict[str, Any]]:
    """The task ``seq`` an ``UPDATE tasks ... WHERE seq = ? AND ...`` names, and the values
    its ``WHERE`` expects; ``(None, {})`` for another statement."""
    head, _, where = write.sql.partition(" WHERE ")
    if not head.startswith("UPDATE tasks ") or not where.startswith("seq = ?"):
        return None, {}
    names = [part.split(" = ")[0].strip() for part in where.split(" AND ")]
    values = write.params[len(write.params) - len(names) :]
    expected = dict(zip(names, values))
    return int(expected.pop("seq")), expected


def find_stale(store: Store, writes: Sequence[Write]) -> StaleRow | None:
    """Replay ``writes`` (a batch that failed with ``StaleWrite`` and was rolled back) one
    at a time in a transaction that is rolled back: the first that changes no row, with its
    row as committed. None when every write matched this time (the row changed again
    meanwhile) or the replay itself failed. The writer thread calls it; ``store`` is its."""
    stale: StaleRow | None = None
    try:
        with store.transaction():
            for write in writes:
                if store.executemany(write.sql, [write.params]) != 1:
                    seq, expected = _where(write)
                    found = None if seq is None else store.task_row(seq)
                    stale = StaleRow(write, seq, expected, found)
                    break
            raise _Discard
    except _Discard:
        pass
    except Exception:  # the evidence is a courtesy: the batch failed either way
        logger.exception("could not replay the failed batch for its evidence")
    return stale


def memory_view(
    seq: int, live: Mapping[int, LiveTask], ending: Mapping[str, str], task_id: str | None
) -> str:
    """What the scheduler's memory holds for task ``seq``: queued, leased (to whom, under
    which lease), ended with its write not yet committed, or not live. O(live tasks): it
    runs only after a disagreement."""
    for task in live.values():
        if task.seq == seq:
            if task.lease_id is None:
                return "queued"
            return f"leased to {task.worker!r} under lease_id={task.lease_id!r}"
    if task_id is not None and task_id in ending:
        return f"ended ({ending[task_id]}), its write not yet committed"
    return "not live (ended, or never submitted)"


def report(exc: StaleWrite, live: Mapping[int, LiveTask], ending: Mapping[str, str]) -> None:
    """Log the disagreement ``exc`` at ERROR: the write, its row as committed and what
    memory (``live``, ``ending``) held for that task. The scheduler calls it under its lock,
    before it rebuilds memory."""
    stale: StaleRow | None = exc.evidence
    held = "unknown"
    if stale is not None and stale.seq is not None:
        task_id = stale.found["task_id"] if stale.found is not None else None
        held = memory_view(stale.seq, live, ending, task_id)
    logger.error(
        "memory and database disagree, rebuilding state from the database: %s; the write: "
        "%s; memory held the task as: %s",
        exc,
        "not found again on replay" if stale is None else stale.describe(),
        held,
    )
