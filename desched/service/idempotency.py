"""Idempotent submits: a retry with the same ``Idempotency-Key`` creates nothing new.

A submit with a key stores the key, each task's index in the batch and the SHA-256 of the
batch's content (``records.request_digest``) with its rows; a repeat with the same key and the
same content gets the earlier ids, with other content a ``Conflict``. Until the first
submit's rows commit the database does not show them, so the keys of submits still being
committed are kept here with their ``Pending``: a repeat in that window gets the same ids and
awaits the same commit. The scheduler calls this under its lock; ``clear`` forgets the
in-flight keys when their writes were failed (memory rebuilt).
"""

from __future__ import annotations

import threading

from desched.service.errors import Conflict
from desched.service.store import Store
from desched.service.writer import Pending

REUSED = "Idempotency-Key was already used for a different submit"


class SubmitKeys:
    """Idempotency keys: in flight here, committed in ``store`` (read under ``read_lock``)."""

    def __init__(self, store: Store, read_lock: threading.Lock) -> None:
        self.store = store
        self.read_lock = read_lock
        self._in_flight: dict[tuple[str, str], tuple[list[str], str, Pending]] = {}

    def earlier(
        self, tenant: str, key: str, digest: str
    ) -> tuple[list[str], Pending | None] | None:
        """The ids of ``tenant``'s earlier submit with ``key``, and the commit to await (None
        once committed); None when there was none. ``Conflict`` when its content differed."""
        in_flight = self._in_flight.get((tenant, key))
        if in_flight is not None:
            ids, earlier_digest, pending = in_flight
            if earlier_digest != digest:
                raise Conflict(REUSED)
            return list(ids), pending
        with self.read_lock:
            stored = self.store.batch(tenant, key)
        if not stored:
            return None
        if stored[0][1] != digest:
            raise Conflict(REUSED)
        return [task_id for task_id, _ in stored], None

    def remember(
        self, tenant: str, key: str, ids: list[str], digest: str, pending: Pending
    ) -> None:
        """Keep ``key`` in flight until ``pending`` (the submit's commit) is done."""
        self._in_flight[tenant, key] = (ids, digest, pending)
        pending.add_done_callback(lambda _: self._in_flight.pop((tenant, key), None))

    def clear(self) -> None:
        self._in_flight.clear()
