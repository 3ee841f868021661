"""The live service against a model: a Hypothesis state machine (``RuleBasedStateMachine``).

Rules drive the service over HTTP as tenants and workers do: submits (one task or a list,
with or without an Idempotency-Key, replays of a key with the same or other content),
polls, heartbeats, completions and failures (with the right, a stale or another worker's
lease), cancels, lease expiry, tenant controls (caps, rate limits), idle gaps longer than
the writer's idle period (``DESCHED_STANDBY_POLL_S``: the lost wake-up of issue 18 lived
there), clean restarts and SIGKILL restarts. The model says what each answer must be; after
every step the database, ``/metrics`` (queued per tenant, leased, running per tenant) and
``/healthz`` must agree with it, and every completion is recorded once in the decision log.

Two drivers run the same machine:

- ``InProcess`` (the fast suite): the FastAPI app in this process (``TestClient``, lifespan
  and all: writer thread, housekeeper, hot path) over a SQLite file, with an injected clock
  that moves only when a rule moves it, so lease expiry is exact. A restart is clean (the
  lifespan's shutdown); a SIGKILL needs a process.
- ``Subprocess`` (slow, e2e): ``desched serve`` as a real process (``tests.test_service``'s
  ``Service``) on the wall clock, with short leases; a lease near its expiry is waited out
  before the next step (``settle``) so the model is never ambiguous; clean restarts are
  SIGTERM, crashes SIGKILL.

The rate limits are modelled loosely (their bucket refills on the service's clock): a
tenant without a rate limit is always admitted, a submit larger than the bucket is always
refused, and otherwise either answer is accepted, the model following the answer; in every
case a 2xx must have stored exactly the tasks it names and a refusal none.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx
import pytest
from hypothesis import HealthCheck, Phase, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from desched.controls import TenantControl
from desched.service.store import Store
from tests.test_service import Service, Tokens, add_principals, auth

TENANTS = ("tenant-a", "tenant-b")
WORKERS = ("worker-1", "worker-2")
MAX_RETRIES = 2
IDLE_S = 0.002
"""The writer's idle period (``standby_poll_s``) in both drivers: an idle gap passes it."""
REQUEST_TIMEOUT_S = 20.0
"""A request unanswered this long fails the test (a hung request is a bug, issue 18)."""
LIVE = ("queued", "leased")


@dataclass
class MTask:
    """The model's view of one task."""

    tenant: str
    priority: int
    state: str = "queued"
    attempts: int = 0
    worker: str | None = None
    lease_id: str | None = None
    expires_at: float = math.nan
    old_leases: list[str] = field(default_factory=list)


class Driver(Protocol):
    """How the machine reaches one service: its HTTP client, clock and lifecycle."""

    client: httpx.Client
    db: str
    log_dir: Path
    tokens: Tokens
    lease_s: float
    can_kill: bool
    time_scale: float

    def now(self) -> float: ...
    def settle(self, machine: ServiceMachine) -> None: ...
    def expire_all(self, machine: ServiceMachine) -> None: ...
    def pass_time(self, seconds: float) -> None: ...
    def restart(self, kill: bool) -> None: ...
    def close(self) -> None: ...


def wait_controls_applied(db: str, epoch: int) -> None:
    """Block until the running service acknowledges the controls epoch ``epoch``."""
    store = Store(db)
    try:
        deadline = time.monotonic() + REQUEST_TIMEOUT_S
        while store.controls_epoch_seen() < epoch:
            assert time.monotonic() < deadline, "the service never applied the controls"
            time.sleep(0.01)
    finally:
        store.close()


def after_first_sweep(sched: Any) -> None:
    """Wait for the housekeeper's first sweep (it reads the token epoch and drops the token
    cache), so that tokens used after it stay cached, as in any running fleet."""
    deadline = time.monotonic() + 10
    while sched.tokens.epoch < 0:
        assert time.monotonic() < deadline, "the housekeeper never read the token epoch"
        time.sleep(0.01)


