"""High availability on PostgreSQL: two real ``desched serve`` processes on one database.

One is active (it holds the database's writer lock), the other stands by (503 with
Retry-After). The tests SIGKILL the active one under load from tenant and worker clients
that were given both addresses, and check that the standby serves within a few seconds and
that nothing is lost: every acknowledged task is done, none completed twice, and the policy
state was restored. Each test runs in a throw-away database on the server at 127.0.0.1:5432
(skipped when none answers, failed when DESCHED_REQUIRE_POSTGRES is set). SQLite keeps one
process per database: a second ``desched serve`` is refused in one line.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from desched.cli.service import serve_argv
from desched.enrich.client import ServiceClient, ServiceError
from tests.test_service import (
    PG_ADMIN,
    ROOT,
    Service,
    Tokens,
    add_principals,
    auth,
    free_port,
    pg_available,
    task,
)

TAKEOVER_LIMIT_S = 5.0


@pytest.fixture
def pg_db() -> Iterator[str]:
    """A fresh PostgreSQL database, dropped afterwards."""
    if not pg_available():
        if os.environ.get("DESCHED_REQUIRE_POSTGRES"):
            pytest.fail("DESCHED_REQUIRE_POSTGRES is set but no PostgreSQL answers at 127.0.0.1")
        pytest.skip("no PostgreSQL server at 127.0.0.1:5432")
    import psycopg

    name = f"desched_ha_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def lock_holder(db: str) -> int | None:
    """The backend pid holding the service's writer lock on ``db``, if any (this database
    only: a service of another test, on another database, holds a lock with the same key)."""
    import psycopg

    with psycopg.connect(db, autocommit=True) as conn:
        row = conn.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND classid = CAST(1684370275 AS oid) AND objsubid = 2"
        ).fetchone()
    return None if row is None else int(row[0])


def pair(db: str, tmp: Path, **env: str) -> tuple[Service, Service, Tokens]:
    """An active service and a standby on ``db``, with the same settings."""
    tokens = add_principals(db)
    settings = {"DESCHED_STANDBY_POLL_S": "0.1", **env}
    active = Service(db=db, log_dir=tmp / "logs", lease_s=1.0, env=settings).start()
    standby = Service(db=db, log_dir=tmp / "logs", lease_s=1.0, env=settings)
    return active, standby.start(standby=True), tokens


class FailoverLoad:
    """Tenants that submit with idempotency keys and workers (``ServiceClient``), all given
    every address; each tenant request moves to the next address on a connection error or
    a 5xx, as the worker client does."""

    def __init__(self, tokens: Tokens, urls: list[str]) -> None:
        self.tokens = tokens
        self.urls = urls
        self.accepted: set[str] = set()
        self.completions: Counter[str] = Counter()
        self.submitting = threading.Event()
        self.working = threading.Event()
        self.lock = threading.Lock()
        self.errors: list[str] = []

    def submitter(self, name: str, token: str) -> None:
        http = httpx.Client(timeout=5.0)
        n, j = 0, 0
        while self.submitting.is_set():
            try:
                r = http.post(
                    self.urls[j % len(self.urls)] + "/v1/tasks",
                    json=[task() for _ in range(3)],
                    headers={**auth(token), "Idempotency-Key": f"{name}-{n}"},
                )
            except httpx.TransportError:
                j += 1
                time.sleep(0.02)
                continue
            if r.status_code >= 500:
                j += 1
                time.sleep(0.02)
                continue
            if r.status_code not in (200, 201):
                self.errors.append(f"submit {r.status_code} {r.text}")
                return
            with self.lock:
                self.accepted.update(r.json()["task_ids"])
            n += 1
            time.sleep(0.02)
        http.close()

    def worker(self, worker_id: str) -> None:
        client = ServiceClient(self.urls, self.tokens.worker, worker_id, retry_for_s=30.0)
        try:
            while self.working.is_set():
                lease = client.poll(None)
                if lease is None:
                    time.sleep(0.02)
                    continue
                if client.complete(lease, 0.01, None, None):
                    with self.lock:
                        self.completions[lease.task_id] += 1
        except ServiceError as exc:
            self.errors.append(f"worker {worker_id}: {exc}")
        finally:
            client.close()


def metric(url: str, name: str) -> float:
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no metric {name}")


def test_the_standby_takes_over_within_seconds_when_the_active_service_is_killed_under_load(
    pg_db: str, tmp_path: Path
) -> None:
    env = {"DESCHED_POLICY": "vtc", "DESCHED_STATE_SAVE_S": "0.2"}
    active, standby, tokens = pair(pg_db, tmp_path, **env)
    try:
        refused = httpx.post(
            f"{standby.url}/v1/poll", json={"worker_id": "w"}, headers=auth(tokens.worker)
        )
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        assert httpx.get(f"{standby.url}/livez").json() == {"role": "standby"}
        assert metric(standby.url, "desched_active") == 0

        load = FailoverLoad(tokens, [active.url, standby.url])
        threads = [
            threading.Thread(target=load.submitter, args=(name, token))
            for name, token in (("a", tokens.tenant_a), ("b", tokens.tenant_b))
        ] + [threading.Thread(target=load.worker, args=(f"w{j}",)) for j in range(4)]
        load.submitting.set()
        load.working.set()
        for t in threads:
            t.start()
        time.sleep(1.5)
        killed_at = time.monotonic()
        active.kill()
        accepted_before = len(load.accepted)
        while httpx.get(f"{standby.url}/healthz").status_code != 200:
            assert time.monotonic() - killed_at < 30, "the standby never took over"
            time.sleep(0.02)
        takeover_s = time.monotonic() - killed_at
        time.sleep(1.5)
        load.submitting.clear()
        deadline = time.monotonic() + 30
        while True:
            h = httpx.get(f"{standby.url}/healthz").json()
            if h["queued"] == 0 and h["leased"] == 0 and not any(t.is_alive() for t in threads[:2]):
                break
            assert time.monotonic() < deadline, f"queue never drained: {h}"
            time.sleep(0.1)
        load.working.clear()
        for t in threads:
            t.join(timeout=40)
        restores = metric(standby.url, "desched_policy_state_restores_total")
        takeovers = metric(standby.url, "desched_takeovers_total")
        health = httpx.get(f"{standby.url}/healthz").json()
    finally:
        load.submitting.clear()
        load.working.clear()
        active.stop()
        standby.stop()
    print(f"takeover {takeover_s:.2f} s; {len(load.accepted)} tasks accepted")
    assert takeover_s < TAKEOVER_LIMIT_S
    assert not load.errors, load.errors[:5]
    assert accepted_before > 0 and len(load.accepted) > accepted_before
    assert (restores, takeovers, health["policy"], health["role"]) == (1, 1, "vtc", "active")

    from desched.service.store import Store

    store = Store(pg_db)
    try:
        rows = store.execute("SELECT task_id, state, batch_key FROM tasks").fetchall()
    finally:
        store.close()
    state = {r[0]: r[1] for r in rows}
    assert load.accepted <= set(state), "an acknowledged task is missing"
    assert all(state[t] == "done" for t in load.accepted)
    assert all(n == 1 for n in load.completions.values()), "a task was completed twice"
    assert set(Counter(r[2] for r in rows).values()) == {3}, "a retried submit created more"
    ok_records: Counter[str] = Counter()
    for path in (tmp_path / "logs").glob("*.jsonl"):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec["kind"] == "completion" and rec["status"] == "ok":
                ok_records[rec["task_id"]] += 1
    assert ok_records and max(ok_records.values()) == 1


def test_a_service_whose_writer_session_is_lost_while_a_standby_takes_over_stands_by(
    pg_db: str, tmp_path: Path
) -> None:
    # Fencing: the writer lock lives on the session that commits, so once it is lost the
    # old active service writes nothing more and stands by when it finds the lock taken.
    import psycopg

    first, second, tokens = pair(pg_db, tmp_path)
    try:
        (queued,) = httpx.post(
            f"{first.url}/v1/tasks", json=[task()], headers=auth(tokens.tenant_a)
        ).json()["task_ids"]
        holder = lock_holder(pg_db)
        assert holder is not None
        with psycopg.connect(pg_db, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (holder,))
        # Generous: the handover itself takes well under a second (README), but a loaded CI
        # box can stall both processes; the test is about the end state, not the speed.
        deadline = time.monotonic() + 90
        while (
            httpx.get(f"{second.url}/healthz").status_code != 200
            or httpx.get(f"{first.url}/healthz").status_code != 503
        ):
            assert time.monotonic() < deadline, "no clean handover"
            time.sleep(0.05)
        assert httpx.get(f"{first.url}/livez").json() == {"role": "standby"}
        assert metric(first.url, "desched_demotions_total") == 1
        poll = httpx.post(
            f"{second.url}/v1/poll", json={"worker_id": "w"}, headers=auth(tokens.worker)
        )
        assert poll.status_code == 200 and poll.json()["task_id"] == queued
        stale = httpx.post(
            f"{first.url}/v1/poll", json={"worker_id": "w"}, headers=auth(tokens.worker)
        )
        assert stale.status_code == 503
    finally:
        first.stop()
        second.stop()


def test_a_second_service_on_the_same_sqlite_file_is_refused_in_one_line(tmp_path: Path) -> None:
    db = str(tmp_path / "state.db")
    add_principals(db)
    first = Service(db=db, log_dir=tmp_path / "logs").start()
    try:
        env = {**os.environ, "DESCHED_DB": db, "DESCHED_PREDICTOR_REGISTRY": "none"}
        second = subprocess.run(
            serve_argv(free_port()),
            check=False,
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        first.stop()
    assert second.returncode == 2
    assert second.stderr.strip().count("\n") == 0
    assert "another desched service already owns" in second.stderr


def worker_requests(answers: dict[str, list[Any]]) -> Any:
    """An httpx transport that answers each address from its list, in order; an exception
    in the list is raised (a connection error)."""

    def handle(request: httpx.Request) -> httpx.Response:
        base = f"{request.url.scheme}://{request.url.host}:{request.url.port}"
        answer = answers[base].pop(0)
        if isinstance(answer, Exception):
            raise answer
        return httpx.Response(answer[0], json=answer[1])

    return httpx.MockTransport(handle)


LEASE = {
    "task_id": "t1", "lease_id": "l1", "lease_expires_at": 1.0, "attempt": 1, "tenant": "a",
    "task_type": "extract", "document_ref": "", "doc_bytes": None, "pages": None,
    "mem_mb": None, "predicted_s": None, "predicted_mem_mb": None,
}


def test_the_worker_client_fails_over_between_addresses_and_backs_off_until_one_serves() -> None:
    a, b = "http://a.test:1", "http://b.test:2"
    refused = httpx.ConnectError("refused")
    answers: dict[str, list[Any]] = {
        a: [refused, refused, refused],
        b: [(503, {"detail": "standby"}), (503, {"detail": "standby"}), (200, LEASE),
            (204, {})],
    }
    client = ServiceClient(f"{a}, {b}", "tok", "w", transport=worker_requests(answers))
    lease = client.poll(None)
    assert lease is not None and lease.task_id == "t1"
    assert answers[a] == [] and answers[b] == [(204, {})]  # three rounds, the last served
    assert client.urls[client.current] == b  # the address that answered goes first now
    assert client.heartbeat(lease).value == "ended"  # 204: not extended
    gone = ServiceClient([a], "tok", "w", retry_for_s=0.3,
                         transport=worker_requests({a: [refused] * 100}))
    with pytest.raises(ServiceError, match="no service answered"):
        gone.poll(None)
