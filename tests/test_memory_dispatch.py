"""Memory-aware dispatch in the live scheduler (in-process, SQLite, injected clock)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from desched.controls import Controls, TenantControl
from desched.enrich.client import Lease, poll_while_fits
from desched.policies import REGISTRY
from desched.service import dispatch
from desched.service.records import NewTask
from desched.service.scheduler import Scheduler
from desched.service.store import SCHEMA, Store
from desched.service.writer import wait
from tests.test_service_scheduler import FakeTime, make_scheduler


class FixedMemory:
    """Predicts 100 MiB per page (a stand-in for the LightGBM memory model)."""

    def predict_mb(self, rows: Sequence[dict[str, Any]]) -> list[float]:
        return [100.0 * float(r.get("pages") or 1) for r in rows]


@pytest.fixture
def sched(tmp_path: Path) -> Iterator[Scheduler]:
    s = make_scheduler(tmp_path / "state.db", FakeTime(), policy="fifo")
    yield s
    s.stop()


def submit(sched: Scheduler, tenant: str, mems: Sequence[float | None]) -> list[str]:
    ids, _, pending = sched.submit(tenant, [NewTask("embed", mem_mb=m) for m in mems])
    wait(pending)
    return ids


def poll(sched: Scheduler, free_mem_mb: float | None, worker_id: str = "gpu-0") -> Any:
    grant, pending = sched.poll("w", worker_id, free_mem_mb)
    wait(pending)
    return grant


def test_a_poll_gets_the_first_task_in_policy_order_that_fits(sched: Scheduler) -> None:
    ids = submit(sched, "a", [4000.0, 300.0, 5000.0, 200.0, None])
    first = poll(sched, 1000.0)
    assert first.task.task_id == ids[1]  # fifo would give ids[0], which does not fit
    assert poll(sched, 1000.0).task.task_id == ids[3]
    assert poll(sched, 1000.0).task.task_id == ids[4]  # unknown memory fits anywhere
    assert poll(sched, 1000.0) is None  # what is left does not fit
    assert len(sched.queued) == 2
    # The skipped tasks kept their place: a big enough worker gets them in fifo order.
    assert poll(sched, 8000.0).task.task_id == ids[0]
    assert poll(sched, None).task.task_id == ids[2]


class InProcessClient:
    """The worker's ``ServiceClient.poll`` over an in-process scheduler."""

    def __init__(self, sched: Scheduler) -> None:
        self.sched = sched
        self.stated: list[float | None] = []

    def poll(self, free_mem_mb: float | None) -> Lease | None:
        self.stated.append(free_mem_mb)
        grant = poll(self.sched, free_mem_mb)
        if grant is None:
            return None
        t = grant.task
        return Lease(
            t.task_id,
            grant.lease_id,
            grant.lease_expires_at,
            t.tenant,
            t.task_type,
            t.document_ref,
            t.doc_bytes,
            t.pages,
            t.predicted_mem_mb,
        )


def test_a_gpu_worker_holds_several_leases_within_its_memory(sched: Scheduler) -> None:
    submit(sched, "a", [300.0, 300.0, None, 300.0, 300.0])
    client = InProcessClient(sched)
    held = poll_while_fits(client, 8, 1000.0, default_task_mem_mb=64.0)  # type: ignore[arg-type]
    # 300 + 300 + 64 (no prediction: the worker's default) + 300 = 964; the next 300 does
    # not fit in the 36 MiB left.
    assert len(held) == 4 and client.stated == [1000.0, 700.0, 400.0, 336.0, 36.0]
    assert len(sched.leases) == 4 and len(sched.queued) == 1
    assert poll_while_fits(client, 8, 1000.0, 64.0) != []  # type: ignore[arg-type]


def test_a_round_robin_tenant_skipped_for_memory_keeps_its_turn(tmp_path: Path) -> None:
    s = make_scheduler(tmp_path / "rr.db", FakeTime(), policy="round-robin")
    try:
        big = submit(s, "big", [4000.0, 4000.0])
        (a,) = submit(s, "a", [100.0])
        (b,) = submit(s, "b", [100.0])
        # Ring: big, a, b. A 1 GiB worker cannot take big's task; a is served, and big stays
        # at the front of the ring for the next worker it fits. (Popping big's task and
        # pushing it back would have sent big behind b.)
        assert poll(s, 1000.0).task.task_id == a
        assert s.policy.state() == {"ring": ["big", "b"]}
        assert poll(s, 8000.0).task.task_id == big[0]
        assert poll(s, 8000.0).task.task_id == b
        assert s.counters.unfit_skips == 1
    finally:
        s.stop()


