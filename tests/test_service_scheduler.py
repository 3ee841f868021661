"""The live scheduler in-process, on SQLite, with an injected clock (no HTTP, no wall time)."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from desched.errors import DeschedError
from desched.service.clock import Clock
from desched.service.decision_log import DecisionLog
from desched.service.errors import Conflict, Forbidden, StaleWrite
from desched.service.records import NewTask
from desched.service.scheduler import Scheduler
from desched.service.store import Store
from desched.service.writer import wait


class FakeTime:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class FixedPredictor:
    """Predicts 2 s per page; records the completions it is told about."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, float]] = []

    def predict_one(self, task: dict[str, Any]) -> float:
        return 2.0 * float(task.get("pages") or 1)

    labels = ("predicted_s", "predicted_p50_s", "predicted_p90_s")

    def predict_labels(self, task: dict[str, Any]) -> tuple[float, float, float]:
        mean = self.predict_one(task)
        return mean, 0.5 * mean, 3.0 * mean

    def observe_completion(self, tenant: str, task_type: str, duration_s: float) -> None:
        self.seen.append((tenant, task_type, duration_s))


def make_scheduler(
    db: Path, now: FakeTime, *, predictor: Any = None, policy: str | None = None, **kw: Any
) -> Scheduler:
    sched = Scheduler(
        Store(str(db)),
        lease_s=10.0,
        max_retries=1,
        clock=Clock(source=now),
        log=DecisionLog(db.parent / "logs"),
        predictor=predictor,
        policy=policy,
        **kw,
    )
    sched.start()
    return sched


@pytest.fixture
def now() -> FakeTime:
    return FakeTime()


@pytest.fixture
def sched(tmp_path: Path, now: FakeTime) -> Iterator[Scheduler]:
    s = make_scheduler(tmp_path / "state.db", now)
    yield s
    s.stop()


def submit(sched: Scheduler, tenant: str, n: int = 1, **kw: Any) -> list[str]:
    ids, _, pending = sched.submit(tenant, [NewTask("extract") for _ in range(n)], **kw)
    wait(pending)
    return ids


def poll(sched: Scheduler, worker: str = "w") -> Any:
    grant, pending = sched.poll(worker, "slot")
    wait(pending)
    return grant


def assert_a_restart_resumes(first: Scheduler, db: Path, now: FakeTime, policy: str,
                             later_s: float = 0.0) -> None:
    """Stop ``first`` (a scheduler on ``db`` running ``policy`` with a ``FixedPredictor``)
    and start another on the same database: it takes back the policy's saved state, and its
    next poll, ``later_s`` on, is the one the uninterrupted policy would make."""
    running = first.policy
    saved = running.state()
    uninterrupted = copy.deepcopy(running, {id(running.tasks): running.tasks})
    now.t += later_s
    expected = first.tasks.task_id[uninterrupted.pop(now.t)]
    first.stop()
    second = make_scheduler(db, now, predictor=FixedPredictor(), policy=policy)
    try:
        assert second.counters.policy_state_restores == 1
        assert second.policy.state() == saved
        assert poll(second, "w").task.task_id == expected
    finally:
        second.stop()


def test_a_lease_expires_exactly_after_lease_s_on_the_injected_clock(
    sched: Scheduler, now: FakeTime
) -> None:
    (task_id,) = submit(sched, "a")
    grant = poll(sched)
    assert grant.task.task_id == task_id and grant.lease_expires_at == now.t + 10.0
    now.t += 10.0
    assert sched.sweep() == 0  # at the expiry instant the lease still holds
    now.t += 0.001
    assert sched.sweep() == 1
    again = poll(sched, "other")
    assert again.task.task_id == task_id and again.attempt == 2
    with pytest.raises(Forbidden):
        sched.complete("w", task_id, grant.lease_id, 1.0)
    with pytest.raises(Conflict):
        sched.complete("other", task_id, grant.lease_id, 1.0)
    wait(sched.complete("other", task_id, again.lease_id, 1.0))
    assert sched.counters.lease_expiries == 1


def test_a_heartbeat_keeps_a_lease_alive(sched: Scheduler, now: FakeTime) -> None:
    (task_id,) = submit(sched, "a")
    grant = poll(sched)
    for _ in range(5):
        now.t += 9.0
        expires, pending = sched.heartbeat("w", task_id, grant.lease_id)
        wait(pending)
        assert expires == now.t + 10.0
        assert sched.sweep() == 0


def test_an_expired_task_over_its_retry_limit_is_dead_lettered(
    sched: Scheduler, now: FakeTime
) -> None:
    (task_id,) = submit(sched, "a")
    for _ in range(2):  # max_retries = 1: two attempts
        poll(sched)
        now.t += 11.0
        sched.sweep()
    assert poll(sched) is None
    sched.flush()
    assert sched.task_view("a", task_id).state == "dead"


