"""The live scheduler: the single writer between the HTTP layer, the policy and the store.

``Scheduler`` coordinates rooms that each do one job: the ``LeaseBook`` (``leases``) owns
leases and their expiry; the ``PolicyHost`` (``policy_host``) installs the live policy and
persists and restores its state; ``dispatch`` picks what a poll gets; the ``Writer``
(``writer``) commits by group commit; ``SubmitKeys`` (``idempotency``) makes submits
idempotent; the ``TokenBook`` (``tokens``) knows who holds a token; ``Predictions``
(``predictions``) predicts duration and memory at submit; ``Telemetry`` (``telemetry``) counts
and renders ``/metrics``; every SQL statement is in ``store``; the decision log's records are
built in ``decision_log``. The scheduler itself holds, in memory, a ``TaskTable`` of the tasks
it has seen (whose positions the policy ranks), the live tasks by position (``live``,
``position``), the queued positions and the backlog per tenant, and decides every state
change; it calls the rooms under its lock, and none calls back into it but the writer,
which reports a failed commit (``_recover``). The database is the durable record; memory is
rebuilt from it at start.

Invariants, each enforced under one lock (``lock``):

- Write-ahead with group commit: every state change is decided in memory under the lock
  and, under the same lock, appended to the writer's queue as a conditional write built by
  the store; the writer thread commits everything queued in one transaction, in order, and
  only then releases the callers' responses (the ``Pending`` each method returns). So a
  submit is acknowledged only once its rows are committed, a worker hears of a lease only
  once it is recorded, and a completion is a conditional update (``state = 'leased' AND
  lease_id = ?``): a task is completed at most once whatever the retries, crashes and
  restarts. A batch that fails to commit fails every caller waiting on it (503) and memory
  is rebuilt from the database, which then holds exactly what was acknowledged. A write
  that finds its row otherwise than memory held it is a bug (``disagreements``): logged at
  ERROR with the evidence and counted in ``/metrics`` before the rebuild.
- Every live task is in exactly one of: queued (in ``queued`` and in the policy), leased (in
  the lease book). A lease that passes ``lease_expires_at`` without a heartbeat puts its task
  back in the queue (or dead-letters it after ``max_retries`` retries); so does ``fail``. The
  lease book only reports what expired; the scheduler requeues.
- Per-tenant policy state (VTC's counters, ifs-counter's decayed service, the round-robin
  ring) is saved in the ``config`` table through the writer, at most every ``state_save_s``
  and at a clean stop, and taken back when memory is rebuilt under the same policy and
  parameters (``Policy.state``/``restore``), so a restart does not forgive a flooding
  tenant. After a crash the state is up to ``state_save_s`` old; a policy switch starts fresh.
- Time is the injected clock's ``now`` (epoch seconds, never decreasing, not even across a
  restart: it starts no lower than the latest time stored). Policies see only that ``now``.
- A decision-log record is written only after its change commits (``decision_log``): the
  writer thread runs it (``Writer.add(after=...)``) once the batch holding the change has
  committed and before any caller of that batch hears of it, in queue (decision) order.
- One active service per database (high availability on PostgreSQL): only a process whose
  writer connection holds the database's writer lock (``Store.try_writer_lock``) is
  ``active``, and only an active one changes state. A process that finds the lock taken
  stands by: it refuses every request with 503 and ``Retry-After`` (``Standby``), and its
  writer thread tries the lock every ``standby_poll_s``; when it gets it (the active process
  died: its session, and so its lock, went with it) it rebuilds memory from the database,
  restores the saved policy state and serves. An active process whose writer session was
  lost and whose lock another process took meanwhile stands by (``LostLeadership``). SQLite
  has no standby: a second service on the same file is refused at start.
- Cancellation: a tenant's queued task leaves the policy (``Policy.remove``: no per-tenant
  charge); a leased one loses its lease, and its worker's next heartbeat, completion or
  failure gets 410 (``Gone``). Either is a conditional write; a repeated cancel changes nothing.
- Tenant controls (``admission``): weights, caps, rate limits and priority levels are read
  from the store at every rebuild and, when their epoch moved, every sweep
  (``refresh_controls``); a leased task counts against its tenant's cap until its lease
  ends (completion, failure, expiry, cancellation).
- Tokens: ``TokenBook`` caches principals; ``refresh_tokens`` (every sweep) drops the cache
  when the database's token epoch moved (a revocation) and acknowledges the epoch.

The mechanism never branches on which policy runs; it reads only the policy's declared
``reads``: to refuse one that needs predictions when no predictor is loaded, and to label
the tasks such a policy ranks (``labels``). A poll that
states the worker's ``free_mem_mb`` gets the policy's first candidate predicted to fit in it
(``dispatch``, memory-aware dispatch); the policy is then exactly as if only that task had
been dispatched.

Memory: a ``LiveTask`` per live task, gone when it ends; the ``TaskTable`` keeps a row per task
submitted since the start (~150 bytes when finished) until a start or rebuild compacts it.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Sequence
from typing import Any

from desched.errors import DeschedError
from desched.models.interfaces import DurationPredictor, MemoryPredictor
from desched.policies.base import Policy
from desched.service.admission import Admission
from desched.service.clock import Clock
from desched.service.decision_log import (
    DecisionLog,
    cancel_record,
    completion_line,
    decision_record,
)
from desched.service.disagreements import report
from desched.service.dispatch import pop_fitting
from desched.service.errors import (
    Conflict,
    Forbidden,
    LostLeadership,
    NotFound,
    NotLive,
    ServiceError,
    StaleWrite,
    Standby,
    Unavailable,
    ended_refusal,
)
from desched.service.idempotency import SubmitKeys
from desched.service.labels import label_stored, label_typical, recorded_name
from desched.service.leases import LeaseBook
from desched.service.policy_host import PolicyHost, PolicySpec
from desched.service.predictions import Predictions
from desched.service.records import (
    Grant,
    Lease,
    LiveTask,
    NewTask,
    Principal,
    TaskState,
    request_digest,
)
from desched.service.schemas import Health, TaskView, health_status
from desched.service.store import (
    CONTROLS_EPOCH_SEEN_KEY,
    TOKEN_EPOCH_SEEN_KEY,
    Dialect,
    Store,
    cancel_write,
    complete_write,
    config_write,
    dead_letter_write,
    extend_write,
    insert_write,
    lease_write,
    requeue_write,
)
from desched.service.telemetry import Snapshot, Telemetry
from desched.service.tokens import TokenBook
from desched.service.writer import Pending, Writer, wait
from desched.trace import TaskTable

logger = logging.getLogger("desched.service")


class Scheduler:
    """See the module docstring. Methods that change state return a ``Pending`` the caller
    awaits before answering; refusals raise ``ServiceError``. ``store`` serves reads (under
    ``read_lock``); ``write_store``, a second connection, belongs to the writer thread."""

    def __init__(
        self,
        store: Store,
        *,
        lease_s: float,
        max_retries: int,
        write_store: Store | None = None,
        clock: Clock | None = None,
        log: DecisionLog | None = None,
        predictor: DurationPredictor | None = None,
        policy: str | None = None,
        policy_params: dict[str, str] | None = None,
        memory_model: MemoryPredictor | None = None,
        max_fit_skips: int = 64,
        state_save_s: float = 5.0,
        standby_poll_s: float = 0.25,
    ) -> None:
        self.store = store
        self.write_store = write_store or Store(store.url, durability=store.durability)
        self.max_retries = max_retries
        self.clock = clock if clock is not None else Clock()
        self.log = log
        self.max_fit_skips = max_fit_skips
        self.lock = threading.Lock()
        self.read_lock = threading.Lock()
        self.active = False
        """Whether this process holds the writer lock and serves (module docstring)."""
        self.writer = Writer(
            self.write_store,
            self._recover,
            self._idle,
            standby_poll_s,
            after_batch=None if log is None else log.flush,
        )
        self.predictions = Predictions(predictor, memory_model)
        self.host = PolicyHost(has_predictor=predictor is not None, state_save_s=state_save_s)
        self.leases = LeaseBook(lease_s)
        self.tokens = TokenBook(store, self.read_lock)
        self.telemetry = Telemetry(self._snapshot)
        self.counters = self.telemetry.counters
        self._wanted = None if policy is None else PolicySpec(policy, dict(policy_params or {}))
        self.keys = SubmitKeys(store, self.read_lock)
        self.admission = Admission()
        self._reset()

    @property
    def policy(self) -> Policy:
        """The live policy."""
        return self.host.policy

    def _reset(self) -> None:
        self._stale = False
        self.tasks = TaskTable.empty()
        self.live: dict[int, LiveTask] = {}
        self.position: dict[str, int] = {}
        self.queued: set[int] = set()
        self.backlog: dict[str, int] = {}
        self.ending: dict[str, str] = {}
        self.next_seq = 0
        self.leases.clear()
        self.admission.reset(self.tasks, lambda i: self.live[i].priority)

    def start(self) -> None:
        """Create the schema and start the writer thread; take the writer lock and serve
        (record the policy asked for, rebuild memory from the database), or stand by when
        another service holds the lock on PostgreSQL. On SQLite a held lock is an error."""
        if self._wanted is not None:
            self.host.check(self._wanted.name, self._wanted.params)
        with self.lock:
            with self.read_lock:
                self.store.migrate()
            if self.write_store.try_writer_lock():
                self._activate()
            elif self.write_store.dialect is Dialect.SQLITE:
                self.write_store.acquire_writer_lock()  # raises, naming the lock
            else:
                logger.warning("another desched service holds the writer lock: standing by")
        self.writer.start()

    def _activate(self) -> None:
        """Serve: record the policy asked for, rebuild memory from the database (the saved
        policy state included) and take the token epoch. Under the lock, in the thread that
        owns ``write_store``, which holds the writer lock and records the policy."""
        if self._wanted is not None:
            self.write_store.set_policy(self._wanted.name, self._wanted.params)
        with self.read_lock:
            spec = PolicySpec.recorded(self.store.recorded_policy(), self.host.default.name)
        if spec.config is None:
            logger.warning("no policy recorded: running %s (%s)", spec.name,
                           self.host.default_reason)
        try:
            self._rebuild(spec)
        except DeschedError as exc:
            # A recorded policy that cannot run here (e.g. no predictor any more) must not
            # keep the service down: run the default and say why on /healthz.
            self._rebuild(self.host.default)
            self.host.refuse(spec.config, f"recorded policy {spec.name!r} refused: {exc}")
        self.tokens.clear()
        self.active = True

    def _demote(self, why: BaseException) -> None:
        """Stand by (the writer lock was lost): forget memory; the writer retries the lock."""
        logger.error("standing by: %s", why)
        self.writer.fail_queued(why)
        self.keys.clear()
        self._reset()
        self.tokens.clear()
        self.active = False
        self.counters.demotions += 1

    def _idle(self) -> bool:
        """Called by the writer thread, on its own connection, every ``standby_poll_s`` it
        has nothing to write: a standby tries the writer lock and takes over when it gets it;
        an active one checks that its session (and so its lock) is still there. Whether it
        reached the database (SQLite: no check); an unreachable one raises."""
        store = self.write_store
        if store.dialect is Dialect.SQLITE:
            return False
        try:
            if store.holds_writer_lock:
                store.ping()
                if self.active:
                    return True  # else a takeover whose rebuild failed: try it again
            elif not store.try_writer_lock():
                return True
        except LostLeadership as exc:
            with self.lock:
                self._demote(exc)
            return True
        with self.lock:
            self._activate()
            self.counters.takeovers += 1
        logger.warning("took over: this service holds the writer lock and serves")
        return True

    def _require_active(self) -> None:
        """``Standby`` (503, Retry-After) unless this process serves; ``Unavailable`` while
        memory waits for a rebuild (``_stale``): memory half reset answers nothing."""
        if not self.active:
            raise Standby(
                "this desched service stands by (another one holds the database's writer "
                "lock); retry, here or at another address"
            )
        if self._stale:
            raise Unavailable("reloading state from the database after a failed commit; retry")

    def drain(self, timeout_s: float = 30.0) -> None:
        """Save the policy's state, then accept no more writes: what is queued commits, and
        what has not committed ``timeout_s`` after the first call fails with 503
        (``Writer.stop``), so no request waits on a writer blocked on a database lock.
        Idempotent; ``stop`` calls it, and ``desched serve`` calls it at SIGTERM, before the
        HTTP server waits for the requests in flight."""
        held = self.writer.is_alive() and self.active and self.lock.acquire(timeout=1.0)
        if held:
            try:
                write = self.host.state_write(self.clock(), True) if self.active else None
                if write is not None:
                    self.writer.add([write])
            except Unavailable:  # stopping already
                pass
            finally:
                self.lock.release()
        self.writer.stop(timeout_s)

    def stop(self, timeout_s: float = 30.0) -> None:
        """``drain``, then close both connections (idempotent); one a stuck writer still
        uses is left for the process's exit to drop."""
        self.drain(timeout_s)
        if not self.lock.acquire(timeout=1.0):
            logger.error("stopping without closing the database: the scheduler lock is held")
            return
        try:
            with self.read_lock:
                if self.log is not None:
                    self.log.close()
                self.store.close()
                if not self.writer.is_alive():
                    self.write_store.close()
        finally:
            self.lock.release()

    def _rebuild(self, spec: PolicySpec) -> None:
        """Memory from the database: every queued and leased task, then the policy's index
        and its saved state; ``_stale`` (503s, the housekeeper retries) until it completes."""
        self._reset()
        self._stale = True
        with self.read_lock:
            self.clock.raise_floor(self.store.latest_time())
            self.next_seq = self.store.max_seq() + 1
            rows = self.store.live_tasks()
            epoch = self.store.controls_epoch()
            self.admission.apply(self.store.tenant_controls(), epoch)
        for row in rows:
            self._load(row)
        label_stored(self.predictions, self.tasks, self.live, self.counters, spec.name)
        self.host.install(spec, self.tasks, self.queued, self.clock())
        with self.read_lock:
            saved = self.store.saved_policy_state()
        if self.host.restore(saved, self.clock()):
            self.counters.policy_state_restores += 1
        self._stale = False

    def _recover(self, exc: BaseException) -> None:
        """A batch failed to commit: fail what is queued behind it and rebuild from the
        database (a stateful policy takes back its last saved state); stand by if the
        writer lock was lost."""
        if not self.write_store.holds_writer_lock:
            with self.lock:
                self._demote(exc)
            return
        with self.lock:
            if isinstance(exc, StaleWrite):  # a bug, or a row changed behind our back
                self.counters.state_disagreements += 1
                report(exc, self.live, self.ending)
            else:
                logger.error("commit failed, rebuilding state from the database: %s", exc)
            self.writer.fail_queued(exc)
            self.keys.clear()
            try:
                self._rebuild(self.host.spec)
            except Exception:  # the database is down: the housekeeper retries the rebuild
                logger.exception("rebuild failed")
                self._reset()
                self._stale = True

    def _admit(self, task: LiveTask) -> int:
        """Give ``task`` a position in the task table and make it live; its position."""
        i = self.tasks.append(task.task_id, task.tenant, task.submit_s, math.nan,
                              task.predicted_s, task.predicted_p50_s, task.predicted_p90_s)
        self.live[i] = task
        self.position[task.task_id] = i
        return i

    def _load(self, row: dict[str, Any]) -> None:
        task = LiveTask.from_row(row)
        i = self._admit(task)
        self.backlog.setdefault(task.tenant, 0)
        if row["state"] == TaskState.LEASED.value:
            self.leases.adopt(i, task)
            self.admission.gate.started(i)
        else:
            self.queued.add(i)
            self.backlog[task.tenant] += 1
            self.admission.gate.queued(i)

    def save_policy_state(self, force: bool = False) -> Pending | None:
        """Record the policy's per-tenant state, at most once per ``state_save_s`` unless
        ``force``, and only when it changed (``PolicyHost.state_write``); the commit, or None
        when nothing was written. What changed after the last save is lost at a crash,
        which only shifts counters by that much service."""
        with self.lock:
            if not self.active or self._stale:
                return None
            write = self.host.state_write(self.clock(), force)
            return None if write is None else self.writer.add([write])

    def refresh_policy(self) -> bool:
        """Switch to the live policy recorded in the database if it changed; whether it did.

        A switch rebuilds the index of the queued tasks under the new policy; a stateful
        policy starts with fresh per-tenant state. A recorded policy that cannot run here
        (unknown, bad parameters, needs a predictor) is refused and the current one stays;
        ``/healthz`` says why.
        """
        with self.read_lock:
            config = self.store.recorded_policy()
        with self.lock:
            if not self.active or self._stale or config is None or not self.host.is_new(config):
                return False
            label_stored(self.predictions, self.tasks, self.live, self.counters,
                         recorded_name(config))
            if not self.host.switch(config, self.tasks, self.queued, self.clock()):
                return False
            self.counters.policy_switches += 1
            return True

    def principal(self, token: str) -> Principal:
        """Who holds ``token``: ``Standby`` while standing by, ``Unauthorized`` for an unknown,
        revoked or expired token (``TokenBook``)."""
        self._require_active()
        return self.tokens.principal(token)

    def refresh_tokens(self) -> Pending | None:
        """Drop the token cache if the database's token epoch moved (a revocation) and
        acknowledge the epoch applied (``TOKEN_EPOCH_SEEN_KEY``); the acknowledgement's
        commit, or None when nothing moved. Cost: one query."""
        if not self.active:
            return None
        with self.read_lock:
            epoch = self.store.token_epoch()
        with self.lock:
            if not self.active or not self.tokens.refresh(epoch):
                return None
            return self.writer.add([config_write(TOKEN_EPOCH_SEEN_KEY, str(epoch))])

    def refresh_controls(self) -> Pending | None:
        """Apply the tenant controls recorded in the store if their epoch moved, and
        acknowledge the epoch (``CONTROLS_EPOCH_SEEN_KEY``); the acknowledgement's commit,
        or None when nothing moved. Cost: one query, two when it moved."""
        if not self.active:
            return None
        with self.read_lock:
            epoch = self.store.controls_epoch()
            if epoch == self.admission.epoch:
                return None
            controls = self.store.tenant_controls()
        with self.lock:
            if not self.active:
                return None
            self.admission.apply(controls, epoch)
            return self.writer.add([config_write(CONTROLS_EPOCH_SEEN_KEY, str(epoch))])

    def submit(
        self, tenant: str, items: Sequence[NewTask], idempotency_key: str | None = None
    ) -> tuple[list[str], bool, Pending | None]:
        """Accept ``items`` for ``tenant``: their ids, whether they are new, and the commit
        to await before acknowledging.

        With ``idempotency_key``, a repeat of an earlier submit (committed or still being
        committed) returns the earlier ids and creates nothing; the same key with other
        content is a ``Conflict``. Predictions are computed here, once, and stored; the
        memory model and the key's database read run before the lock is taken, so polls
        never wait behind them (``idempotency``).
        """
        digest = request_digest(items) if idempotency_key is not None else ""
        memory = self.predictions.memory_mb(tenant, items)
        key = idempotency_key
        stored = self.keys.stored(tenant, key) if key is not None and self.active else None
        with self.lock:
            self._require_active()
            if idempotency_key is not None:
                earlier = self.keys.earlier(tenant, idempotency_key, digest, stored)
                if earlier is not None:
                    return earlier[0], False, earlier[1]
            now = self.clock()
            self.admission.check_submit(tenant, len(items), now)
            new = [
                LiveTask.submitted(
                    self.next_seq + j,
                    tenant,
                    item,
                    now,
                    self.predictions.durations(tenant, item, now),
                    memory[j],
                )
                for j, item in enumerate(items)
            ]
            if idempotency_key is None:
                pending = self.writer.add([insert_write(t, None, None, None) for t in new])
            else:
                writes = [insert_write(t, idempotency_key, j, digest) for j, t in enumerate(new)]
                pending = self.writer.add(writes)
            self.next_seq += len(new)
            positions = [self._admit(task) for task in new]
            label_typical(self.host.policy, self.tasks, self.live, positions, self.counters)
            for i in positions:
                self._enqueue(i, now)
            self.counters.submitted += len(new)
            ids = [t.task_id for t in new]
            if idempotency_key is not None:
                self.keys.remember(tenant, idempotency_key, ids, digest, pending)
            return ids, True, pending

    def task_view(self, tenant: str, task_id: str) -> TaskView:
        """The stored record of ``task_id`` if ``tenant`` owns it, else ``NotFound``."""
        self._require_active()
        with self.read_lock:
            view = self.store.task_view(task_id)
        if view is None or view["tenant"] != tenant:
            raise NotFound(f"no task {task_id!r} for this tenant")
        return TaskView(**view)

    def poll(
        self, worker: str, worker_id: str, free_mem_mb: float | None = None
    ) -> tuple[Grant | None, Pending | None]:
        """The policy's winner among the tasks that fit in ``free_mem_mb`` (all of them when
        it is None), leased to ``worker``, with the commit of the lease to await;
        ``(None, None)`` when no queued task fits (module docstring, memory-aware dispatch).
        """
        with self.lock:
            self._require_active()
            t0 = time.perf_counter()
            now = self.clock()
            self._expire(now)
            if not self.queued:
                return None, None
            policy = self.host.policy
            queue_len = len(self.queued)
            gate = self.admission.gate
            i, skipped = pop_fitting(policy, self.live, now, free_mem_mb, self.max_fit_skips,
                                     gate=gate, queued=self.queued)
            self.counters.unfit_skips += skipped
            if i is None:
                self.counters.unfit_polls += 1
                return None, None
            task = self.live[i]
            lease_id = self.leases.new_lease_id()
            expires = self.leases.expiry(now)
            attempt = task.attempts + 1
            write = lease_write(task.seq, attempt, worker, worker_id, lease_id,
                                lease_expires_at=expires, start_s=now)
            tenant_backlog = self.backlog[task.tenant]
            logged = None
            if self.log is not None:
                record = decision_record(
                    task,
                    policy,
                    worker=worker,
                    worker_id=worker_id,
                    queue_len=queue_len,
                    tenant_backlog=tenant_backlog,
                    wait_s=now - task.submit_s,
                    free_mem_mb=free_mem_mb,
                    skipped_unfit=skipped,
                )
                record.update(self.admission.in_force(task.tenant), priority=task.priority)
                logged = self.log.line("decision", now, record)
            pending = self.writer.add([write], after=logged)
            gate.unqueued(i)
            gate.started(i)
            self.queued.discard(i)
            self.backlog[task.tenant] -= 1
            task.attempts = attempt
            self.leases.grant(i, task, worker, worker_id, lease_id, expires_at=expires, now=now)
            self.counters.decisions += 1
            self.counters.observe_latency(time.perf_counter() - t0)
            return Grant(task, lease_id, expires, attempt), pending

    def _leased(self, worker: str, task_id: str, lease_id: str, now: float) -> tuple[int, LiveTask]:
        """The leased task ``task_id`` if ``worker`` holds its current lease ``lease_id``;
        ``Gone`` when its tenant cancelled it."""
        self._require_active()
        self._expire(now)
        i = self.position.get(task_id)
        task = self.live.get(i) if i is not None else None
        if task is None or task.lease_id is None:
            # Memory first: the database lags it by the writes not yet committed.
            state = TaskState.QUEUED.value if task is not None else self.ending.get(task_id)
            if state is None:
                raise NotLive(task_id)  # ended before: ``refusal_for`` reads the database
            raise ended_refusal(task_id, state)
        assert i is not None
        if task.worker != worker:
            raise Forbidden(f"task {task_id!r} is leased to another worker")
        if task.lease_id != lease_id:
            raise Conflict(f"{lease_id!r} is not the current lease of task {task_id!r}")
        return i, task

    def refusal_for(self, task_id: str) -> ServiceError:
        """The answer to a lease call ``NotLive`` found ended: a database read, off ``lock``."""
        self._require_active()
        with self.read_lock:
            return ended_refusal(task_id, self.store.task_state(task_id))

    def heartbeat(self, worker: str, task_id: str, lease_id: str) -> tuple[float, Pending]:
        """Extend the lease by ``lease_s`` from now: the new expiry time, and its commit."""
        with self.lock:
            now = self.clock()
            i, task = self._leased(worker, task_id, lease_id, now)
            expires = self.leases.expiry(now)
            pending = self.writer.add([extend_write(task.seq, lease_id, expires)])
            self.leases.extend(i, task, expires)
            return expires, pending

    def complete(
        self,
        worker: str,
        task_id: str,
        lease_id: str,
        duration_s: float,
        peak_mem_mb: float | None = None,
        result_ref: str | None = None,
    ) -> Pending:
        """Record the task as done, once: a conditional update on the current lease."""
        with self.lock:
            now = self.clock()
            i, task = self._leased(worker, task_id, lease_id, now)
            write = complete_write(
                task.seq,
                lease_id,
                end_s=now,
                duration_s=duration_s,
                peak_mem_mb=peak_mem_mb,
                result_ref=result_ref,
            )
            logged = completion_line(
                self.log, now, task, task.worker, task.worker_id, "ok", duration_s, peak_mem_mb
            )
            pending = self.writer.add([write], after=logged)
            self.leases.release(i)
            self.admission.gate.finished(i)
            self._forget(i, task, TaskState.DONE, pending)
            self.counters.completed += 1
            self.host.policy.complete(i, now, duration_s)
            self.predictions.observe_completion(task.tenant, task.task_type, duration_s)
            return pending

    def fail(
        self, worker: str, task_id: str, lease_id: str, error: str, retryable: bool = True
    ) -> tuple[TaskState, Pending]:
        """The attempt failed: requeue the task, or dead-letter it once it has used
        ``max_retries`` retries (or at once when not ``retryable``). Returns its new state."""
        with self.lock:
            now = self.clock()
            i, task = self._leased(worker, task_id, lease_id, now)
            held = self.leases.release(i)
            self.admission.gate.finished(i)
            state, pending = self._end_attempt(i, task, held, now, error, retryable)
            self.counters.failed += 1
            return state, pending

    def cancel(self, tenant: str, task_id: str) -> tuple[str, Pending | None]:
        """Cancel ``tenant``'s queued or leased task ``task_id``: the state it was in
        (``queued``, ``leased``; ``cancelled`` for a repeat, which changes nothing) and the
        commit to await. ``NotFound`` for another tenant's task, ``Conflict`` for an ended one
        (done, dead). A task not live here is read from the database outside the lock (a
        stalled database holds up this request only): a task never becomes live again."""
        with self.lock:
            self._require_active()
            now = self.clock()
            self._expire(now)
            i = self.position.get(task_id)
            task = self.live.get(i) if i is not None else None
            if i is not None and task is not None and task.tenant == tenant:
                return self._cancel_live(i, task, now)
            ending = self.ending.get(task_id)
        with self.read_lock:
            view = self.store.task_view(task_id)
        if view is None or view["tenant"] != tenant:
            raise NotFound(f"no task {task_id!r} for this tenant")
        state = ending or view["state"]
        if state != TaskState.CANCELLED.value:
            raise Conflict(f"task {task_id!r} cannot be cancelled: it is {state}")
        with self.lock:
            return TaskState.CANCELLED.value, self.writer.add([])  # after the first's

    def _cancel_live(self, i: int, task: LiveTask, now: float) -> tuple[str, Pending | None]:
        """``cancel`` of live task ``i`` (``task``), under the lock."""
        was = TaskState.QUEUED.value if task.lease_id is None else TaskState.LEASED.value
        logged = None
        if self.log is not None:
            leased = task.lease_id is not None
            worker, worker_id = (task.worker, task.worker_id) if leased else (None, None)
            record = cancel_record(task, was, worker, worker_id)
            logged = self.log.line("cancel", now, record)
        if task.lease_id is None:
            pending = self.writer.add([cancel_write(task.seq, None, now)], after=logged)
            self.host.policy.remove(i, now)
            self.admission.gate.unqueued(i)
            self.queued.discard(i)
            self.backlog[task.tenant] -= 1
            self.counters.cancelled_queued += 1
        else:
            held = self.leases.release(i)
            self.admission.gate.finished(i)
            write = cancel_write(task.seq, held.lease_id, now)
            pending = self.writer.add([write], after=logged)
            self.counters.cancelled_leased += 1
        self._forget(i, task, TaskState.CANCELLED, pending)
        return was, pending

    def _end_attempt(
        self, i: int, task: LiveTask, held: Lease, now: float, error: str, retryable: bool
    ) -> tuple[TaskState, Pending]:
        """Task ``i``'s attempt under the lease ``held`` (released already) ended in
        ``error``: requeue it, or dead-letter it (and log its outcome, ``failed``) when out of
        retries or not ``retryable``."""
        if not retryable or task.attempts > self.max_retries:
            ran_s = now - task.start_s
            logged = completion_line(
                self.log, now, task, held.worker, held.worker_id, "failed", ran_s, None
            )
            write = dead_letter_write(task.seq, held.lease_id, error, now)
            pending = self.writer.add([write], after=logged)
            self._forget(i, task, TaskState.DEAD, pending)
            self.counters.dead_lettered += 1
            return TaskState.DEAD, pending
        pending = self.writer.add([requeue_write(task.seq, held.lease_id, error)])
        self._enqueue(i, now)
        return TaskState.QUEUED, pending

    def _enqueue(self, i: int, now: float) -> None:
        tenant = self.live[i].tenant
        self.queued.add(i)
        self.backlog[tenant] = self.backlog.get(tenant, 0) + 1
        self.admission.gate.queued(i)
        self.host.policy.push(i, now)

    def _forget(self, i: int, task: LiveTask, state: TaskState, pending: Pending) -> None:
        """Task ``i`` ended in ``state``; until ``pending`` (its write) commits, ``ending``
        remembers the state the database does not show yet."""
        del self.live[i]
        del self.position[task.task_id]
        self.ending[task.task_id] = state.value
        pending.add_done_callback(lambda _: self.ending.pop(task.task_id, None))

    def _expire(self, now: float) -> int:
        """Requeue (or dead-letter) every task whose lease ended before ``now``; how many."""
        expired = self.leases.expired(now)
        for i, task, held in expired:
            self.admission.gate.finished(i)
            self._end_attempt(i, task, held, now, "lease expired", True)
            self.counters.lease_expiries += 1
        return len(expired)

    def flush(self, timeout: float | None = 30.0) -> None:
        """Block until every write queued so far is committed."""
        wait(self.writer.add([]), timeout)

    def sweep(self) -> int:
        """Expire due leases (the housekeeper calls this periodically); how many expired.
        After a failed rebuild (the database was down) it retries the rebuild first."""
        with self.lock:
            if not self.active:
                return 0
            if self._stale:
                self._rebuild(self.host.spec)
            return self._expire(self.clock())

    def health(self) -> Health:
        """What ``/healthz`` answers: the role, the policy in force and the queue sizes."""
        with self.lock:
            status, detail = health_status(self.active, self._stale, self.writer.failing)
            return Health(
                status=status, detail=detail, role="active" if self.active else "standby",
                policy=self.host.spec.name,
                params=self.host.policy.params.model_dump() if self.active else {},
                queued=len(self.queued), leased=len(self.leases),
                predictor=self.predictions.duration is not None,
                predicted_labels=self.predictions.labels(), policy_error=self.host.error,
                default_policy=self.host.default.name,
                default_policy_reason=self.host.default_reason,
            )

    def _snapshot(self) -> Snapshot:
        """What one scrape of ``/metrics`` reports, read in one go under the lock."""
        with self.lock:
            return Snapshot(
                counters=self.counters.copy(), queue_length=sorted(self.backlog.items()),
                leased=len(self.leases), policy=self.host.spec.name, active=self.active,
                tenants=self.admission.tenants(self.tasks),
                rate_limited=self.admission.rate_limited,
            )

    def metrics(self) -> str:
        """Prometheus text exposition (version 0.0.4; ``telemetry``)."""
        return self.telemetry.exposition()
