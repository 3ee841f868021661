"""The single writer: a thread that commits the scheduler's queued writes by group commit.

Invariants:

- Queue order is decision order: ``add`` is called under the scheduler's lock, and a batch is
  committed in one transaction, in queue order. Consecutive writes with the same SQL go to the
  database as one ``executemany``.
- A caller hears of its write only through the ``Pending`` that ``add`` returns: resolved
  after the batch holding it commits, or failed with what made the batch fail. Each ``Write``
  must change exactly one row; one that changes none fails its batch with ``StaleWrite``.
- A write may come with an ``after`` callable (the scheduler's decision-log record): after
  its batch commits, the ``after`` callables of the batch run in queue order, then
  ``after_batch`` (the log's flush), and only then do the batch's waiters wake up. After a
  failed batch they never run.
- After a failed batch, ``on_failure`` runs (the scheduler rebuilds its memory from the
  database) before any waiter of the batch wakes up and before the next batch is taken.
- After ``stop`` no write is accepted (``Unavailable``); what was queued before is committed.
- Nothing is written through a connection that does not hold the writer lock (``Standby``).
  Every ``idle_s`` without writes the thread calls ``on_idle`` (the scheduler's standby
  poll and session check), which may use ``store``: the thread owns the connection.

One transaction per batch instead of per request amortises the round trip and the WAL flush
that a single writer cannot overlap: requests that arrive while one batch commits share the
next.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future

from desched.service.errors import StaleWrite, Standby, Unavailable
from desched.service.store import Store, Write

logger = logging.getLogger("desched.service")

Pending = Future[None]
"""Resolves once the change is committed; raises what made its batch fail."""


def wait(pending: Pending | None, timeout: float | None = 30.0) -> None:
    """Block until ``pending`` is committed (synchronous callers and tests)."""
    if pending is not None:
        pending.result(timeout)


class Writer(threading.Thread):
    """Group commit over ``store`` (a connection of its own); see the module docstring."""

    def __init__(
        self,
        store: Store,
        on_failure: Callable[[BaseException], None],
        on_idle: Callable[[], None] | None = None,
        idle_s: float = 0.25,
        after_batch: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(name="desched-writer", daemon=True)
        self.store = store
        self.on_failure = on_failure
        self.on_idle = on_idle
        self.idle_s = idle_s
        self.after_batch = after_batch
        self.cond = threading.Condition()
        self.writes: list[Write] = []
        self.waiters: list[Pending] = []
        self.afters: list[Callable[[], None]] = []
        self.stopping = False
        self.batches = 0

    def add(self, writes: Sequence[Write], after: Callable[[], None] | None = None) -> Pending:
        """Queue ``writes`` (possibly none: a barrier) for the next batch; ``after`` runs in
        this thread once they commit, before any waiter of the batch wakes (never if the
        batch fails)."""
        done: Pending = Future()
        with self.cond:
            if self.stopping:
                raise Unavailable("the service is shutting down")
            self.writes.extend(writes)
            self.waiters.append(done)
            if after is not None:
                self.afters.append(after)
            self.cond.notify()
        return done

    def fail_queued(self, exc: BaseException) -> None:
        """Fail every write queued but not yet taken (their memory state is being reset)."""
        with self.cond:
            waiters, self.writes, self.waiters, self.afters = self.waiters, [], [], []
        for w in waiters:
            w.set_exception(exc)

    def stop(self) -> None:
        """Commit what is queued, then end the thread."""
        with self.cond:
            self.stopping = True
            self.cond.notify()
        if self.ident is not None:
            self.join(timeout=30)

    def run(self) -> None:
        while True:
            with self.cond:
                idle = False
                while not self.writes and not self.waiters and not self.stopping:
                    if self.on_idle is None:
                        self.cond.wait()
                    elif not self.cond.wait(self.idle_s):
                        # A timed-out wait re-takes the lock after any ``add`` that slipped
                        # in: the round is idle only if nothing is queued now.
                        idle = not self.writes and not self.waiters and not self.stopping
                        break
                if idle:
                    writes, waiters, afters = [], [], []
                else:
                    if not self.writes and not self.waiters:
                        return
                    writes, waiters, afters = self.writes, self.waiters, self.afters
                    self.writes, self.waiters, self.afters = [], [], []
            if idle:
                assert self.on_idle is not None
                try:
                    self.on_idle()
                except Exception:  # the next round tries again
                    logger.exception("writer idle round failed")
                continue
            try:
                self.commit(writes)
            except BaseException as exc:  # noqa: BLE001 - every waiter must hear of it
                try:
                    self.on_failure(exc)  # memory is rebuilt before any waiter wakes up
                except Exception:  # the writer must outlive a failed recovery
                    logger.exception("recovery after a failed commit failed")
                for w in waiters:
                    w.set_exception(exc)
                continue
            self.batches += 1
            if afters:
                self._run_afters(afters)
            for w in waiters:
                w.set_result(None)

    def _run_afters(self, afters: list[Callable[[], None]]) -> None:
        """The committed batch's ``after`` callables, then ``after_batch``; a failure is
        logged and does not keep the waiters from hearing of their commit."""
        try:
            for after in afters:
                after()
            if self.after_batch is not None:
                self.after_batch()
        except Exception:  # the change is committed: its callers must hear so
            logger.exception("after-commit callback failed")

    def commit(self, writes: list[Write]) -> None:
        """One transaction: every write changes its one row, or none is kept."""
        if not writes:
            return
        if not self.store.holds_writer_lock:
            raise Standby("this service does not hold the writer lock")
        with self.store.transaction():
            for sql, group in itertools.groupby(writes, key=lambda w: w.sql):
                rows = [w.params for w in group]
                changed = self.store.executemany(sql, rows)
                if changed != len(rows):
                    raise StaleWrite(
                        f"{len(rows) - changed} of {len(rows)} conditional writes matched no "
                        "row (memory and database disagree; state reloaded)"
                    )