def test_memory_is_rebuilt_from_the_database_at_start(tmp_path: Path, now: FakeTime) -> None:
    db = tmp_path / "state.db"
    first = make_scheduler(db, now)
    queued = submit(first, "a", 3) + submit(first, "b", 2)
    leased = poll(first)
    done = poll(first)
    wait(first.complete("w", done.task.task_id, done.lease_id, 2.0))
    first.stop()

    second = make_scheduler(db, now)
    try:
        assert len(second.queued) == 3 and set(second.leases) and len(second.leases) == 1
        (kept,) = second.leases.values()
        assert kept.task_id == leased.task.task_id and kept.lease_id == leased.lease_id
        wait(second.complete("w", leased.task.task_id, leased.lease_id, 1.0))
        got = set()
        while (g := poll(second)) is not None:
            got.add(g.task.task_id)
        assert got == set(queued) - {leased.task.task_id, done.task.task_id}
    finally:
        second.stop()


def test_a_write_that_the_database_refuses_fails_its_callers_and_memory_is_rebuilt(
    sched: Scheduler, tmp_path: Path
) -> None:
    a, b = submit(sched, "a", 2)
    other = Store(str(tmp_path / "state.db"))
    other.execute("UPDATE tasks SET state = 'dead' WHERE task_id = ?", (a,))
    other.close()
    grant, pending = sched.poll("w", "slot")
    assert grant is not None and grant.task.task_id == a
    with pytest.raises(StaleWrite):
        wait(pending)
    assert set(sched.position) == {b} and len(sched.queued) == 1
    assert poll(sched).task.task_id == b


def test_an_idempotent_submit_in_flight_returns_the_same_ids(sched: Scheduler) -> None:
    items = [NewTask("extract"), NewTask("embed")]
    ids, created, pending = sched.submit("a", items, "k1")
    again, created_again, pending_again = sched.submit("a", items, "k1")
    assert created and not created_again and again == ids
    wait(pending)
    wait(pending_again)
    after, created_after, none = sched.submit("a", items, "k1")
    assert after == ids and not created_after and none is None
    with pytest.raises(Conflict):
        sched.submit("a", [NewTask("embed")], "k1")
    assert len(sched.queued) == 2


def test_predictions_are_made_once_at_submit_and_enable_predicted_policies(
    tmp_path: Path, now: FakeTime
) -> None:
    predictor = FixedPredictor()
    sched = make_scheduler(tmp_path / "state.db", now, predictor=predictor, policy="fair-sjf")
    try:
        ids, _, pending = sched.submit("a", [NewTask("extract", pages=3), NewTask("extract")])
        wait(pending)
        assert [sched.live[sched.position[i]].predicted_s for i in ids] == [6.0, 2.0]
        grant = poll(sched)
        assert grant.task.task_id == ids[1]  # shortest predicted job first
        wait(sched.complete("w", grant.task.task_id, grant.lease_id, 1.5))
        assert predictor.seen == [("a", "extract", 1.5)]
        assert sched.task_view("a", ids[0]).predicted_s == 6.0
    finally:
        sched.stop()


def test_a_policy_that_needs_predictions_is_refused_without_a_predictor(
    tmp_path: Path, now: FakeTime
) -> None:
    sched = Scheduler(
        Store(str(tmp_path / "state.db")),
        lease_s=10.0,
        max_retries=1,
        clock=Clock(source=now),
        policy="fair-sjf",
    )
    with pytest.raises(DeschedError, match="predictor"):
        sched.start()
    sched.stop()


def test_the_decision_log_has_the_columns_of_the_run_decision_log(
    sched: Scheduler, tmp_path: Path
) -> None:
    from desched.runs import COMPLETION_COLUMNS, DECISION_COLUMNS

    (task_id,) = submit(sched, "a")
    grant = poll(sched)
    wait(sched.complete("w", task_id, grant.lease_id, 3.0, peak_mem_mb=120.0))
    sched.stop()
    records = [
        json.loads(line)
        for path in (tmp_path / "logs").glob("*.jsonl")
        for line in path.read_text().splitlines()
    ]
    decision, completion = records
    assert decision["kind"] == "decision" and set(DECISION_COLUMNS) <= set(decision)
    assert set(sched.policy.components) <= set(decision)
    assert completion["kind"] == "completion" and set(COMPLETION_COLUMNS) <= set(completion)
    assert completion["duration_s"] == 3.0 and completion["status"] == "ok"
    assert math.isclose(completion["start_s"], decision["t"])


