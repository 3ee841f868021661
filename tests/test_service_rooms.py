"""The live scheduler's rooms on their own: the lease book against a naive model, the
``/metrics`` exposition read back by Prometheus's own parser, SQL kept in the store, and the
idempotency keys committed between the database read and the scheduler's lock."""

from __future__ import annotations

import math
import re
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from desched.service import idempotency
from desched.service.errors import Conflict
from desched.service.leases import LeaseBook
from desched.service.records import LiveTask
from desched.service.store import Store
from desched.service.telemetry import LATENCY_BUCKETS_S, Snapshot, Telemetry

SERVICE = Path(__file__).resolve().parents[1] / "desched" / "service"


def make_task(i: int) -> LiveTask:
    return LiveTask(
        seq=i,
        task_id=f"t{i}",
        tenant="a",
        task_type="extract",
        document_ref="",
        doc_bytes=None,
        pages=None,
        mem_mb=None,
        submit_s=0.0,
        predicted_s=math.nan,
    )


step = st.one_of(
    st.tuples(st.just("grant"), st.integers(0, 5), st.floats(0.0, 20.0)),
    st.tuples(st.just("extend"), st.integers(0, 5), st.floats(0.0, 20.0)),
    st.tuples(st.just("release"), st.integers(0, 5), st.just(0.0)),
    st.tuples(st.just("expire"), st.just(0), st.floats(0.0, 30.0)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(step, max_size=60))
def test_the_lease_book_expires_exactly_the_leases_past_their_expiry(
    steps: list[tuple[str, int, float]],
) -> None:
    book = LeaseBook(lease_s=10.0)
    tasks = {i: make_task(i) for i in range(6)}
    naive: dict[int, tuple[str, float]] = {}  # position -> (lease id, expires at)
    for n, (kind, i, t) in enumerate(steps):
        if kind == "grant" and i not in naive:
            book.grant(i, tasks[i], "w", "slot", f"L{n}", expires_at=t + 10.0, now=t)
            naive[i] = (f"L{n}", t + 10.0)
        elif kind == "extend" and i in naive:
            book.extend(i, tasks[i], t)
            naive[i] = (naive[i][0], t)
        elif kind == "release" and i in naive:
            ended = book.release(i)
            assert (ended.lease_id, ended.expires_at) == naive.pop(i)
            assert tasks[i].lease_id is None and math.isnan(tasks[i].lease_expires_at)
        elif kind == "expire":
            due = sorted((exp, j, lid) for j, (lid, exp) in naive.items() if exp < t)
            got = book.expired(t)
            assert [(h.expires_at, j, h.lease_id) for j, _, h in got] == due
            for _, j, _ in due:
                del naive[j]
        assert dict(book.items()) == {j: tasks[j] for j in naive}
        assert all(tasks[j].lease_id == lid for j, (lid, _) in naive.items())


def test_the_exposition_reads_back_with_every_name_label_and_value() -> None:
    snapshot: list[Snapshot] = []
    telemetry = Telemetry(lambda: snapshot[0])
    c = telemetry.counters
    c.submitted, c.decisions, c.completed, c.lease_expiries, c.unfit_skips = 7, 3, 2, 1, 4
    c.cancelled_queued, c.cancelled_leased, c.takeovers = 5, 6, 1
    for seconds in (0.0001, 0.003, 5.0):
        c.observe_latency(seconds)
    snapshot.append(Snapshot(c.copy(), [("a", 3), ('we"ird\\', 1)], 2, "vtc", active=True))
    families = {f.name: f for f in text_string_to_metric_families(telemetry.exposition())}
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in families.values()
        for s in f.samples
    }
    assert samples[("desched_queue_length", (("tenant", "a"),))] == 3
    assert samples[("desched_queue_length", (("tenant", 'we"ird\\'),))] == 1
    assert samples[("desched_leased_tasks", ())] == 2
    assert samples[("desched_tasks_submitted_total", ())] == 7
    assert samples[("desched_decisions_total", ())] == 3
    assert samples[("desched_tasks_completed_total", ())] == 2
    assert samples[("desched_lease_expiries_total", ())] == 1
    assert samples[("desched_unfit_skips_total", ())] == 4
    assert samples[("desched_tasks_dead_lettered_total", ())] == 0
    assert samples[("desched_tasks_cancelled_total", (("was", "queued"),))] == 5
    assert samples[("desched_tasks_cancelled_total", (("was", "leased"),))] == 6
    assert samples[("desched_takeovers_total", ())] == 1
    assert samples[("desched_active", ())] == 1
    assert samples[("desched_policy_info", (("policy", "vtc"),))] == 1
    assert families["desched_decision_latency_seconds"].type == "histogram"
    buckets = [
        samples[("desched_decision_latency_seconds_bucket", (("le", le),))]
        for le in [*(repr(b) for b in LATENCY_BUCKETS_S), "+Inf"]
    ]
    assert buckets == [1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 3]  # cumulative, as Prometheus reads it
    assert samples[("desched_decision_latency_seconds_count", ())] == 3
    assert math.isclose(samples[("desched_decision_latency_seconds_sum", ())], 5.0031)


SQL = re.compile(r"\b(SELECT|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|CREATE\s+TABLE)\b")


def test_no_service_module_but_the_store_holds_sql() -> None:
    offenders = [
        p.name for p in SERVICE.glob("*.py")
        if p.name not in ("store.py", "schema.py") and SQL.search(p.read_text())
    ]
    assert offenders == []
    assert SQL.search((SERVICE / "store.py").read_text())


class CountingStore:
    """Stands for the store's ``batch`` read: what the database holds, and how often asked."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], list[tuple[str, str | None]]] = {}
        self.reads = 0

    def batch(self, tenant: str, key: str) -> list[tuple[str, str | None]]:
        self.reads += 1
        return list(self.rows.get((tenant, key), []))


def test_a_key_committed_between_the_read_and_the_lock_is_replayed_not_created_again() -> None:
    # The scheduler reads the database before its lock: a submit committed in between is
    # neither in the read nor in flight any more; ``recent`` has it.
    db = CountingStore()
    keys = idempotency.SubmitKeys(cast(Store, db), threading.Lock())
    first: Future[None] = Future()
    keys.remember("t", "k", ["a", "b"], "d", first)
    read_before = keys.stored("t", "k")  # the retry's read, before the first commits
    assert read_before == []
    db.rows["t", "k"] = [("a", "d"), ("b", "d")]
    first.set_result(None)  # committed: out of flight
    assert keys.earlier("t", "k", "d", read_before) == (["a", "b"], None)
    with pytest.raises(Conflict):
        keys.earlier("t", "k", "other", read_before)
    # A submit whose commit failed is forgotten: its key is free again.
    failed: Future[None] = Future()
    keys.remember("t", "k2", ["c"], "d", failed)
    failed.set_exception(RuntimeError("no commit"))
    assert keys.earlier("t", "k2", "d", []) is None
    # Without a read given, it reads; recent keys leave oldest first past RECENT_IDS ids.
    reads = db.reads
    assert keys.earlier("t", "k3", "d") is None and db.reads == reads + 1
    for j in range(3):
        done: Future[None] = Future()
        keys.remember("t", f"big{j}", [f"x{j}"] * (idempotency.RECENT_IDS // 2), "d", done)
        done.set_result(None)
    assert keys.earlier("t", "k", "d", []) is None  # gone from recent: only a read finds it
    assert keys.earlier("t", "big2", "d", []) == (["x2"] * (idempotency.RECENT_IDS // 2), None)