class InProcess:
    """The app in this process over SQLite, on a clock that moves only when told."""

    can_kill = False
    time_scale = 1.0

    def __init__(self, tmp: Path, lease_s: float = 10.0) -> None:
        folder = tmp / f"s{uuid.uuid4().hex[:8]}"
        self.db, self.log_dir = str(folder / "desched.db"), folder / "logs"
        self.tokens = add_principals(self.db)
        self.lease_s = lease_s
        self.t = time.time()
        self._start()

    def now(self) -> float:
        return self.t

    def _start(self) -> None:
        from fastapi.testclient import TestClient

        from desched.service.app import create_app
        from desched.service.clock import Clock
        from desched.service.decision_log import DecisionLog
        from desched.service.scheduler import Scheduler
        from desched.service.settings import ServiceSettings

        config = ServiceSettings(
            db=self.db,
            log_dir=self.log_dir,
            lease_s=self.lease_s,
            max_retries=MAX_RETRIES,
            sweep_s=0.05,
            standby_poll_s=IDLE_S,
            predictor_registry=None,
        )
        self.scheduler = Scheduler(
            Store(self.db),
            write_store=Store(self.db),
            lease_s=self.lease_s,
            max_retries=MAX_RETRIES,
            clock=Clock(source=self.now),
            log=DecisionLog(self.log_dir),
            standby_poll_s=IDLE_S,
        )
        self.testclient = TestClient(create_app(config, self.scheduler), base_url="http://svc")
        self.testclient.__enter__()  # runs the lifespan: the scheduler starts
        self.client: httpx.Client = self.testclient

    def settle(self, machine: ServiceMachine) -> None:
        """Time stands still between rules: nothing to wait for."""

    def pass_time(self, seconds: float) -> None:
        """Move the service's clock; due leases expire now (a sweep), as they would within
        one ``sweep_s`` of the housekeeper."""
        self.t += seconds
        self.scheduler.sweep()
        self.scheduler.flush(timeout=REQUEST_TIMEOUT_S)

    def expire_all(self, machine: ServiceMachine) -> None:
        self.pass_time(self.lease_s + 0.5)

    def restart(self, kill: bool) -> None:
        assert not kill, "a SIGKILL needs a process"
        self.close()
        self._start()

    def close(self) -> None:
        self.testclient.__exit__(None, None, None)  # the lifespan's shutdown: a clean stop


class Subprocess:
    """``desched serve`` as a process on the wall clock, with short leases."""

    can_kill = True
    time_scale = 0.1
    """``time_passes`` sleeps a tenth of the time it draws (the wall clock is slow to pass)."""
    MARGIN_S = 0.8
    """A lease closer than this to its expiry is waited out before the next step."""
    GRACE_S = 0.4
    """After an expiry, time for the housekeeper (every 0.1 s) to requeue and commit."""

    def __init__(self, tmp: Path, lease_s: float = 2.5) -> None:
        folder = tmp / f"s{uuid.uuid4().hex[:8]}"
        self.db, self.log_dir = str(folder / "desched.db"), folder / "logs"
        self.tokens = add_principals(self.db)
        self.lease_s = lease_s
        env = {"DESCHED_STANDBY_POLL_S": str(IDLE_S)}
        self.service = Service(
            db=self.db, log_dir=self.log_dir, lease_s=lease_s, max_retries=MAX_RETRIES, env=env
        )
        self.service.start()
        self.client = httpx.Client(base_url=self.service.url, timeout=REQUEST_TIMEOUT_S)

    def now(self) -> float:
        return time.time()

    def settle(self, machine: ServiceMachine) -> None:
        """Wait out every lease that may expire during the next step, and let the model
        expire it."""
        while True:
            now = time.time()
            soon = [t.expires_at for t in machine.tasks.values() if t.state == "leased"
                    and t.expires_at < now + self.MARGIN_S]
            if not soon:
                return
            time.sleep(max(0.0, max(soon) - now) + self.GRACE_S)
            machine.expire_due(max(soon) + 1e-6)

    def expire_all(self, machine: ServiceMachine) -> None:
        due = [t.expires_at for t in machine.tasks.values() if t.state == "leased"]
        if due:
            time.sleep(max(0.0, max(due) - time.time()) + self.GRACE_S)

    def pass_time(self, seconds: float) -> None:
        time.sleep(seconds)

    def restart(self, kill: bool) -> None:
        self.client.close()
        if kill:
            self.service.kill()
        else:
            self.service.stop()
        self.service.start()
        self.client = httpx.Client(base_url=self.service.url, timeout=REQUEST_TIMEOUT_S)

    def close(self) -> None:
        self.client.close()
        self.service.stop()


