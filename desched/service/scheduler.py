"""The live scheduler: the single writer between the HTTP layer, the policy and the store.

It owns, in memory, a ``TaskTable`` of the tasks it has seen, the policy's ranking index over
the queued ones (the very policy objects the simulator drives), the leases of the running
ones with a heap of their expiry times, and the counters ``/metrics`` reports. The database
is the durable record; memory is rebuilt from it at start (``start``).

Invariants, each enforced under one lock:

- Write-ahead with group commit: every state change is decided in memory under the lock
  and, under the same lock, appended to the ``Writer``'s queue as a conditional SQL write;
  the writer thread commits everything queued in one transaction, in order, and only then
  releases the callers' responses (the ``Pending`` future each method returns). So a
  submit is acknowledged only once its rows are committed, a worker hears of a lease only
  once it is recorded, and a completion is a conditional update (``state = 'leased' AND
  lease_id = ?``): a task is completed at most once whatever the retries, crashes and
  restarts. A batch that fails to commit fails every caller waiting on it (503) and memory
  is rebuilt from the database, which then holds exactly what was acknowledged. One
  transaction per batch instead of per request amortises the round trip and WAL flush
  that a single writer cannot overlap.
- Every live task is in exactly one of: queued (in the policy), leased (in ``leases``).
  A lease that passes ``lease_expires_at`` without a heartbeat puts its task back in the
  queue (or dead-letters it after ``max_retries`` retries); so does ``fail``.
- Per-tenant policy state (VTC's counters, ifs-counter's decayed service, the round-robin
  ring) is saved in the ``config`` table through the writer, at most every ``state_save_s``
  and at a clean stop, and taken back when memory is rebuilt under the same policy and
  parameters (``Policy.state``/``restore``), so a restart does not forgive a flooding
  tenant. After a crash the state is up to ``state_save_s`` old; a policy switch starts fresh.
- Time is the injected clock's ``now`` (epoch seconds, never decreasing, not even across a
  restart: it starts no lower than the latest time stored). Policies see only that ``now``.

The mechanism never branches on which policy runs; it reads only the policy's declared
``reads`` to refuse one that needs predictions when no predictor is loaded.

Memory-aware dispatch (the memory-constrained scheduling that motivates the enrichment
workers): every task carries ``predicted_mem_mb``, fixed at submit: the larger of the
submitted ``mem_mb`` hint and the memory model's prediction (either may be absent; with
neither it is unknown and the task fits anywhere). A poll that states ``free_mem_mb`` gets
only a task with ``predicted_mem_mb <= free_mem_mb``: ``Policy.pop_fitting`` gives the
first task of the policy's pop sequence that fits, and afterwards the policy, its logged
score included, is exactly as if only that task had been dispatched (``Policy.take``): a
skipped task stays queued and no per-tenant state moves for it (a skipped round-robin tenant
keeps its turn, a skipped VTC tenant is not charged; ``desched/policies/base.py``). After
``max_fit_skips`` candidates that do not fit, the poll gets nothing and the policy is
unchanged. Cost: one pop when the first candidate fits (a poll without ``free_mem_mb`` is a
plain pop); for s skipped, about s + 1 pops and s pushes where a pop moves nothing but the
queue, and for round-robin and VTC a walk of the pop sequence over copies of their ring or
counters plus one ``take``. A worker may hold several leases at once: a GPU worker polls
again, with what its memory has left, while a task fits.

Memory: live tasks cost a ``LiveTask`` each and leave memory when they end; the
``TaskTable`` (whose positions the policy holds) keeps one row per task submitted since the
start, about 150 bytes for a finished one, until the next start or rebuild compacts it.
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import itertools
import json
import logging
import math
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any

from desched.errors import DeschedError
from desched.models.interfaces import DurationPredictor, MemoryPredictor
from desched.policies import get_policy, make_policy, parse_params
from desched.policies.base import Policy
from desched.service.decision_log import DecisionLog
from desched.service.store import (
    POLICY_KEY,
    POLICY_STATE_KEY,
    SET_CONFIG,
    TASK_COLUMNS,
    Role,
    Store,
    TaskState,
    hash_token,
)
from desched.trace import TaskTable

logger = logging.getLogger("desched.service")

DEFAULT_POLICY = "ifs-memoryless"
Pending = Future[None]
"""Resolves once the change is committed; raises what made its batch fail."""
LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class ServiceError(DeschedError):
    """A refused request; ``status`` is its HTTP status."""

    status = 400


class NotFound(ServiceError):
    status = 404


class Forbidden(ServiceError):
    status = 403


class Conflict(ServiceError):
    status = 409


class Unavailable(ServiceError):
    status = 503


class Clock:
    """Epoch seconds that never decrease, starting no lower than ``floor``."""

    def __init__(self, floor: float = 0.0, source: Callable[[], float] = time.time) -> None:
        self.source = source
        self.last = floor

    def raise_floor(self, floor: float) -> None:
        self.last = max(self.last, floor)

    def __call__(self) -> float:
        t = self.source()
        self.last = max(self.last, t)
        return self.last


@dataclass(frozen=True, slots=True)
class Principal:
    role: Role
    name: str


@dataclass(frozen=True, slots=True)
class NewTask:
    """One task of a submit, as validated by the HTTP layer."""

    task_type: str
    document_ref: str = ""
    doc_bytes: int | None = None
    pages: int | None = None
    mem_mb: float | None = None


@dataclass(slots=True)
class LiveTask:
    """A queued or leased task, in memory."""

    seq: int
    task_id: str
    tenant: str
    task_type: str
    document_ref: str
    doc_bytes: int | None
    pages: int | None
    mem_mb: float | None
    submit_s: float
    predicted_s: float
    predicted_mem_mb: float | None = None
    attempts: int = 0
    worker: str | None = None
    worker_id: str | None = None
    lease_id: str | None = None
    lease_expires_at: float = math.nan
    start_s: float = math.nan


@dataclass(frozen=True, slots=True)
class Grant:
    """A task handed to a worker, with its lease."""

    task: LiveTask
    lease_id: str
    lease_expires_at: float
    attempt: int


@dataclass(slots=True)
class Counters:
    submitted: int = 0
    decisions: int = 0
    completed: int = 0
    failed: int = 0
    dead_lettered: int = 0
    lease_expiries: int = 0
    policy_switches: int = 0
    unfit_skips: int = 0
    unfit_polls: int = 0
    policy_state_restores: int = 0
    latency_sum_s: float = 0.0
    latency_buckets: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_S) + 1))

    def observe_latency(self, seconds: float) -> None:
        self.latency_sum_s += seconds
        self.latency_buckets[bisect.bisect_left(LATENCY_BUCKETS_S, seconds)] += 1


class StaleWrite(Unavailable):
    """A conditional write matched fewer rows than it must: memory and database disagree."""


@dataclass(frozen=True, slots=True)
class Write:
    """One SQL write that must change exactly one row."""

    sql: str
    params: tuple[Any, ...]


def _insert_sql() -> str:
    cols = ", ".join(TASK_COLUMNS)
    return f"INSERT INTO tasks ({cols}) VALUES ({', '.join('?' for _ in TASK_COLUMNS)})"


INSERT_TASK = _insert_sql()


def update_write(seq: int, expect: dict[str, Any], values: dict[str, Any]) -> Write:
    """``UPDATE tasks SET values WHERE seq = ? AND expect``: must change one row."""
    sets = ", ".join(f"{k} = ?" for k in values)
    where = "".join(f" AND {k} = ?" for k in expect)
    return Write(
        f"UPDATE tasks SET {sets} WHERE seq = ?{where}",
        (*values.values(), seq, *expect.values()),
    )


class Writer(threading.Thread):
    """Group commit: commits every queued ``Write`` in one transaction, in queue order.

    ``add`` is called under the scheduler's lock, so queue order is decision order.
    Consecutive writes with the same SQL go to the database as one ``executemany``. After a
    commit every waiter of the batch is released; after a failure every waiter gets the
    exception, after ``on_failure`` has run (and before the next batch is taken).
    """

    def __init__(self, store: Store, on_failure: Callable[[BaseException], None]) -> None:
        super().__init__(name="desched-writer", daemon=True)
        self.store = store
        self.on_failure = on_failure
        self.cond = threading.Condition()
        self.writes: list[Write] = []
        self.waiters: list[Pending] = []
        self.stopping = False
        self.batches = 0

    def add(self, writes: Sequence[Write]) -> Pending:
        done: Pending = Future()
        with self.cond:
            if self.stopping:
                raise Unavailable("the service is shutting down")
            self.writes.extend(writes)
            self.waiters.append(done)
            self.cond.notify()
        return done

    def fail_queued(self, exc: BaseException) -> None:
        """Fail every write queued but not yet taken (their memory state is being reset)."""
        with self.cond:
            waiters, self.writes, self.waiters = self.waiters, [], []
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
                while not self.writes and not self.waiters and not self.stopping:
                    self.cond.wait()
                if not self.writes and not self.waiters:
                    return
                writes, waiters = self.writes, self.waiters
                self.writes, self.waiters = [], []
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
            for w in waiters:
                w.set_result(None)

    def commit(self, writes: list[Write]) -> None:
        if not writes:
            return
        with self.store.transaction():
            for sql, group in itertools.groupby(writes, key=lambda w: w.sql):
                rows = [w.params for w in group]
                changed = self.store.executemany(sql, rows)
                if changed != len(rows):
                    raise StaleWrite(
                        f"{len(rows) - changed} of {len(rows)} conditional writes matched no "
                        "row (memory and database disagree; state reloaded)"
                    )


def worker_columns(worker: str, worker_id: str) -> dict[str, Any]:
    """``worker``: a stable Int64 for ``name/worker_id`` (the decision log's worker column is
    an integer, as in the simulator); ``worker_name``: the readable form."""
    name = f"{worker}/{worker_id}"
    code = int.from_bytes(hashlib.sha256(name.encode()).digest()[:7], "big")
    return {"worker": code, "worker_name": name}


def wait(pending: Pending | None, timeout: float | None = 30.0) -> None:
    """Block until ``pending`` is committed (synchronous callers and tests)."""
    if pending is not None:
        pending.result(timeout)


def request_digest(items: Sequence[NewTask]) -> str:
    """SHA-256 of a submit's content: a replay with the same key must carry the same tasks."""
    body = json.dumps(
        [[t.task_type, t.document_ref, t.doc_bytes, t.pages, t.mem_mb] for t in items],
        separators=(",", ":"),
    )
    return hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()


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
    ) -> None:
        self.store = store
        self.write_store = (
            write_store
            if write_store is not None
            else Store(store.url, durability=store.durability)
        )
        self.lease_s = lease_s
        self.max_retries = max_retries
        self.clock = clock if clock is not None else Clock()
        self.log = log
        self.predictor = predictor
        self.memory_model = memory_model
        self.max_fit_skips = max_fit_skips
        self.state_save_s = state_save_s
        self._state_saved: tuple[float, Any] = (-math.inf, None)
        self.lock = threading.Lock()
        self.read_lock = threading.Lock()
        self.writer = Writer(self.write_store, self._recover)
        self.counters = Counters()
        self._principals: dict[str, Principal] = {}
        self._wanted_policy = policy
        self._wanted_params = dict(policy_params or {})
        self._policy_spec: tuple[str, dict[str, Any], str | None] = (DEFAULT_POLICY, {}, None)
        self._rejected_config: str | None = None
        self._pending_keys: dict[tuple[str, str], tuple[list[str], str, Pending]] = {}
        self.policy_error: str | None = None
        self.policy: Policy
        self._reset()

    def _reset(self) -> None:
        self._stale = False
        self.tasks = TaskTable.empty()
        self.live: dict[int, LiveTask] = {}
        self.position: dict[str, int] = {}
        self.queued: set[int] = set()
        self.leases: dict[int, LiveTask] = {}
        self.expiry: list[tuple[float, int, str]] = []
        self.backlog: dict[str, int] = {}
        self.ending: dict[str, str] = {}
        self.next_seq = 0

    # Start, recovery and policy --------------------------------------------------------------

    def start(self) -> None:
        """Create the schema, take the writer lock, rebuild memory from the database and start
        the writer thread."""
        with self.lock:
            self.store.migrate()
            self.store.acquire_writer_lock()
            if self._wanted_policy is not None:
                parse_params(self._wanted_policy, self._wanted_params)
                self._check_policy(self._wanted_policy)
                self.store.set_policy(self._wanted_policy, self._wanted_params)
            name, params, config = self._recorded_policy()
            try:
                self._rebuild(name, params, config)
            except DeschedError as exc:
                # A recorded policy that cannot run here (e.g. no predictor any more) must not
                # keep the service down: run the default and say why on /healthz.
                self._rebuild(DEFAULT_POLICY, {}, None)
                self._rejected_config = config
                self.policy_error = f"recorded policy {name!r} refused: {exc}"
        self.writer.start()

    def stop(self) -> None:
        """Save the policy's state, commit what is queued and stop the writer; close both
        connections (idempotent)."""
        if self.writer.is_alive():
            try:
                self.save_policy_state(force=True)
            except Unavailable:
                pass
        self.writer.stop()
        with self.lock, self.read_lock:
            if self.log is not None:
                self.log.close()
            self.store.close()
            self.write_store.close()

    def _rebuild(self, name: str, params: dict[str, Any], config: str | None) -> None:
        """Memory from the database: every queued and leased task, then the policy's index."""
        self._reset()
        with self.read_lock:
            self.clock.raise_floor(self.store.latest_time())
            self.next_seq = self.store.max_seq() + 1
            rows = self.store.live_tasks()
        for row in rows:
            self._load(row)
        self._install(name, params, config)
        self._restore_policy_state()

    def _recover(self, exc: BaseException) -> None:
        """A batch failed to commit: fail what is queued behind it and rebuild from the
        database (a stateful policy takes back its last saved state)."""
        logger.error("commit failed, rebuilding state from the database: %s", exc)
        with self.lock:
            self.writer.fail_queued(exc)
            self._pending_keys.clear()
            name, params, config = self._policy_spec
            try:
                self._rebuild(name, params, config)
            except Exception:  # the database is down: the housekeeper retries the rebuild
                logger.exception("rebuild failed")
                self._reset()
                self._stale = True

    def _load(self, row: dict[str, Any]) -> None:
        predicted = row["predicted_s"] if row["predicted_s"] is not None else math.nan
        task = LiveTask(
            seq=row["seq"],
            task_id=row["task_id"],
            tenant=row["tenant"],
            task_type=row["task_type"],
            document_ref=row["document_ref"],
            doc_bytes=row["doc_bytes"],
            pages=row["pages"],
            mem_mb=row["mem_mb"],
            submit_s=row["submit_s"],
            predicted_s=predicted,
            predicted_mem_mb=row.get("predicted_mem_mb"),
            attempts=row["attempts"],
        )
        i = self.tasks.append(task.task_id, task.tenant, task.submit_s, math.nan, predicted)
        self.live[i] = task
        self.position[task.task_id] = i
        self.backlog.setdefault(task.tenant, 0)
        if row["state"] == TaskState.LEASED.value:
            task.worker, task.worker_id = row["worker"], row["worker_id"]
            task.lease_id, task.lease_expires_at = row["lease_id"], row["lease_expires_at"]
            task.start_s = row["start_s"] if row["start_s"] is not None else math.nan
            self.leases[i] = task
            heapq.heappush(self.expiry, (task.lease_expires_at, i, task.lease_id or ""))
        else:
            self.queued.add(i)
            self.backlog[task.tenant] += 1

    # Policy state across restarts ---------------------------------------------------------

    def _policy_identity(self) -> str:
        name, params, _ = self._policy_spec
        return json.dumps({"name": name, "params": params}, sort_keys=True, default=str)

    def save_policy_state(self, force: bool = False) -> Pending | None:
        """Record the policy's per-tenant state (``Policy.state``) in the database, at most
        once per ``state_save_s`` unless ``force``, and only when it changed; the commit, or
        None when nothing was written. A restart under the same policy and parameters takes
        it back (``_restore_policy_state``), so a flooding tenant's counter survives a
        restart; what changed after the last save (at most ``state_save_s``, or nothing
        after a clean stop) is lost, which only shifts counters by that much service."""
        with self.lock:
            now = self.clock()
            last_at, last_state = self._state_saved
            if not force and now - last_at < self.state_save_s:
                return None
            state = self.policy.state()
            self._state_saved = (now, state)
            if state is None or state == last_state:
                return None
            value = json.dumps(
                {"policy": self._policy_identity(), "saved_at": now, "state": state},
                sort_keys=True,
                allow_nan=False,
            )
            return self.writer.add([Write(SET_CONFIG, (POLICY_STATE_KEY, value))])

    def _restore_policy_state(self) -> None:
        """Give the freshly built policy the state saved by an earlier run of the same policy
        with the same parameters; a state that does not apply is ignored with a warning."""
        with self.read_lock:
            saved = self.store.get_config(POLICY_STATE_KEY)
        if saved is None:
            return
        try:
            record = json.loads(saved)
            if record["policy"] != self._policy_identity():
                return
            self.policy.restore(record["state"])
        except (ValueError, KeyError, TypeError) as exc:
            logger.warning("saved policy state not restored: %s", exc)
            return
        self._state_saved = (self.clock(), record["state"])
        self.counters.policy_state_restores += 1

    def _recorded_policy(self) -> tuple[str, dict[str, Any], str | None]:
        with self.read_lock:
            config = self.store.get_config(POLICY_KEY)
        if config is None:
            return DEFAULT_POLICY, {}, None
        try:
            value = json.loads(config)
            return str(value["name"]), dict(value.get("params") or {}), config
        except (ValueError, KeyError, TypeError):
            raise DeschedError(
                f"the recorded live policy is unreadable: {config[:200]!r}"
            ) from None

    def _check_policy(self, name: str) -> None:
        if "predicted_s" in get_policy(name).reads and self.predictor is None:
            raise DeschedError(
                f"policy {name!r} ranks on 'predicted_s' but no duration predictor is loaded "
                "(train one, or point DESCHED_PREDICTOR_REGISTRY at a registry with a champion)"
            )

    def _install(self, name: str, params: dict[str, Any], config: str | None) -> None:
        """Build policy ``name`` over the task table and queue every queued task, in order."""
        self._check_policy(name)
        policy = make_policy(name, self.tasks, params)
        now = self.clock()
        for i in sorted(self.queued):
            policy.push(i, now)
        self.policy = policy
        self._policy_spec = (name, params, config)

    def refresh_policy(self) -> bool:
        """Switch to the live policy recorded in the database if it changed; whether it did.

        A switch rebuilds the index of the queued tasks under the new policy; a stateful
        policy starts with fresh per-tenant state. A recorded policy that cannot run here
        (unknown, bad parameters, needs a predictor) is refused and the current one stays;
        ``/healthz`` says why.
        """
        with self.read_lock:
            config = self.store.get_config(POLICY_KEY)
        with self.lock:
            if config is None or config in (self._policy_spec[2], self._rejected_config):
                return False
            try:
                name, params, config = self._recorded_policy()
                self._install(name, params, config)
            except DeschedError as exc:
                self._rejected_config = config
                self.policy_error = str(exc)
                return False
            self.policy_error = None
            self.counters.policy_switches += 1
            return True

    # Tokens ----------------------------------------------------------------------------------

    def principal(self, token: str) -> Principal | None:
        """Who holds ``token``, or None. Known tokens are cached; unknown ones are looked up
        (an admin may have added one since)."""
        digest = hash_token(token)
        found = self._principals.get(digest)
        if found is not None:
            return found
        with self.read_lock:
            row = self.store.principal(digest)
        if row is None:
            return None
        found = self._principals[digest] = Principal(row[0], row[1])
        return found

    # Tenants ---------------------------------------------------------------------------------

    def submit(
        self, tenant: str, items: Sequence[NewTask], idempotency_key: str | None = None
    ) -> tuple[list[str], bool, Pending | None]:
        """Accept ``items`` for ``tenant``: their ids, whether they are new, and the commit
        to await before acknowledging.

        With ``idempotency_key``, a repeat of an earlier submit (committed or still being
        committed) returns the earlier ids and creates nothing; the same key with other
        content is a ``Conflict``. Predictions are computed here, once, and stored; the
        memory model runs before the lock is taken, so polls do not wait behind it.
        """
        digest = request_digest(items) if idempotency_key is not None else None
        memory = self._predict_memory(tenant, items)
        with self.lock:
            if idempotency_key is not None:
                in_flight = self._pending_keys.get((tenant, idempotency_key))
                if in_flight is not None:
                    ids, earlier_digest, pending = in_flight
                    if earlier_digest != digest:
                        raise Conflict("Idempotency-Key was already used for a different submit")
                    return list(ids), False, pending
                with self.read_lock:
                    earlier = self.store.batch(tenant, idempotency_key)
                if earlier:
                    if earlier[0][1] != digest:
                        raise Conflict("Idempotency-Key was already used for a different submit")
                    return [task_id for task_id, _ in earlier], False, None
            now = self.clock()
            new: list[LiveTask] = []
            writes: list[Write] = []
            for j, item in enumerate(items):
                task = LiveTask(
                    seq=self.next_seq + j,
                    task_id=uuid.uuid4().hex,
                    tenant=tenant,
                    task_type=item.task_type,
                    document_ref=item.document_ref,
                    doc_bytes=item.doc_bytes,
                    pages=item.pages,
                    mem_mb=item.mem_mb,
                    submit_s=now,
                    predicted_s=self._predict(tenant, item, now),
                    predicted_mem_mb=memory[j],
                )
                new.append(task)
                writes.append(
                    Write(
                        INSERT_TASK,
                        (
                            task.seq,
                            task.task_id,
                            tenant,
                            task.task_type,
                            task.document_ref,
                            task.doc_bytes,
                            task.pages,
                            task.mem_mb,
                            task.predicted_mem_mb,
                            now,
                            None if math.isnan(task.predicted_s) else task.predicted_s,
                            idempotency_key,
                            j if idempotency_key is not None else None,
                            digest,
                            TaskState.QUEUED.value,
                        ),
                    )
                )
            pending = self.writer.add(writes)
            self.next_seq += len(new)
            for task in new:
                i = self.tasks.append(task.task_id, tenant, now, math.nan, task.predicted_s)
                self.live[i] = task
                self.position[task.task_id] = i
                self._enqueue(i, now)
            self.counters.submitted += len(new)
            ids = [t.task_id for t in new]
            if idempotency_key is not None:
                key = (tenant, idempotency_key)
                self._pending_keys[key] = (ids, digest or "", pending)
                pending.add_done_callback(lambda _: self._pending_keys.pop(key, None))
            return ids, True, pending

    def _predict(self, tenant: str, item: NewTask, now: float) -> float:
        if self.predictor is None:
            return math.nan
        features = {
            "tenant": tenant,
            "task_type": item.task_type,
            "doc_bytes": item.doc_bytes,
            "pages": item.pages,
            "submit_s": now,
        }
        predicted = float(self.predictor.predict_one(features))
        return predicted if math.isfinite(predicted) and predicted > 0 else math.nan

    def _predict_memory(self, tenant: str, items: Sequence[NewTask]) -> list[float | None]:
        """``predicted_mem_mb`` of each item: the larger of its ``mem_mb`` hint and the memory
        model's prediction; None when there is neither."""
        model: list[float | None] = [None] * len(items)
        if self.memory_model is not None:
            rows = [
                {
                    "tenant": tenant,
                    "task_type": t.task_type,
                    "doc_bytes": t.doc_bytes,
                    "pages": t.pages,
                }
                for t in items
            ]
            try:
                model = [
                    v if math.isfinite(v) and v >= 0 else None
                    for v in self.memory_model.predict_mb(rows)
                ]
            except Exception:  # a broken model must not refuse submits: fall back to hints
                logger.exception("memory model failed; using the mem_mb hints")
        out: list[float | None] = []
        for item, predicted in zip(items, model):
            known = [v for v in (item.mem_mb, predicted) if v is not None]
            out.append(max(known) if known else None)
        return out

    def task_view(self, tenant: str, task_id: str) -> dict[str, Any]:
        """The stored record of ``task_id`` if ``tenant`` owns it, else ``NotFound``."""
        with self.read_lock:
            view = self.store.task_view(task_id)
        if view is None or view["tenant"] != tenant:
            raise NotFound(f"no task {task_id!r} for this tenant")
        return view

    # Workers ---------------------------------------------------------------------------------

    def poll(
        self, worker: str, worker_id: str, free_mem_mb: float | None = None
    ) -> tuple[Grant | None, Pending | None]:
        """The policy's winner among the tasks that fit in ``free_mem_mb`` (all of them when
        it is None), leased to ``worker``, with the commit of the lease to await;
        ``(None, None)`` when no queued task fits (module docstring, memory-aware dispatch).
        """
        with self.lock:
            t0 = time.perf_counter()
            now = self.clock()
            self._expire(now)
            if not self.queued:
                return None, None
            policy = self.policy
            queue_len = len(self.queued)
            found = self._pop_fitting(now, free_mem_mb)
            if found is None:
                return None, None
            i, skipped = found
            task = self.live[i]
            lease_id = secrets.token_urlsafe(16)
            expires = now + self.lease_s
            attempt = task.attempts + 1
            pending = self.writer.add(
                [
                    update_write(
                        task.seq,
                        {"state": TaskState.QUEUED.value},
                        {
                            "state": TaskState.LEASED.value,
                            "attempts": attempt,
                            "worker": worker,
                            "worker_id": worker_id,
                            "lease_id": lease_id,
                            "lease_expires_at": expires,
                            "start_s": now,
                        },
                    )
                ]
            )
            tenant_backlog = self.backlog[task.tenant]
            self.queued.discard(i)
            self.backlog[task.tenant] -= 1
            task.attempts, task.worker, task.worker_id = attempt, worker, worker_id
            task.lease_id, task.lease_expires_at, task.start_s = lease_id, expires, now
            self.leases[i] = task
            heapq.heappush(self.expiry, (expires, i, lease_id))
            self.counters.decisions += 1
            if self.log is not None:
                record = {
                    **worker_columns(worker, worker_id),
                    "task_id": task.task_id,
                    "tenant": task.tenant,
                    "policy": policy.name,
                    "score": policy.score,
                    "queue_len": queue_len,
                    "tenant_backlog": tenant_backlog,
                    "wait_s": now - task.submit_s,
                    "free_mem_mb": free_mem_mb,
                    "predicted_mem_mb": task.predicted_mem_mb,
                    "skipped_unfit": skipped,
                }
                record.update(zip(policy.components, policy.parts))
                self._log_after(pending, "decision", now, record)
            self.counters.observe_latency(time.perf_counter() - t0)
            return Grant(task, lease_id, expires, attempt), pending

    def _pop_fitting(self, now: float, free_mem_mb: float | None) -> tuple[int, int] | None:
        """The policy's first candidate that fits in ``free_mem_mb`` (``Policy.pop_fitting``):
        ``(position, skipped)``, or None when none of the first ``max_fit_skips`` candidates
        fits. Called under the lock, queue not empty.
        """
        if free_mem_mb is None:
            return self.policy.pop(now), 0
        live = self.live

        def fits(i: int) -> bool:
            need = live[i].predicted_mem_mb
            return need is None or need <= free_mem_mb

        chosen, skipped = self.policy.pop_fitting(now, fits, self.max_fit_skips)
        self.counters.unfit_skips += skipped
        if chosen is None:
            self.counters.unfit_polls += 1
            return None
        return chosen, skipped

    def _leased(self, worker: str, task_id: str, lease_id: str, now: float) -> tuple[int, LiveTask]:
        """The leased task ``task_id`` if ``worker`` holds its current lease ``lease_id``."""
        self._expire(now)
        i = self.position.get(task_id)
        task = self.live.get(i) if i is not None else None
        if task is None or task.lease_id is None:
            # Memory first: the database lags it by the writes not yet committed.
            if task is not None:
                state: str | None = TaskState.QUEUED.value
            elif (state := self.ending.get(task_id)) is None:
                with self.read_lock:
                    state = self.store.task_state(task_id)
            if state is None:
                raise NotFound(f"no task {task_id!r}")
            raise Conflict(f"task {task_id!r} has no current lease (state {state})")
        assert i is not None
        if task.worker != worker:
            raise Forbidden(f"task {task_id!r} is leased to another worker")
        if task.lease_id != lease_id:
            raise Conflict(f"lease of task {task_id!r} is stale (expired and re-leased)")
        return i, task

    def heartbeat(self, worker: str, task_id: str, lease_id: str) -> tuple[float, Pending]:
        """Extend the lease by ``lease_s`` from now: the new expiry time, and its commit."""
        with self.lock:
            now = self.clock()
            i, task = self._leased(worker, task_id, lease_id, now)
            expires = now + self.lease_s
            pending = self.writer.add(
                [update_write(task.seq, {"lease_id": lease_id}, {"lease_expires_at": expires})]
            )
            task.lease_expires_at = expires
            heapq.heappush(self.expiry, (expires, i, lease_id))
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
            pending = self.writer.add(
                [
                    update_write(
                        task.seq,
                        {"state": TaskState.LEASED.value, "lease_id": lease_id},
                        {
                            "state": TaskState.DONE.value,
                            "end_s": now,
                            "duration_s": duration_s,
                            "peak_mem_mb": peak_mem_mb,
                            "result_ref": result_ref,
                            "lease_expires_at": None,
                        },
                    )
                ]
            )
            self._forget(i, task, TaskState.DONE, pending)
            self.counters.completed += 1
            self.policy.complete(i, now, duration_s)
            if self.predictor is not None:
                self.predictor.observe_completion(task.tenant, task.task_type, duration_s)
            self._log_completion(
                pending, now, task, worker, task.worker_id, "ok", duration_s, peak_mem_mb
            )
            return pending

    def fail(
        self, worker: str, task_id: str, lease_id: str, error: str, retryable: bool = True
    ) -> tuple[TaskState, Pending]:
        """The attempt failed: requeue the task, or dead-letter it once it has used
        ``max_retries`` retries (or at once when not ``retryable``). Returns its new state."""
        with self.lock:
            now = self.clock()
            i, task = self._leased(worker, task_id, lease_id, now)
            held_by, slot, ran_s = task.worker, task.worker_id, now - task.start_s
            state, pending = self._end_attempt(i, task, now, error, retryable, lease_id)
            self.counters.failed += 1
            if state is TaskState.DEAD:
                self._log_completion(pending, now, task, held_by, slot, "failed", ran_s, None)
            return state, pending

    def _end_attempt(
        self, i: int, task: LiveTask, now: float, error: str, retryable: bool, lease_id: str
    ) -> tuple[TaskState, Pending]:
        dead = not retryable or task.attempts > self.max_retries
        state = TaskState.DEAD if dead else TaskState.QUEUED
        values: dict[str, Any] = {"state": state.value, "error": error, "lease_expires_at": None}
        if dead:
            values["end_s"] = now
        else:
            values.update(lease_id=None, worker=None, worker_id=None)
        pending = self.writer.add(
            [
                update_write(
                    task.seq, {"state": TaskState.LEASED.value, "lease_id": lease_id}, values
                )
            ]
        )
        if dead:
            self._forget(i, task, TaskState.DEAD, pending)
            self.counters.dead_lettered += 1
        else:
            del self.leases[i]
            task.lease_id, task.worker, task.worker_id = None, None, None
            task.lease_expires_at = math.nan
            self._enqueue(i, now)
        return state, pending

    def _enqueue(self, i: int, now: float) -> None:
        tenant = self.live[i].tenant
        self.queued.add(i)
        self.backlog[tenant] = self.backlog.get(tenant, 0) + 1
        self.policy.push(i, now)

    def _forget(self, i: int, task: LiveTask, state: TaskState, pending: Pending) -> None:
        """Task ``i`` ended in ``state``; until ``pending`` (its write) commits, ``ending``
        remembers the state the database does not show yet."""
        self.leases.pop(i, None)
        del self.live[i]
        del self.position[task.task_id]
        self.ending[task.task_id] = state.value
        pending.add_done_callback(lambda _: self.ending.pop(task.task_id, None))

    def _expire(self, now: float) -> int:
        """Requeue (or dead-letter) every task whose lease ended before ``now``."""
        n = 0
        heap = self.expiry
        while heap and heap[0][0] < now:
            expires, i, lease_id = heapq.heappop(heap)
            task = self.leases.get(i)
            if task is None or task.lease_id != lease_id or task.lease_expires_at != expires:
                continue  # superseded by a heartbeat, or the lease already ended
            held_by, slot, ran_s = task.worker, task.worker_id, now - task.start_s
            state, pending = self._end_attempt(i, task, now, "lease expired", True, lease_id)
            self.counters.lease_expiries += 1
            if state is TaskState.DEAD:
                self._log_completion(pending, now, task, held_by, slot, "failed", ran_s, None)
            n += 1
        return n

    def flush(self, timeout: float | None = 30.0) -> None:
        """Block until every write queued so far is committed."""
        wait(self.writer.add([]), timeout)

    def sweep(self) -> int:
        """Expire due leases (the housekeeper calls this periodically); how many expired.
        After a failed rebuild (the database was down) it retries the rebuild first."""
        with self.lock:
            if self._stale:
                name, params, config = self._policy_spec
                self._rebuild(name, params, config)
            return self._expire(self.clock())

    def _log_after(self, pending: Pending, kind: str, t: float, record: dict[str, Any]) -> None:
        """Append ``record`` to the decision log once ``pending`` commits (never if it fails)."""
        log = self.log
        if log is not None:
            pending.add_done_callback(
                lambda done: log.write(kind, t, record) if done.exception() is None else None
            )

    def _log_completion(
        self,
        pending: Pending,
        now: float,
        task: LiveTask,
        worker: str | None,
        worker_id: str | None,
        status: str,
        duration_s: float,
        peak: float | None,
    ) -> None:
        self._log_after(
            pending,
            "completion",
            now,
            {
                **worker_columns(worker or "", worker_id or ""),
                "task_id": task.task_id,
                "tenant": task.tenant,
                "task_type": task.task_type,
                "submit_s": task.submit_s,
                "start_s": task.start_s,
                "duration_s": duration_s,
                "status": status,
                "peak_mem_mb": peak,
                "doc_bytes": task.doc_bytes,
                "pages": task.pages,
                "predicted_s": task.predicted_s,
                "predicted_mem_mb": task.predicted_mem_mb,
            },
        )

    # Observability ---------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        with self.lock:
            return {
                "status": "degraded" if self._stale else "ok",
                "policy": self.policy.name,
                "params": self.policy.params.model_dump(),
                "queued": len(self.queued),
                "leased": len(self.leases),
                "predictor": self.predictor is not None,
                "policy_error": self.policy_error,
            }

    def metrics(self) -> str:
        """Prometheus text exposition (version 0.0.4)."""
        with self.lock:  # one snapshot: the histogram's sum and count must agree
            c = replace(self.counters)
            backlog = sorted(self.backlog.items())
            leased = len(self.leases)
            buckets = list(c.latency_buckets)
            policy = self.policy.name
        lines = [
            "# HELP desched_queue_length Tasks queued (not leased), per tenant.",
            "# TYPE desched_queue_length gauge",
        ]
        lines += [f'desched_queue_length{{tenant="{_label(k)}"}} {n}' for k, n in backlog]
        scalar = [
            ("desched_leased_tasks", "gauge", "Tasks leased to workers now.", leased),
            ("desched_tasks_submitted_total", "counter", "Tasks accepted.", c.submitted),
            ("desched_decisions_total", "counter", "Polls answered with a task.", c.decisions),
            ("desched_tasks_completed_total", "counter", "Tasks completed.", c.completed),
            ("desched_task_failures_total", "counter", "Failed attempts reported.", c.failed),
            (
                "desched_tasks_dead_lettered_total",
                "counter",
                "Tasks dead-lettered.",
                c.dead_lettered,
            ),
            ("desched_lease_expiries_total", "counter", "Leases that expired.", c.lease_expiries),
            (
                "desched_policy_switches_total",
                "counter",
                "Live policy switches.",
                c.policy_switches,
            ),
            (
                "desched_policy_state_restores_total",
                "counter",
                "Starts and rebuilds that took back the policy state saved by an earlier run.",
                c.policy_state_restores,
            ),
            (
                "desched_unfit_skips_total",
                "counter",
                "Candidates skipped because they did not fit the poll's free memory.",
                c.unfit_skips,
            ),
            (
                "desched_unfit_polls_total",
                "counter",
                "Polls left without a task because none of the candidates fit.",
                c.unfit_polls,
            ),
        ]
        for name, kind, text, value in scalar:
            lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}", f"{name} {value}"]
        lines += [
            "# HELP desched_policy_info The live policy.",
            "# TYPE desched_policy_info gauge",
            f'desched_policy_info{{policy="{_label(policy)}"}} 1',
            "# HELP desched_decision_latency_seconds Time to decide a lease and queue its write.",
            "# TYPE desched_decision_latency_seconds histogram",
        ]
        total = 0
        for bound, n in zip((*LATENCY_BUCKETS_S, math.inf), buckets):
            total += n
            le = "+Inf" if math.isinf(bound) else repr(bound)
            lines.append(f'desched_decision_latency_seconds_bucket{{le="{le}"}} {total}')
        lines.append(f"desched_decision_latency_seconds_sum {c.latency_sum_s!r}")
        lines.append(f"desched_decision_latency_seconds_count {total}")
        return "\n".join(lines) + "\n"


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