def test_the_skip_limits_bound_the_work_of_one_poll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = make_scheduler(tmp_path / "s.db", FakeTime(), policy="fifo", max_fit_skips=3)
    try:
        ids = submit(s, "a", [900.0, 900.0, 900.0, 100.0])
        # the fitting task is the fourth candidate: past the first walk, found by the second
        assert poll(s, 500.0).task.task_id == ids[3]
        assert s.counters.unfit_polls == 0 and s.counters.unfit_skips == 3 + 3
        submit(s, "a", [100.0])
        monkeypatch.setattr(dispatch, "WALK_POPS", 3)  # no longer than the first: no second
        assert poll(s, 500.0) is None
        assert s.counters.unfit_polls == 1 and s.counters.unfit_skips == 6 + 3
        assert len(s.queued) == 4
        assert poll(s, 1000.0).task.task_id == ids[0]
    finally:
        s.stop()


def test_the_memory_model_and_the_hint_give_the_larger_prediction(tmp_path: Path) -> None:
    s = make_scheduler(tmp_path / "s.db", FakeTime(), memory_model=FixedMemory())
    try:
        items = [NewTask("embed", pages=2), NewTask("embed", pages=1, mem_mb=500.0)]
        ids, _, pending = s.submit("a", items)
        wait(pending)
        got = {t.task_id: t.predicted_mem_mb for t in s.live.values()}
        assert got == {ids[0]: 200.0, ids[1]: 500.0}
        assert s.task_view("a", ids[1]).predicted_mem_mb == 500.0
    finally:
        s.stop()
    # The prediction is stored: a restart keeps it without the model.
    s = make_scheduler(tmp_path / "s.db", FakeTime())
    try:
        assert sorted(t.predicted_mem_mb for t in s.live.values()) == [200.0, 500.0]
    finally:
        s.stop()