def test_a_second_service_on_the_same_database_is_refused(
    sched: Scheduler, tmp_path: Path, now: FakeTime
) -> None:
    with pytest.raises(DeschedError, match="already owns"):
        make_scheduler(tmp_path / "state.db", now)
    # the same file by another name: a symbolic link (to it, or to its folder), a relative
    # path; each took a lock of its own before, and two services wrote one database
    (tmp_path / "link.db").symlink_to(tmp_path / "state.db")
    (tmp_path / "folder").symlink_to(tmp_path, target_is_directory=True)
    for other in (tmp_path / "link.db", tmp_path / "folder" / "state.db",
                  tmp_path / "folder" / ".." / tmp_path.name / "state.db"):
        with pytest.raises(DeschedError, match="already owns"):
            make_scheduler(other, now)


def test_a_restart_keeps_the_leases_of_running_tasks_until_they_expire(
    tmp_path: Path, now: FakeTime
) -> None:
    db = tmp_path / "state.db"
    first = make_scheduler(db, now)
    submit(first, "a", 2)
    early = poll(first)
    now.t += 5.0
    late = poll(first)
    first.stop()
    second = make_scheduler(db, now)
    try:
        assert second.sweep() == 0 and len(second.leases) == 2
        now.t += 5.5  # past the first lease only
        assert second.sweep() == 1
        assert {t.task_id for t in second.leases.values()} == {late.task.task_id}
        assert early.task.task_id in second.position
    finally:
        second.stop()


def test_the_ingestion_flow_loads_the_live_log_without_quarantining_a_record(
    tmp_path: Path, now: FakeTime
) -> None:
    pytest.importorskip("duckdb")
    from desched.warehouse.ledger import plan
    from desched.warehouse.load import ingest_file
    from desched.warehouse.schema import open_warehouse, table_counts
    from desched.warehouse.settings import IngestSettings

    sched = make_scheduler(tmp_path / "state.db", now)
    try:
        _, retried, dead = submit(sched, "a", 2) + submit(sched, "b")
        attempts = []
        while (grant := poll(sched)) is not None:
            now.t += 1.0
            attempts.append((grant.task.task_id, grant.attempt))
            if grant.task.task_id == retried and grant.attempt == 1:
                _, pending = sched.fail("w", retried, grant.lease_id, "flaky")
            elif grant.task.task_id == dead:
                _, pending = sched.fail("w", dead, grant.lease_id, "bad", retryable=False)
            else:
                pending = sched.complete("w", grant.task.task_id, grant.lease_id, 1.0)
            wait(pending)
        assert (retried, 2) in attempts and len(attempts) == 4
    finally:
        sched.stop()
    con = open_warehouse(tmp_path / "wh.duckdb")
    settings = IngestSettings(duckdb_memory_limit=None)  # GX samples: not run here
    work, _ = plan(con, tmp_path / "logs", settings)
    assert len(work) == 1
    for item in work:
        ingest_file(con, item, settings)
    counts = table_counts(con)
    assert counts["quarantine"] == 0, con.execute("SELECT rule, detail FROM quarantine").fetchall()
    assert counts["decisions"] == 4 and counts["completions"] == 3
    con.close()


def test_a_restart_takes_back_the_policy_state_of_the_previous_run(
    tmp_path: Path, now: FakeTime
) -> None:
    # Under vtc without predictions a tenant is charged the real duration at completion.
    # a has used 100 s, b 1 s: b goes next, after a restart too. A restart that lost the
    # counters would see a tie and serve a's older task.
    import shutil

    db = tmp_path / "state.db"
    first = make_scheduler(db, now, policy="vtc")
    a_ids = submit(first, "a", 3)
    b_ids = submit(first, "b", 3)
    for tenant, duration in (("a", 100.0), ("b", 1.0)):
        grant = poll(first)
        assert grant.task.tenant == tenant
        wait(first.complete("w", grant.task.task_id, grant.lease_id, duration))
    first.stop()

    forgetful = tmp_path / "forgot.db"
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{db}{suffix}").exists():
            shutil.copy(f"{db}{suffix}", f"{forgetful}{suffix}")
    store = Store(str(forgetful))
    store.execute("DELETE FROM config WHERE key = 'policy_state'")
    store.close()
    control = make_scheduler(forgetful, now, policy="vtc")
    try:
        assert poll(control).task.task_id == a_ids[1]
    finally:
        control.stop()

    second = make_scheduler(db, now, policy="vtc")
    try:
        assert second.counters.policy_state_restores == 1
        assert second.policy.state() == {"counter": {"a": 100.0, "b": 1.0}, "last_left": None}
        assert poll(second).task.task_id == b_ids[1]
        assert "desched_policy_state_restores_total 1" in second.metrics()
    finally:
        second.stop()

    # Under another policy the saved state is not applied.
    third = make_scheduler(db, now, policy="round-robin")
    try:
        assert third.counters.policy_state_restores == 0
    finally:
        third.stop()
