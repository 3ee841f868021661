"""SIGTERM stops ``desched serve`` within a few seconds whatever its writer's state (issue 18).

A real subprocess on SQLite and PostgreSQL. The writer is blocked on a database lock that
the test holds (SQLite: a ``BEGIN IMMEDIATE`` of another connection; PostgreSQL: ``LOCK
TABLE tasks IN EXCLUSIVE MODE``, which lets reads through) while a submit waits on its
commit; then SIGTERM. The submit is answered 503 with when to retry, the process exits,
nothing was written, and the retry with the same Idempotency-Key on a restarted service
creates the task exactly once. Also over HTTP: a row changed behind the service's back is
answered 503, logged at ERROR with its evidence, counted, and served past.
"""

from __future__ import annotations

import re
import signal
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests import test_service
from tests.test_service import Backend, Service, add_principals, auth

backend = test_service.backend  # the fixture: SQLite, and PostgreSQL when one answers

GRACE_S = 1.0
EXIT_BOUND_S = 20.0
"""How long the test waits for the process to exit: a liveness bound, not a measurement
(the exit takes about ``GRACE_S`` plus a second; the report prints it)."""


@contextmanager
def writer_blocked(db: str) -> Iterator[None]:
    """Hold the lock the service's writer needs to commit, until the block ends."""
    if not db.startswith("postgresql"):
        conn = sqlite3.connect(db, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            conn.execute("ROLLBACK")
            conn.close()
        return
    import psycopg

    with psycopg.connect(db, autocommit=True) as pg:
        pg.execute("BEGIN")
        pg.execute("LOCK TABLE tasks IN EXCLUSIVE MODE")
        try:
            yield
        finally:
            pg.execute("ROLLBACK")


def task() -> dict[str, Any]:
    return {"task_type": "extract", "document_ref": "s3://docs/1.pdf"}


def queued(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=5).text
    return sum(float(v) for v in re.findall(r"^desched_queue_length\{[^}]*\} (\S+)$", text, re.MULTILINE))


def stored_tasks(db: str) -> int:
    from desched.service.store import Store

    store = Store(db)
    try:
        return sum(store.count_by_state().values())
    finally:
        store.close()


def test_sigterm_stops_a_service_whose_writer_is_blocked_and_answers_its_waiter_503(
    backend: Backend, tmp_path: Path
) -> None:
    db = backend.fresh()
    tokens = add_principals(db)
    env = {"DESCHED_SHUTDOWN_GRACE_S": str(GRACE_S)}
    service = Service(db=db, log_dir=tmp_path / "logs", env=env).start()
    headers = {**auth(tokens.tenant_a), "Idempotency-Key": "sigterm-1"}
    answers: list[httpx.Response | BaseException] = []

    def submit() -> None:
        try:
            answers.append(
                httpx.post(f"{service.url}/v1/tasks", json=[task()], headers=headers, timeout=60)
            )
        except httpx.HTTPError as exc:
            answers.append(exc)

    try:
        with writer_blocked(db):
            waiting = threading.Thread(target=submit)
            waiting.start()
            deadline = time.monotonic() + 30
            while queued(service.url) < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert queued(service.url) == 1  # in memory, its write queued behind the lock
            assert service.proc is not None
            sent = time.monotonic()
            service.proc.send_signal(signal.SIGTERM)
            service.proc.wait(timeout=EXIT_BOUND_S)
            exited_s = time.monotonic() - sent
            waiting.join(EXIT_BOUND_S)
        print(f"exited {exited_s:.2f} s after SIGTERM (grace {GRACE_S} s)")
        assert len(answers) == 1 and isinstance(answers[0], httpx.Response), answers
        refused = answers[0]
        assert refused.status_code == 503, refused.text
        assert refused.headers["Retry-After"] == "1"
        assert refused.json()["retry"] is True and refused.json()["retry_after_s"] == 1
        assert stored_tasks(db) == 0  # nothing acknowledged, nothing written
    finally:
        service.stop()
    again = Service(db=db, log_dir=tmp_path / "logs2", env=env).start()
    try:
        retried = httpx.post(f"{again.url}/v1/tasks", json=[task()], headers=headers)
        assert retried.status_code == 201 and retried.json()["created"] is True
        replay = httpx.post(f"{again.url}/v1/tasks", json=[task()], headers=headers)
        assert replay.status_code == 200 and replay.json()["task_ids"] == retried.json()["task_ids"]
        assert stored_tasks(db) == 1
    finally:
        again.stop()


def test_sigterm_under_submits_acknowledges_only_what_committed(
    backend: Backend, tmp_path: Path
) -> None:
    """Submits in flight when SIGTERM comes are answered 201 (their rows are there) or 503
    (theirs are not), and the process exits."""
    db = backend.fresh()
    tokens = add_principals(db)
    service = Service(
        db=db, log_dir=tmp_path / "logs", env={"DESCHED_SHUTDOWN_GRACE_S": str(GRACE_S)}
    ).start()
    results: list[tuple[int, list[str]]] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def client(name: str) -> None:
        with httpx.Client(base_url=service.url, timeout=30) as http:
            k = 0
            while not stop.is_set():
                k += 1
                key = {"Idempotency-Key": f"{name}-{k}"}
                try:
                    r = http.post("/v1/tasks", json=[task()] * 3, headers={**auth(tokens.tenant_a), **key})
                except httpx.TransportError:  # the server closed its socket: it is exiting
                    return
                except httpx.HTTPError as exc:
                    errors.append(exc)
                    return
                ids = r.json().get("task_ids", []) if r.status_code == 201 else []
                results.append((r.status_code, ids))

    threads = [threading.Thread(target=client, args=(f"c{j}",)) for j in range(4)]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while not any(code == 201 for code, _ in results) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # submits in flight, some of them waiting on a commit
        assert service.proc is not None
        sent = time.monotonic()
        service.proc.send_signal(signal.SIGTERM)
        service.proc.wait(timeout=EXIT_BOUND_S)
        exited_s = time.monotonic() - sent
        stop.set()
        for t in threads:
            t.join(EXIT_BOUND_S)
    finally:
        stop.set()
        service.stop()
    assert errors == []
    codes = {code for code, _ in results}
    assert codes <= {201, 503}, codes
    acknowledged = [i for code, ids in results if code == 201 for i in ids]
    assert len(acknowledged) > 0
    from desched.service.store import Store

    store = Store(db)
    try:
        rows = {r[0] for r in store.execute("SELECT task_id FROM tasks").fetchall()}
    finally:
        store.close()
    assert set(acknowledged) <= rows  # every 201 committed
    answered = Counter(code for code, _ in results)
    print(
        f"exited {exited_s:.2f} s after SIGTERM; answers {dict(answered)}; "
        f"{len(acknowledged)} tasks acknowledged, {len(rows)} rows"
    )


def test_a_row_changed_behind_a_running_services_back_is_logged_counted_and_served_past(
    backend: Backend, tmp_path: Path
) -> None:
    """Over HTTP: the completion whose lease was changed in the database gets 503 with when
    to retry; the service logs the evidence at ERROR, counts it in ``/metrics``, rebuilds
    memory from the database and goes on serving."""
    db = backend.fresh()
    tokens = add_principals(db)
    service = Service(db=db, log_dir=tmp_path / "logs").start()
    worker = auth(tokens.worker)
    try:
        with httpx.Client(base_url=service.url, timeout=30) as http:
            submitted = http.post("/v1/tasks", json=[task(), task()], headers=auth(tokens.tenant_a))
            assert submitted.status_code == 201
            lease = http.post("/v1/poll", json={"worker_id": "w0"}, headers=worker).json()
            from desched.service.store import Store

            intruder = Store(db)
            intruder.execute(
                "UPDATE tasks SET lease_id = ? WHERE task_id = ?", ("forged", lease["task_id"])
            )
            intruder.close()
            body = {"lease_id": lease["lease_id"], "duration_s": 1.0}
            done = http.post(f"/v1/tasks/{lease['task_id']}/complete", json=body, headers=worker)
            assert done.status_code == 503 and done.headers["Retry-After"] == "1"
            assert done.json()["retry"] is True
            text = http.get("/metrics").text
            assert re.search(r"^desched_state_disagreements_total 1\.0$", text, re.MULTILINE)
            retry = http.post(f"/v1/tasks/{lease['task_id']}/complete", json=body, headers=worker)
            assert retry.status_code == 409  # memory now holds the row as committed
            forged = {"lease_id": "forged", "duration_s": 1.0}
            done = http.post(f"/v1/tasks/{lease['task_id']}/complete", json=forged, headers=worker)
            assert done.status_code == 204
            other = http.post("/v1/poll", json={"worker_id": "w0"}, headers=worker).json()
            body = {"lease_id": other["lease_id"], "duration_s": 1.0}
            done = http.post(f"/v1/tasks/{other['task_id']}/complete", json=body, headers=worker)
            assert done.status_code == 204
        assert service.proc is not None
        service.proc.terminate()
        service.proc.wait(timeout=EXIT_BOUND_S)
        log = service.stderr()
    finally:
        service.stop()
    assert stored_tasks(db) == 2
    (line,) = [x for x in log.splitlines() if "memory and database disagree" in x]
    assert " ERROR desched.service: " in line
    assert "lease_id='forged'" in line and f"lease_id={lease['lease_id']!r}" in line
