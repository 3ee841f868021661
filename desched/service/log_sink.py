"""The service's log lines reach stderr through a thread of their own, so that logging never
blocks the service.

A write to stderr blocks for as long as whoever reads it does not (a pipe holds about
64 KiB: a log shipper that stalls, a parent that reads only at exit). The service logs on
its event loop (a storage error) and in its writer thread under the scheduler's lock (a
failed commit), so one blocked write there stops every request, ``/healthz`` included.
``NonBlockingLog`` gives a logging handler whose call only puts the record in a bounded
queue; a thread writes the queue to the real handler (stderr). When the queue is full a
record is dropped and counted, and the count is logged before the next record that gets
through. Cost per record: its formatting and one queue operation in the caller. A record
still queued when the process is killed is lost (the thread writes within microseconds of
the call while stderr is read).
"""

from __future__ import annotations

import logging
import queue
import threading
from logging.handlers import QueueHandler

QUEUE_RECORDS = 10_000
"""Records held for the writing thread; past that they are dropped (and counted)."""


class DroppingQueueHandler(QueueHandler):
    """A ``QueueHandler`` that drops a record its full queue cannot take instead of raising
    (the base class reports ``queue.Full`` to stderr, the very stream that is stuck)."""

    def __init__(self, records: queue.Queue[logging.LogRecord | None]) -> None:
        super().__init__(records)
        self.dropped = 0
        """Records dropped since the last notice (``Handler.handle`` serialises ``emit``)."""
        self.dropped_total = 0

    def enqueue(self, record: logging.LogRecord) -> None:
        try:
            if self.dropped:
                self.queue.put_nowait(self._notice(self.dropped))
                self.dropped = 0
            self.queue.put_nowait(record)
        except queue.Full:
            self.dropped += 1
            self.dropped_total += 1

    @staticmethod
    def _notice(n: int) -> logging.LogRecord:
        return logging.LogRecord("desched.service", logging.WARNING, __file__, 0,
                                 "%d log records dropped: the log queue was full (stderr not "
                                 "read)", (n,), None)


class NonBlockingLog:
    """``handler`` queues records; a daemon thread hands them to ``out`` (see the module
    docstring)."""

    def __init__(self, out: logging.Handler, capacity: int = QUEUE_RECORDS) -> None:
        self.out = out
        self.records: queue.Queue[logging.LogRecord | None] = queue.Queue(capacity)
        self.handler = DroppingQueueHandler(self.records)
        self._thread = threading.Thread(target=self._write, name="desched-log", daemon=True)
        self._thread.start()

    def _write(self) -> None:
        while (record := self.records.get()) is not None:
            self.out.handle(record)

    def close(self, timeout_s: float = 2.0) -> None:
        """Write what is queued and end the thread, waiting at most about ``timeout_s``
        twice (stderr may still not be read: what is left then is lost at exit)."""
        try:
            self.records.put(None, timeout=timeout_s)
        except queue.Full:
            return
        self._thread.join(timeout_s)