def test_an_old_database_gains_the_predicted_memory_column(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old_schema = SCHEMA[1].replace("predicted_mem_mb DOUBLE PRECISION,", "")
    assert "predicted_mem_mb" not in old_schema
    con = sqlite3.connect(path)
    con.execute(old_schema)
    con.close()
    store = Store(str(path))
    try:
        store.migrate()
        store.migrate()
        cols = [r[1] for r in store.execute("PRAGMA table_info(tasks)").fetchall()]
    finally:
        store.close()
    assert cols.count("predicted_mem_mb") == 1


@settings(max_examples=25, deadline=None)
@given(
    policy=st.sampled_from(sorted(n for n, p in REGISTRY.items() if "predicted_s" not in p.reads)),
    mems=st.lists(st.one_of(st.none(), st.floats(0, 2000)), min_size=1, max_size=25),
    frees=st.lists(st.one_of(st.none(), st.floats(0, 2000)), min_size=1, max_size=40),
)
def test_no_poll_gets_a_task_that_does_not_fit_and_no_task_is_lost(
    tmp_path_factory: pytest.TempPathFactory,
    policy: str,
    mems: list[float | None],
    frees: list[float | None],
) -> None:
    s = make_scheduler(tmp_path_factory.mktemp("p") / "s.db", FakeTime(), policy=policy)
    try:
        tenants = ["a", "b", "c"]
        ids: list[str] = []
        for j, m in enumerate(mems):
            ids += submit(s, tenants[j % 3], [m])
        need = dict(zip(ids, mems))
        given_out: list[str] = []
        for free in frees:
            grant = poll(s, free)
            if grant is None:
                fits = [
                    i for i in s.queued if free is None or (s.live[i].predicted_mem_mb or 0) <= free
                ]
                assert not fits or len(s.queued) > s.max_fit_skips
                continue
            task_id = grant.task.task_id
            assert free is None or need[task_id] is None or need[task_id] <= free
            given_out.append(task_id)
        assert len(given_out) == len(set(given_out))
        queued = {s.live[i].task_id for i in s.queued}
        assert queued | set(given_out) == set(ids) and not queued & set(given_out)
        assert len(s.policy) == len(s.queued)
        while (grant := poll(s, None)) is not None:
            given_out.append(grant.task.task_id)
        assert sorted(given_out) == sorted(ids)
    finally:
        s.stop()


def test_the_memory_model_learns_peak_memory_from_completion_records(tmp_path: Path) -> None:
    import numpy as np
    import polars as pl

    from desched.models.memory import load
    from desched.models.memory_training import train_memory_model
    from desched.models.promotion import register
    from desched.service.app import load_memory_model as service_loads

    rng = np.random.default_rng(0)
    n = 300
    kind = rng.choice(["embed", "extract", "classify"], n)
    size = rng.integers(200, 1500, n)
    peak = np.where(kind == "extract", 1.0, 80.0) + 0.05 * size * rng.uniform(0.9, 1.1, n)
    completions = pl.DataFrame(
        {
            "task_type": kind,
            "doc_bytes": size,
            "pages": np.ones(n, dtype=np.int64),
            "peak_mem_mb": peak,
            "submit_s": np.arange(n, dtype=np.float64),
            "status": ["ok"] * n,
        }
    )
    result = train_memory_model(completions)
    assert result.metrics.mae_mb < result.metrics.baseline_type_median_mae_mb
    folder = tmp_path / "memory"
    card = register(folder, result)
    assert (card.version, card.verdict, (folder / "CHAMPION").read_text()) == (
        "v0001", "promoted", "v0001\n"
    )
    again = load(folder)
    rows = [{"task_type": "embed", "doc_bytes": 1000, "pages": 1}, {"task_type": "extract"}]
    assert again.predict_mb(rows) == result.model.predict_mb(rows)
    assert 120 < again.predict_mb(rows)[0] < 140
    assert service_loads(folder) is not None and service_loads(tmp_path / "none") is None


def test_the_memory_model_runs_before_the_scheduler_lock_is_taken(tmp_path: Path) -> None:
    class LockWatchingMemory(FixedMemory):
        def __init__(self) -> None:
            self.sched: Scheduler | None = None
            self.lock_held: list[bool] = []

        def predict_mb(self, rows: Sequence[dict[str, Any]]) -> list[float]:
            assert self.sched is not None
            self.lock_held.append(self.sched.lock.locked())
            return super().predict_mb(rows)

    model = LockWatchingMemory()
    s = make_scheduler(tmp_path / "s.db", FakeTime(), memory_model=model)
    model.sched = s
    try:
        ids, _, pending = s.submit("a", [NewTask("embed", pages=3)])
        wait(pending)
        assert model.lock_held == [False]  # a poll never waits behind a prediction
        assert s.live[s.position[ids[0]]].predicted_mem_mb == 300.0
    finally:
        s.stop()


def test_another_tenants_priority_levels_leave_the_second_walk_on(tmp_path: Path) -> None:
    # a QA pass: with a tenant's tasks of two priority levels queued, the second walk was
    # off for everyone, and the oversized tasks ahead held every memory-aware poll at 204
    for policy in ("fifo", "vtc"):
        s = make_scheduler(tmp_path / f"{policy}.db", FakeTime(), policy=policy)
        try:
            submit(s, "acme", [1e6] * 100)
            ids, _, pending = s.submit("mixed", [NewTask("embed", mem_mb=100.0, priority=p)
                                                 for p in (0, 1)])
            wait(pending)
            small = submit(s, "globex", [100.0] * 2)
            got = [poll(s, 4000.0) for _ in range(4)]
            assert sorted(g.task.task_id for g in got) == sorted(ids + small), policy
            order = [g.task.task_id for g in got]
            assert order.index(ids[1]) < order.index(ids[0])  # its level 1 first
        finally:
            s.stop()


NO_PREDICTION = sorted(n for n, p in REGISTRY.items() if "predicted_s" not in p.reads)


def expected_grant(s: Scheduler, free: float | None) -> str | None:
    """The reference: the first task of the policy's pop sequence (on a copy) that fits, its
    tenant under its cap, unless ``WALK_POPS`` others were refused before it."""
    sequence = s.policy.pop_sequence(s.clock())

    def fit(i: int) -> bool:
        need = s.live[i].predicted_mem_mb
        return free is None or need is None or need <= free

    tenant = s.policy.tasks.tenant
    gate = s.admission.gate
    capped = {k for k, cap in gate.caps.items() if gate.running[k] >= cap}
    refused = 0
    for i in sequence:
        if tenant[i] in capped:  # left out of the walk by the gate, uncounted
            continue
        if fit(i):
            return s.live[i].task_id
        refused += 1
        if refused >= dispatch.WALK_POPS:
            return None
    return None


@pytest.mark.parametrize("fitting_own", [0, 1])
def test_one_tenants_tasks_that_fit_no_worker_hold_up_no_other_tenant(
    tmp_path: Path, fitting_own: int
) -> None:
    # QA passes: 100 tasks of 1e6 MB ahead of 5 small ones held every memory-aware poll at
    # 204 for good (the bound of 64 skipped candidates spent on them), under every policy;
    # and again, once only tenants with no task that fits were passed over, with one small
    # task of the flooder's own behind its big ones.
    for policy in NO_PREDICTION:
        s = make_scheduler(tmp_path / f"{policy}{fitting_own}.db", FakeTime(), policy=policy)
        try:
            submit(s, "acme", [1e6] * 100)
            own = submit(s, "acme", [None] * fitting_own)
            small = submit(s, "globex", [100.0] * 5)
            got = [poll(s, 4000.0) for _ in range(6 + fitting_own)]
            assert sorted(g.task.task_id for g in got[:-1]) == sorted(own + small), policy
            assert got[-1] is None and len(s.queued) == 100
            assert s.counters.unfit_polls == 1
            assert poll(s, None).task.tenant == "acme"  # a poll that states no memory: any
        finally:
            s.stop()


@settings(max_examples=40, deadline=None)
@given(
    policy=st.sampled_from(NO_PREDICTION),
    tasks=st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from([None, 100.0, 900.0,
                                                                       5000.0])),
                   min_size=1, max_size=20),
    steps=st.lists(st.one_of(
        st.none(), st.sampled_from([50.0, 100.0, 1000.0]),  # a poll and its free memory
        st.just("idle"),  # the leases expire in a quiet spell: requeued (or dead after 2)
        st.tuples(st.sampled_from("abc"), st.sampled_from([None, 100.0, 5000.0])),  # arrives
    ), min_size=1, max_size=25),
    cap=st.one_of(st.none(), st.integers(1, 2)),
)
def test_a_memory_aware_poll_gets_the_reference_walks_task(
    tmp_path_factory: pytest.TempPathFactory, policy: str,
    tasks: list[tuple[str, float | None]], steps: list[Any], cap: int | None,
) -> None:
    # every grant is the reference walk's, under a concurrency cap on tenant b too, with
    # leases expiring in quiet spells while work arrives between the polls
    clock = FakeTime()
    s = make_scheduler(tmp_path_factory.mktemp("w") / "s.db", clock, policy=policy,
                       max_fit_skips=2)
    if cap is not None:
        s.admission.apply(Controls({"b": TenantControl(cap=cap)}), 1)
    try:
        for tenant, mem in tasks:
            submit(s, tenant, [mem])
        for step in steps:
            if step == "idle":
                clock.t += s.leases.lease_s + 1.0
                s.sweep()
                wait(s.writer.add([]))
                assert not s.leases
                continue
            if isinstance(step, tuple):
                submit(s, step[0], [step[1]])
                continue
            expected = expected_grant(s, step)
            grant = poll(s, step)
            assert (None if grant is None else grant.task.task_id) == expected
            assert len(s.policy) == len(s.queued)
    finally:
        s.stop()


def test_the_second_walk_refuses_at_most_walk_pops_candidates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # past WALK_POPS refused candidates a poll gets nothing: the lock is held for a bounded
    # time; and a poll that nothing queued fits stops after the first walk
    monkeypatch.setattr(dispatch, "WALK_POPS", 4)
    for ahead, granted in ((3, True), (4, False)):
        s = make_scheduler(tmp_path / f"{ahead}.db", FakeTime(), policy="fifo",
                           max_fit_skips=1)
        try:
            submit(s, "acme", [1e6] * ahead)
            [small] = submit(s, "globex", [100.0])
            got = poll(s, 4000.0)  # the small task is the 4th candidate, or the 5th
            assert (got.task.task_id if got else None) == (small if granted else None)
            assert len(s.policy) == len(s.queued) == ahead + 1 - granted
            skips = s.counters.unfit_skips
            assert poll(s, 50.0) is None and s.counters.unfit_skips == skips + 1
            assert poll(s, None).task.tenant == "acme"
        finally:
            s.stop()
