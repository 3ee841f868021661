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
- Every write that ``add`` accepts ends in exactly one of: committed and its ``Pending``
  resolved, or its ``Pending`` failed with an exception. No path drops one: a timed-out
  idle wait that re-takes the lock after an ``add`` commits that batch; a ``Pending`` is
  resolved at most once (a late outcome of one already failed is ignored); and when the
  thread ends for any reason, every write still queued or in flight fails (``Unavailable``).
- After ``stop`` no write is accepted (``Unavailable``); what was queued before is committed
  within ``stop``'s ``timeout_s``, and what is not committed by then fails (``Unavailable``,
  retry later): a writer blocked on a database lock never keeps a caller waiting past it.
  The one write whose waiter may hear 503 and yet commit is the batch in flight at that
  deadline (if its lock comes free before the process exits): the contract's "a retry with
  the same Idempotency-Key converges" case.
- Nothing is written through a connection that does not hold the writer lock (``Standby``).
  Every ``idle_s`` without writes the thread calls ``on_idle`` (the scheduler's standby
  poll and session check), which may use ``store``: the thread owns the connection. An
  ``on_idle`` that cannot reach the database (``Unavailable``, a driver error) is logged
  once when that starts and once when a round or a commit gets through (``Outage``), not
  every round.
- ``failing`` says why the database did not take the last batch or idle check, from that
  failure until a batch commits or an idle round that checked the database (``on_idle``
  returned True) gets through: ``/healthz`` says degraded meanwhile.

One transaction per batch instead of per request amortises the round trip and the WAL flush
that a single writer cannot overlap: requests that arrive while one batch commits share the
next.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError

from desched.service.disagreements import find_stale
from desched.service.errors import StaleWrite, Standby, Unavailable
from desched.service.store import Store, Write, db_errors

logger = logging.getLogger("desched.service")

Pending = Future[None]
"""Resolves once the change is committed; raises what made its batch fail."""


def wait(pending: Pending | None, timeout: float | None = 30.0) -> None:
    """Block until ``pending`` is committed (synchronous callers and tests)."""
    if pending is not None:
        pending.result(timeout)


def settle(waiters: Sequence[Pending], exc: BaseException | None = None) -> None:
    """Resolve each of ``waiters`` (with ``exc`` when given), skipping any already done: a
    ``Pending`` hears one outcome, the first."""
    for w in waiters:
        if w.done():
            continue
        try:
            if exc is None:
                w.set_result(None)
            else:
                w.set_exception(exc)
        except InvalidStateError:  # settled meanwhile by another thread (``stop``)
            pass


SHUTTING_DOWN_RETRY_S = 1
"""``Retry-After`` of a write refused or failed because the service is shutting down."""


def shutting_down(detail: str) -> Unavailable:
    """The 503 of a write the stopping writer will not commit: retry (with the same
    ``Idempotency-Key``) after ``SHUTTING_DOWN_RETRY_S``, here once restarted or elsewhere."""
    exc = Unavailable(f"{detail}; retry (with the same Idempotency-Key) in a moment")
    exc.retry_after_s = SHUTTING_DOWN_RETRY_S
    return exc


