"""Idempotent submits: a retry with the same ``Idempotency-Key`` creates nothing new.

A submit with a key stores the key, each task's index in the batch and the SHA-256 of the
batch's content (``records.request_digest``) with its rows; a repeat with the same key and the
same content gets the earlier ids, with other content a ``Conflict``. Until the first
submit's rows commit the database does not show them, so the keys of submits still being
committed are kept here with their ``Pending``: a repeat in that window gets the same ids and
awaits the same commit.

The database is read before the scheduler's lock is taken (``stored``), never under it: a
database that stalls then holds up that submit alone, not every poll and completion behind
the lock. A commit that lands between that read and the lock is not missed: a key whose
submit committed here moves from in flight to ``recent`` (the last ``RECENT_IDS`` task ids'
worth of keys), which ``earlier`` reads under the lock after the in-flight keys. Should a
key have left ``recent`` by then (``RECENT_IDS`` ids committed in that instant), the
database's unique ``(tenant, batch_key, batch_index)`` refuses the second batch: a 503, and
the retry finds the first. ``clear`` forgets the in-flight keys when their writes were failed
(memory rebuilt); ``recent`` holds only committed facts and is kept.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from desched.service.errors import Conflict
from desched.service.store import Store
from desched.service.writer import Pending

REUSED = "Idempotency-Key was already used for a different submit"

RECENT_IDS = 100_000
"""Task ids kept in ``recent`` (about 5 MB); the oldest keys leave first."""

Stored = list[tuple[str, str | None]]
"""A batch as the database holds it: ``(task_id, request_sha256)`` in batch order."""


class SubmitKeys:
    """Idempotency keys: in flight and recently committed here, committed in ``store`` (read
    under ``read_lock``)."""

    def __init__(self, store: Store, read_lock: threading.Lock) -> None:
        self.store = store
        self.read_lock = read_lock
        self._in_flight: dict[tuple[str, str], tuple[list[str], str, Pending]] = {}
        self._recent: OrderedDict[tuple[str, str], tuple[list[str], str]] = OrderedDict()
        self._recent_ids = 0
        self._recent_lock = threading.Lock()  # commits arrive on the writer's thread

    def stored(self, tenant: str, key: str) -> Stored:
        """The batch ``tenant`` committed with ``key`` as the database holds it (empty when
        none); read before the scheduler's lock is taken."""
        with self.read_lock:
            return self.store.batch(tenant, key)

    def earlier(
        self, tenant: str, key: str, digest: str, stored: Stored | None = None
    ) -> tuple[list[str], Pending | None] | None:
        """The ids of ``tenant``'s earlier submit with ``key``, and the commit to await (None
        once committed); None when there was none. ``Conflict`` when its content differed.
        ``stored`` is what ``stored`` read before the lock (read here when not given)."""
        in_flight = self._in_flight.get((tenant, key))
        if in_flight is not None:
            ids, earlier_digest, pending = in_flight
            if earlier_digest != digest:
                raise Conflict(REUSED)
            return list(ids), pending
        with self._recent_lock:
            recent = self._recent.get((tenant, key))
        if recent is not None:
            ids, earlier_digest = recent
            if earlier_digest != digest:
                raise Conflict(REUSED)
            return list(ids), None
        if stored is None:
            stored = self.stored(tenant, key)
        if not stored:
            return None
        if stored[0][1] != digest:
            raise Conflict(REUSED)
        return [task_id for task_id, _ in stored], None

    def remember(
        self, tenant: str, key: str, ids: list[str], digest: str, pending: Pending
    ) -> None:
        """Keep ``key`` in flight until ``pending`` (the submit's commit) is done; then, if
        it committed, among the recent keys."""
        self._in_flight[tenant, key] = (ids, digest, pending)

        def done(outcome: Pending) -> None:
            if outcome.exception() is None:
                self._committed((tenant, key), ids, digest)
            self._in_flight.pop((tenant, key), None)

        pending.add_done_callback(done)

    def _committed(self, at: tuple[str, str], ids: list[str], digest: str) -> None:
        with self._recent_lock:
            if at not in self._recent:
                self._recent_ids += len(ids)
            self._recent[at] = (ids, digest)
            while self._recent_ids > RECENT_IDS and len(self._recent) > 1:
                _, (gone, _) = self._recent.popitem(last=False)
                self._recent_ids -= len(gone)

    def clear(self) -> None:
        self._in_flight.clear()