# Choices among what the service handed out (tasks, leases, keys) are indices drawn before
# the rule runs, taken modulo the choices there are: what Hypothesis draws never depends on
# the service's answers, which vary from run to run (random ids, threads).
picks = st.integers(0, 2**16)
lease_picks = st.tuples(picks, picks, picks)
task_lists = st.lists(
    st.fixed_dictionaries(
        {"task_type": st.sampled_from(["extract", "embed"]), "priority": st.integers(0, 1)}
    ),
    min_size=1,
    max_size=4,
)


class ServiceMachine(RuleBasedStateMachine):
    """See the module docstring. ``make_driver`` is set by each test."""

    make_driver: Any = None

    def __init__(self) -> None:
        super().__init__()
        self.driver: Driver = self.make_driver()
        self.tasks: dict[str, MTask] = {}
        self.keys: dict[tuple[str, str], tuple[list[str], str]] = {}
        self.controls: dict[str, TenantControl] = {}
        self.completed: Counter[str] = Counter()
        self.restarts = 0

    # helpers ----------------------------------------------------------------------------

    def token(self, name: str) -> str:
        t = self.driver.tokens
        return {"tenant-a": t.tenant_a, "tenant-b": t.tenant_b, "worker-1": t.worker,
                "worker-2": t.worker2}[name]

    def post(self, path: str, who: str, body: Any, **headers: str) -> httpx.Response:
        r = self.driver.client.post(path, json=body, headers={**auth(self.token(who)),
                                                               **headers})
        event(f"{path.rsplit('/', 1)[-1]} {r.status_code}")  # --hypothesis-show-statistics
        return r

    def end_attempt(self, task: MTask, retryable: bool = True) -> str:
        """An attempt ended without success: the task's new state."""
        assert task.lease_id is not None
        task.old_leases.append(task.lease_id)
        task.worker, task.lease_id, task.expires_at = None, None, math.nan
        task.state = "dead" if not retryable or task.attempts > MAX_RETRIES else "queued"
        return task.state

    def expire_due(self, now: float) -> None:
        """Every lease whose expiry is before ``now`` has ended (the lease book's rule)."""
        for task in self.tasks.values():
            if task.state == "leased" and task.expires_at < now:
                self.end_attempt(task)

    def leased(self) -> list[str]:
        return sorted(k for k, t in self.tasks.items() if t.state == "leased")

    # rules ------------------------------------------------------------------------------

    @initialize()
    def start(self) -> None:
        """Work from the first step: a few tasks of each tenant, two of them leased."""
        self.check_all()
        for tenant, n in zip(TENANTS, (3, 2)):
            self.submit(tenant, [{"task_type": "extract", "priority": 0}] * n, False, None, 0)
        for worker in WORKERS:
            self.poll(worker)
        self.check_all()

    @rule(tenant=st.sampled_from(TENANTS), items=task_lists, single=st.booleans(),
          key=st.sampled_from([None, "new", "replay", "reuse"]), pick=picks)
    def submit(self, tenant: str, items: list[dict[str, Any]], single: bool, key: str | None,
               pick: int) -> None:
        self.driver.settle(self)
        mine = sorted(k for k in self.keys if k[0] == tenant)
        headers: dict[str, str] = {}
        replay_of: tuple[list[str], str] | None = None
        if key in ("replay", "reuse") and mine:
            chosen = mine[pick % len(mine)]
            headers["Idempotency-Key"] = chosen[1]
            replay_of = self.keys[chosen]
            if key == "replay":
                items = json.loads(replay_of[1])
        elif key is not None:
            headers["Idempotency-Key"] = f"k-{uuid.uuid4().hex[:10]}"
        body: Any = items[0] if single and len(items) == 1 else items
        content = json.dumps(items, sort_keys=True)
        r = self.post("/v1/tasks", tenant, body, **headers)
        if replay_of is not None:
            if content == replay_of[1]:
                assert r.status_code == 200, r.text
                assert r.json() == {"task_ids": replay_of[0], "created": False}
            else:
                assert r.status_code == 409, r.text
            return
        control = self.controls.get(tenant)
        if control is not None and control.rate is not None:
            bucket = control.burst if control.burst is not None else max(1.0, control.rate)
            if len(items) > bucket:
                assert r.status_code in (413, 422, 429), r.text  # can never pass
                return
            if r.status_code == 429:
                return
        assert r.status_code == 201, r.text
        ids = r.json()["task_ids"]
        assert len(ids) == len(items) and not set(ids) & set(self.tasks)
        for task_id, item in zip(ids, items):
            self.tasks[task_id] = MTask(tenant, item["priority"])
        if "Idempotency-Key" in headers:
            self.keys[(tenant, headers["Idempotency-Key"])] = (ids, content)

    @rule(worker=st.sampled_from(WORKERS))
    def poll(self, worker: str) -> None:
        self.driver.settle(self)
        running = Counter(t.tenant for t in self.tasks.values() if t.state == "leased")

        def under_cap(tenant: str) -> bool:
            cap = self.controls.get(tenant, TenantControl()).cap
            return cap is None or running[tenant] < cap

        eligible = {k for k, t in self.tasks.items() if t.state == "queued" and
                    under_cap(t.tenant)}
        r = self.post("/v1/poll", worker, {"worker_id": f"{worker}-slot"})
        if not eligible:
            assert r.status_code == 204, r.text
            return
        assert r.status_code == 200, r.text
        lease = r.json()
        task = self.tasks[lease["task_id"]]
        assert lease["task_id"] in eligible
        top = max(t.priority for t in self.tasks.values()
                  if t.tenant == task.tenant and t.state == "queued")
        assert task.priority == top, "a lower priority ran before the tenant's higher one"
        task.attempts += 1
        assert lease["attempt"] == task.attempts and lease["tenant"] == task.tenant
        task.state, task.worker, task.lease_id = "leased", worker, lease["lease_id"]
        task.expires_at = lease["lease_expires_at"]

    def lease_answer(self, task_id: str, who: str, lease_id: str) -> int | None:
        """The refusal a lease request must get, or None when it is the current lease."""
        task = self.tasks[task_id]
        if task.state == "cancelled":
            return 410
        if task.state != "leased":
            return 409
        if task.worker != who:
            return 403
        return None if lease_id == task.lease_id else 409

    def pick_lease(self, pick: tuple[int, int, int]) -> tuple[str, str, str] | None:
        """A task some lease of which was handed out, who asks, and which lease id: mostly
        a task leased now and its current lease, sometimes an ended task or a stale lease."""
        leased = self.leased()
        if not leased and pick[0] % 4:
            self.poll(WORKERS[pick[2] % 2])  # a worker with nothing to report polls first
            leased = self.leased()
        tried = sorted(k for k, t in self.tasks.items() if t.lease_id or t.old_leases)
        if not tried:
            return None
        among = leased if leased and pick[0] % 4 else tried
        task_id = among[(pick[0] // 4) % len(among)]
        task = self.tasks[task_id]
        if task.lease_id is not None and (pick[1] % 4 or not task.old_leases):
            lease_id = task.lease_id
        else:
            lease_id = task.old_leases[(pick[1] // 4) % len(task.old_leases)]
        worker = task.worker or "worker-1"
        other = "worker-2" if worker == "worker-1" else "worker-1"
        who = (worker, worker, other)[pick[2] % 3]
        return task_id, who, lease_id

    @rule(pick=lease_picks)
    def heartbeat(self, pick: tuple[int, int, int]) -> None:
        self.driver.settle(self)
        picked = self.pick_lease(pick)
        if picked is None:
            return
        task_id, who, lease_id = picked
        want = self.lease_answer(task_id, who, lease_id)
        before = self.driver.now()
        r = self.post(f"/v1/tasks/{task_id}/heartbeat", who, {"lease_id": lease_id})
        if want is not None:
            assert r.status_code == want, r.text
            return
        assert r.status_code == 200, r.text
        expires = r.json()["lease_expires_at"]
        task = self.tasks[task_id]
        assert expires >= max(task.expires_at, before + self.driver.lease_s)
        task.expires_at = expires

    @rule(pick=lease_picks, ok=st.booleans(), retryable=st.booleans())
    def finish(self, pick: tuple[int, int, int], ok: bool, retryable: bool) -> None:
        """A worker completes (``ok``) or fails its task."""
        self.driver.settle(self)
        picked = self.pick_lease(pick)
        if picked is None:
            return
        task_id, who, lease_id = picked
        want = self.lease_answer(task_id, who, lease_id)
        if ok:
            r = self.post(f"/v1/tasks/{task_id}/complete", who,
                          {"lease_id": lease_id, "duration_s": 0.5})
        else:
            r = self.post(f"/v1/tasks/{task_id}/fail", who,
                          {"lease_id": lease_id, "error": "boom", "retryable": retryable})
        if want is not None:
            assert r.status_code == want, r.text
            return
        task = self.tasks[task_id]
        if ok:
            assert r.status_code == 204, r.text
            assert task.lease_id is not None
            task.old_leases.append(task.lease_id)
            task.state, task.worker, task.lease_id = "done", None, None
            self.completed[task_id] += 1
        else:
            assert r.status_code == 200, r.text
            assert r.json() == {"state": self.end_attempt(task, retryable)}

    @rule(tenant=st.sampled_from(TENANTS), pick=picks)
    def cancel(self, tenant: str, pick: int) -> None:
        self.driver.settle(self)
        if not self.tasks:
            return
        ordered = sorted(self.tasks)
        task_id = ordered[pick % len(ordered)]
        task = self.tasks[task_id]
        r = self.driver.client.post(f"/v1/tasks/{task_id}/cancel",
                                    headers=auth(self.token(tenant)))
        if task.tenant != tenant:
            assert r.status_code == 404, r.text
        elif task.state in ("done", "dead"):
            assert r.status_code == 409, r.text
        else:
            assert r.status_code == 200, r.text
            assert r.json() == {"task_id": task_id, "state": "cancelled", "was": task.state}
            if task.lease_id is not None:
                task.old_leases.append(task.lease_id)
            task.state, task.worker, task.lease_id = "cancelled", None, None

    @rule()
    def leases_expire(self) -> None:
        """Time passes every lease's expiry without a heartbeat."""
        self.driver.expire_all(self)
        self.expire_due(self.driver.now())

    @rule(seconds=st.floats(0.0, 3.0), idle=st.booleans())
    def time_passes(self, seconds: float, idle: bool) -> None:
        """Time passes on the service's clock (leases may expire), or, ``idle``, nothing
        happens for longer than the writer's idle period (real time, both drivers)."""
        if idle:
            time.sleep(IDLE_S * (1.5 + seconds * 4))
            return
        self.driver.settle(self)
        self.driver.pass_time(seconds * self.driver.time_scale)
        self.driver.settle(self)
        self.expire_due(self.driver.now())

    @rule(tenant=st.sampled_from(TENANTS), cap=st.sampled_from([None, 1, 2]),
          rate=st.sampled_from([None, 0.5, 50.0]), burst=st.sampled_from([None, 2.0, 6.0]))
    def set_controls(self, tenant: str, cap: int | None, rate: float | None,
                     burst: float | None) -> None:
        control = TenantControl(cap=cap, rate=rate, burst=burst if rate is not None else None)
        store = Store(self.driver.db)
        try:
            epoch = store.set_tenant_control(tenant, control)
        finally:
            store.close()
        wait_controls_applied(self.driver.db, epoch)
        self.controls[tenant] = control

    @rule(kill=st.booleans())
    def restart(self, kill: bool) -> None:
        """A clean restart (SIGTERM), or a SIGKILL and a start where the driver has a
        process to kill."""
        self.driver.settle(self)
        self.driver.restart(kill=kill and self.driver.can_kill)
        self.restarts += 1

    # checks -----------------------------------------------------------------------------

    @invariant()
    def service_and_database_agree_with_the_model(self) -> None:
        self.driver.settle(self)
        self.check_all()

    def check_all(self) -> None:
        store = Store(self.driver.db)
        try:
            rows = store.execute(
                "SELECT task_id, tenant, state, attempts, worker, lease_id FROM tasks"
            ).fetchall()
        finally:
            store.close()
        stored = {r[0]: (r[1], r[2], r[3], r[4] if r[2] == "leased" else None,
                         r[5] if r[2] == "leased" else None) for r in rows}
        model = {k: (t.tenant, t.state, t.attempts, t.worker, t.lease_id)
                 for k, t in self.tasks.items()}
        assert stored == model
        metrics = parse_metrics(self.driver.client.get("/metrics").text)
        for tenant in TENANTS:
            queued = sum(t.tenant == tenant and t.state == "queued" for t in self.tasks.values())
            running = sum(t.tenant == tenant and t.state == "leased" for t in self.tasks.values())
            assert metrics.get(f'desched_queue_length{{tenant="{tenant}"}}', 0) == queued
            assert metrics.get(f'desched_tenant_running{{tenant="{tenant}"}}', 0) == running
        leased = len(self.leased())
        assert metrics["desched_leased_tasks"] == leased
        health = self.driver.client.get("/healthz").json()
        queued_all = sum(t.state == "queued" for t in self.tasks.values())
        assert (health["queued"], health["leased"], health["role"]) == (queued_all, leased,
                                                                       "active")

    def teardown(self) -> None:
        try:
            if self.tasks:
                self.driver.settle(self)
                self.check_all()
        finally:
            self.driver.close()
        ok: Counter[str] = Counter()
        for path in self.driver.log_dir.glob("*.jsonl"):
            for line in path.read_text().splitlines():
                rec = json.loads(line)
                if rec["kind"] == "completion" and rec["status"] == "ok":
                    ok[rec["task_id"]] += 1
        assert ok == self.completed, "the decision log disagrees with the completions"


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text: ``name{labels}`` -> value, comments left out."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def run_machine(make_driver: Any, examples: int, steps: int) -> None:
    machine = type("Machine", (ServiceMachine,), {"make_driver": staticmethod(make_driver)})
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            # No shrinking: a service's answers depend on threads and time, so a replay of a
            # failing example need not fail alike; the first failure is the report.
            phases=(Phase.explicit, Phase.reuse, Phase.generate),
            suppress_health_check=list(HealthCheck),
        ),
    )


def test_the_service_in_process_agrees_with_the_model_after_every_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A write that never commits fails the test in seconds, not after the 30 s default.
    monkeypatch.setattr("desched.service.answers.COMMIT_TIMEOUT_S", 5.0)
    run_machine(lambda: InProcess(tmp_path), examples=6, steps=40)


@pytest.mark.slow
def test_the_service_in_process_agrees_with_the_model_over_many_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("desched.service.answers.COMMIT_TIMEOUT_S", 5.0)
    run_machine(lambda: InProcess(tmp_path), examples=20, steps=60)


@pytest.mark.slow
@pytest.mark.e2e
def test_the_service_process_agrees_with_the_model_through_restarts_and_kills(
    tmp_path: Path,
) -> None:
    run_machine(lambda: Subprocess(tmp_path), examples=3, steps=50)