def first_line(exc: BaseException) -> str:
    """The first line of what ``exc`` says (its class's name when it says nothing)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class Outage:
    """Says when ``what`` stops answering and when it answers again: one warning each, not
    one per failed try (a database server's restart is not an error of the service).
    Used by one thread."""

    def __init__(self, what: str, retry_s: float) -> None:
        self.what = what
        self.retry_s = retry_s
        self.since: float | None = None
        """When the outage going on began (monotonic seconds); None while it answers."""

    def lost(self, exc: BaseException) -> None:
        if self.since is None:
            self.since = time.monotonic()
            logger.warning("%s is lost, retrying every %.2f s: %s", self.what, self.retry_s,
                           first_line(exc))

    def over(self) -> None:
        if self.since is not None:
            logger.warning("%s is back after %.1f s", self.what, time.monotonic() - self.since)
            self.since = None


class Writer(threading.Thread):
    """Group commit over ``store`` (a connection of its own); see the module docstring."""

    def __init__(
        self,
        store: Store,
        on_failure: Callable[[BaseException], None],
        on_idle: Callable[[], bool | None] | None = None,
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
        self.in_flight: list[Pending] = []
        """The waiters of the batch being committed (so ``stop`` can fail them)."""
        self.stopping = False
        self.batches = 0
        self._stop_deadline: float | None = None
        self.outage = Outage("the writer's database session", idle_s)
        self.failing: str | None = None
        """Why the database did not take the last batch or idle check, until one gets
        through (module docstring); read by ``/healthz`` from other threads."""
        self.unreachable: tuple[type[Exception], ...] = (Unavailable, *db_errors())

    def add(self, writes: Sequence[Write], after: Callable[[], None] | None = None) -> Pending:
        """Queue ``writes`` (possibly none: a barrier) for the next batch; ``after`` runs in
        this thread once they commit, before any waiter of the batch wakes (never if the
        batch fails). ``Unavailable`` once ``stop`` was called or the thread ended."""
        done: Pending = Future()
        with self.cond:
            if self.stopping:
                raise shutting_down("the service is shutting down")
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
        settle(waiters, exc)

    def stop(self, timeout_s: float = 30.0) -> None:
        """Accept no more writes; commit what is queued, then end the thread. Whatever is not
        committed ``timeout_s`` after the first ``stop`` (the writer is blocked on a database
        lock, or was never started) fails with ``Unavailable``: no caller waits longer.
        Idempotent; a later call waits no longer than the first one's deadline."""
        with self.cond:
            self.stopping = True
            if self._stop_deadline is None:
                self._stop_deadline = time.monotonic() + timeout_s
            deadline = self._stop_deadline
            self.cond.notify()
        if self.ident is not None:
            self.join(timeout=max(0.0, deadline - time.monotonic()))
        if self.ident is None or self.is_alive():
            if self.is_alive():
                logger.error(
                    "the writer did not finish within %.1f s of stop: failing its writes",
                    timeout_s,
                )
            self._abandon(shutting_down("the service stopped before this write committed"))

    def _abandon(self, exc: BaseException) -> None:
        """Refuse new writes and fail every write queued or in flight with ``exc``."""
        with self.cond:
            self.stopping = True
            waiters = [*self.in_flight, *self.waiters]
            self.writes, self.waiters, self.afters = [], [], []
        settle(waiters, exc)

    def run(self) -> None:
        try:
            self._loop()
        except BaseException:
            logger.exception("the writer thread failed: failing every write it holds")
            raise
        finally:
            self._abandon(shutting_down("the writer thread ended before this write committed"))

    def _loop(self) -> None:
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
                    self.in_flight = waiters
            if idle:
                assert self.on_idle is not None
                try:
                    checked = self.on_idle()
                except self.unreachable as exc:  # the next round reconnects
                    self.outage.lost(exc)
                    self.failing = first_line(exc)
                except Exception:  # the next round tries again
                    logger.exception("writer idle round failed")
                else:
                    self.outage.over()
                    if checked:
                        self.failing = None
                continue
            try:
                self.commit(writes)
            except BaseException as exc:  # noqa: BLE001 - every waiter must hear of it
                if isinstance(exc, self.unreachable) and not isinstance(exc, StaleWrite):
                    self.failing = first_line(exc)
                try:
                    self.on_failure(exc)  # memory is rebuilt before any waiter wakes up
                except Exception:  # the writer must outlive a failed recovery
                    logger.exception("recovery after a failed commit failed")
                self._settle_batch(waiters, exc)
                continue
            self.batches += 1
            if writes:  # it reached the database
                self.outage.over()
                self.failing = None
            if afters:
                self._run_afters(afters)
            self._settle_batch(waiters, None)

    def _settle_batch(self, waiters: list[Pending], exc: BaseException | None) -> None:
        """Tell the batch's waiters its outcome; it is no longer in flight."""
        with self.cond:
            self.in_flight = []
        settle(waiters, exc)

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
        """One transaction: every write changes its one row, or none is kept. A write that
        changes none fails the batch with ``StaleWrite``, carrying the evidence
        (``disagreements.find_stale``) once the batch is rolled back."""
        if not writes:
            return
        if not self.store.holds_writer_lock:
            raise Standby("this service does not hold the writer lock")
        try:
            with self.store.transaction():
                for sql, group in itertools.groupby(writes, key=lambda w: w.sql):
                    rows = [w.params for w in group]
                    changed = self.store.executemany(sql, rows)
                    if changed != len(rows):
                        raise StaleWrite(
                            f"{len(rows) - changed} of {len(rows)} conditional writes matched "
                            "no row (memory and database disagree; state reloaded)"
                        )
        except StaleWrite as exc:
            exc.evidence = find_stale(self.store, writes)
            raise
