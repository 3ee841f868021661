"""The lease book: which live tasks are leased, to whom, until when.

It owns the leases and their expiry and never calls back: ``expired(now)`` takes the leases
that ended and returns them, and the scheduler decides what becomes of their tasks (requeue
or dead-letter). It does no I/O and keeps no lock; the scheduler calls it under its own.

Invariants:

- A task is in the book if and only if its ``lease_id`` is set; only the book sets and
  clears a task's lease fields (``worker``, ``worker_id``, ``lease_id``,
  ``lease_expires_at``).
- Every lease in the book has an entry ``(lease_expires_at, position, lease_id)`` in the
  expiry heap. An entry whose lease was released or extended since is stale and skipped
  when it reaches the top (a heartbeat pushes a new entry instead of moving the old one).
- A lease expires when ``now`` passes ``lease_expires_at``: at the expiry instant itself it
  still holds.

Cost: ``grant`` and ``extend`` O(log h), ``release`` O(1), ``expired`` O(log h) per heap
entry it pops, where h is the heap's size (leases plus the stale entries not popped yet).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator, Mapping

from desched.service.records import Lease, LiveTask, new_lease_id


class LeaseBook(Mapping[int, LiveTask]):
    """The leased tasks by position in the task table, read-only as a mapping; see the module
    docstring."""

    def __init__(self, lease_s: float) -> None:
        self.lease_s = lease_s
        self._held: dict[int, LiveTask] = {}
        self._expiry: list[tuple[float, int, str]] = []

    def __getitem__(self, i: int) -> LiveTask:
        return self._held[i]

    def __iter__(self) -> Iterator[int]:
        return iter(self._held)

    def __len__(self) -> int:
        return len(self._held)

    def clear(self) -> None:
        """Forget every lease (memory is being rebuilt)."""
        self._held.clear()
        self._expiry.clear()

    @staticmethod
    def new_lease_id() -> str:
        """A fresh lease id (128 random bits): a worker cannot guess another's."""
        return new_lease_id()

    def expiry(self, now: float) -> float:
        """When a lease granted or extended at ``now`` expires."""
        return now + self.lease_s

    def grant(
        self,
        i: int,
        task: LiveTask,
        worker: str,
        worker_id: str,
        lease_id: str,
        *,
        expires_at: float,
        now: float,
    ) -> None:
        """Lease the queued task ``i`` to ``worker``; its attempt starts at ``now``."""
        task.worker, task.worker_id = worker, worker_id
        task.lease_id, task.lease_expires_at, task.start_s = lease_id, expires_at, now
        self._held[i] = task
        heapq.heappush(self._expiry, (expires_at, i, lease_id))

    def adopt(self, i: int, task: LiveTask) -> None:
        """Take back a lease read from the database (its fields already set) at a rebuild."""
        self._held[i] = task
        heapq.heappush(self._expiry, (task.lease_expires_at, i, task.lease_id or ""))

    def extend(self, i: int, task: LiveTask, expires_at: float) -> None:
        """Move the expiry of the lease task ``i`` holds (a heartbeat)."""
        task.lease_expires_at = expires_at
        heapq.heappush(self._expiry, (expires_at, i, task.lease_id or ""))

    def release(self, i: int) -> Lease:
        """End the lease task ``i`` holds (completed, failed, expired); the lease it was."""
        task = self._held.pop(i)
        ended = Lease(task.lease_id or "", task.worker, task.worker_id, task.lease_expires_at)
        task.lease_id, task.worker, task.worker_id = None, None, None
        task.lease_expires_at = math.nan
        return ended

    def expired(self, now: float) -> list[tuple[int, LiveTask, Lease]]:
        """Release every lease whose expiry is before ``now``, in expiry order:
        ``(position, task, the lease it held)``."""
        out: list[tuple[int, LiveTask, Lease]] = []
        heap, held = self._expiry, self._held
        while heap and heap[0][0] < now:
            expires, i, lease_id = heapq.heappop(heap)
            task = held.get(i)
            if task is None or task.lease_id != lease_id or task.lease_expires_at != expires:
                continue  # superseded by a heartbeat, or the lease already ended
            out.append((i, task, self.release(i)))
        return out
