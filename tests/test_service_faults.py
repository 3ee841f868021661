"""Fault injection beyond SIGKILL: every acknowledged (2xx) task is stored and ends done,
none is completed twice, and no refusal stored anything.

- SQLite, in this process (fast): the database fills up (``PRAGMA max_page_count`` on the
  writer's connection) and the database file turns read-only (``chattr +i`` on the file and
  its WAL: the kernel refuses every write, even root's). Writes get a 503, nothing a client
  was not acknowledged is stored, memory never runs ahead of the database, and the service
  serves again once the disk has room or the file is writable. A commit fails and so
  does every reload of memory after it (the database went away): until a reload succeeds
  every request gets 503, none an answer made from memory half reset. A stderr that nobody
  reads (a pipe holds about 64 KiB) never blocks the service's logging: past its queue's
  room records are dropped, and counted in the log once it is read again.
- ``desched serve`` processes (slow, e2e): the service paused (SIGSTOP) past its leases and
  resumed (SIGCONT) with workers still going; PostgreSQL sessions terminated
  (``pg_terminate_backend``) while the writer is inside a transaction, under load;
  PostgreSQL restarted under load (a clean ``fast`` stop, and an ``immediate`` one, as a
  crash, with ``durability=machine``); the high-availability failover while the writer is
  mid-batch. PostgreSQL tests run on a server of their own (``ThrowawayPostgres``), never
  the shared one.
"""

from __future__ import annotations

import logging
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.reliability import Audit, ThrowawayPostgres, Traffic, audit, pg_bin, stored_tasks
from tests.test_service import PipeDrain, Service, add_principals, auth, free_port, task
from tests.test_service_ha import metric
from tests.test_service_stateful import InProcess, after_first_sweep

CLEAN = Audit(acknowledged=0, lost=0, not_done=0, completed_twice=0, logged_twice=0,
              batch_sizes=frozenset({3}))


def clean(a: Audit) -> Audit:
    """``a`` with the acknowledged count of ``CLEAN``: what every run must end with."""
    return Audit(0, a.lost, a.not_done, a.completed_twice, a.logged_twice, a.batch_sizes)


# SQLite, in process ----------------------------------------------------------------------


def submits_until_refused(svc: InProcess, rounds: int) -> tuple[dict[str, list[str]], list[str]]:
    """Submit ``rounds`` keyed batches of 20 tasks: acknowledged ids per key, refused keys;
    every answer is 201 or 503."""
    acked: dict[str, list[str]] = {}
    refused: list[str] = []
    for _ in range(rounds):
        key = f"k{uuid.uuid4().hex[:8]}"
        r = svc.client.post("/v1/tasks", json=[task(document_ref="x" * 500)] * 20,
                            headers={**auth(svc.tokens.tenant_a), "Idempotency-Key": key})
        assert r.status_code in (201, 503), r.text
        if r.status_code == 201:
            acked[key] = r.json()["task_ids"]
        else:
            assert r.json()["detail"]
            refused.append(key)
    return acked, refused


def assert_stored_exactly(svc: InProcess, acked: dict[str, list[str]], refused: list[str]) -> None:
    """The database holds every acknowledged batch and nothing of a refused one, and the
    service's memory (rebuilt, not waiting for a reload) counts what the database holds."""
    stored = stored_tasks(svc.db)
    by_key: dict[str, list[str]] = {}
    for task_id, (_, key) in stored.items():
        by_key.setdefault(str(key), []).append(task_id)
    for key, ids in acked.items():
        assert sorted(by_key.get(key, [])) == sorted(ids), f"acknowledged batch {key} not stored"
    assert not set(refused) & set(by_key), "a refused submit was stored"
    health = svc.client.get("/healthz").json()
    queued = sum(state == "queued" for state, _ in stored.values())
    assert health["queued"] == queued and health["status"] in ("ok", "degraded")
    assert health["detail"] != "reloading state from the database"


def test_a_full_sqlite_database_refuses_writes_with_503_and_acknowledges_only_what_it_stored(
    tmp_path: Path,
) -> None:
    svc = InProcess(tmp_path)
    try:
        conn = svc.scheduler.write_store.conn
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages + 12}")
        acked, refused = submits_until_refused(svc, rounds=12)
        assert acked and refused, (len(acked), len(refused))
        assert_stored_exactly(svc, acked, refused)
        # A retry of a refused submit with its key is refused alike, and stores nothing.
        again = svc.client.post("/v1/tasks", json=[task(document_ref="x" * 500)] * 20,
                                headers={**auth(svc.tokens.tenant_a),
                                         "Idempotency-Key": refused[0]})
        assert again.status_code == 503
        conn.execute("PRAGMA max_page_count = 1073741823")  # room again
        more, none = submits_until_refused(svc, rounds=2)
        assert len(more) == 2 and none == []
        retried = svc.client.post("/v1/tasks", json=[task(document_ref="x" * 500)] * 20,
                                  headers={**auth(svc.tokens.tenant_a),
                                           "Idempotency-Key": refused[0]})
        assert retried.status_code == 201
        acked.update(more, **{refused[0]: retried.json()["task_ids"]})
        assert_stored_exactly(svc, acked, refused[1:])
        assert svc.client.get("/healthz").json()["status"] == "ok"
    finally:
        svc.close()


def test_requests_whose_database_reads_stall_hold_up_neither_polls_nor_healthz(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # They did: a keyed submit's read ran on the event loop under the scheduler's lock, so a
    # PostgreSQL paused for 3 s held /healthz for 2.98 s and every poll with it; a token not
    # cached (here an unknown one), a task's view and the state of a task a late completion
    # names were read on the event loop too.
    svc = InProcess(tmp_path)
    sched, a, w = svc.scheduler, auth(svc.tokens.tenant_a), auth(svc.tokens.worker)
    release = threading.Event()
    entered = {name: threading.Event() for name in ("key", "token", "view", "state")}

    def stalling(name: str, read: Any) -> Any:
        def stalled(*args: Any) -> Any:
            entered[name].set()
            release.wait(30)
            return read(*args)

        return stalled

    answers: dict[str, httpx.Response] = {}
    ids: list[str] = []
    done: dict[str, Any] = {}
    requests = [
        lambda: answers.update(keyed=svc.client.post(
            "/v1/tasks", json=task(), headers={**a, "Idempotency-Key": "k1"})),
        lambda: answers.update(unknown=svc.client.post(
            "/v1/poll", json={"worker_id": "x"}, headers=auth("not-a-token"))),
        lambda: answers.update(view=svc.client.get(f"/v1/tasks/{ids[0]}", headers=a)),
        lambda: answers.update(late=svc.client.post(
            f"/v1/tasks/{ids[0]}/complete", json=done, headers=w)),
    ]
    threads = [threading.Thread(target=r) for r in requests]
    valve = threading.Timer(20, release.set)  # were the loop blocked, this would free it
    try:
        # The tenant's and the worker's tokens are known from their first requests, as in any
        # running fleet; the housekeeper's first sweep after the start drops the cache, so
        # those requests come after it.
        after_first_sweep(sched)
        created = svc.client.post("/v1/tasks", json=[task(), task()], headers=a)
        assert created.status_code == 201
        ids.extend(created.json()["task_ids"])
        lease = svc.client.post("/v1/poll", json={"worker_id": "w"}, headers=w).json()
        assert lease["task_id"] == ids[0]
        done.update(lease_id=lease["lease_id"], duration_s=0.1)
        complete = svc.client.post(f"/v1/tasks/{ids[0]}/complete", json=done, headers=w)
        assert complete.status_code == 204  # the late one repeats it
        monkeypatch.setattr(sched.keys, "stored", stalling("key", sched.keys.stored))
        monkeypatch.setattr(sched.store, "task_state", stalling("state", sched.store.task_state))
        monkeypatch.setattr(sched.tokens, "principal", stalling("token", sched.tokens.principal))
        monkeypatch.setattr(sched, "task_view", stalling("view", sched.task_view))
        valve.start()
        for t in threads:
            t.start()
        stalled_all = all(e.wait(10) for e in entered.values())
        health = svc.client.get("/healthz")
        poll = svc.client.post("/v1/poll", json={"worker_id": "w"}, headers=w)
        answered_during_stall = not release.is_set()
        release.set()
        for t in threads:
            t.join(30)
    finally:
        release.set()
        valve.cancel()
        svc.close()
    assert stalled_all and answered_during_stall, "a stalled read held up the event loop"
    assert (health.status_code, health.json()["queued"]) == (200, 1)
    assert poll.status_code == 200, poll.text
    assert answers["keyed"].status_code == 201, answers["keyed"].text
    assert answers["unknown"].status_code == 401, answers["unknown"].text
    assert answers["view"].status_code == 200 and answers["view"].json()["state"] == "done"
    assert answers["late"].status_code == 409, answers["late"].text
    assert "has no current lease (state done)" in answers["late"].json()["detail"]


def test_memory_that_failed_to_reload_after_a_failed_commit_answers_503_until_it_reloads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc = InProcess(tmp_path)
    sched, a, w = svc.scheduler, auth(svc.tokens.tenant_a), auth(svc.tokens.worker)
    try:
        assert svc.client.post("/v1/tasks", json=[task(), task()], headers=a).status_code == 201
        lease = svc.client.post("/v1/poll", json={"worker_id": "w"}, headers=w).json()
        done = {"lease_id": lease["lease_id"], "duration_s": 0.1}
        # The database goes away: the next commit fails, and so does every read that would
        # reload memory (the writer's rebuild, the housekeeper's retries) until it is back.
        reads = [0]
        latest_time = sched.store.latest_time

        def unreachable() -> float:
            reads[0] += 1
            raise sqlite3.OperationalError("disk I/O error (injected)")

        def fails_once(sql: str, rows: Any) -> int:
            monkeypatch.undo()
            monkeypatch.setattr(sched.store, "latest_time", unreachable)
            raise sqlite3.OperationalError("disk I/O error (injected)")

        monkeypatch.setattr(sched.write_store, "executemany", fails_once)
        refused = svc.client.post("/v1/tasks", json=task(), headers=a)
        assert refused.status_code == 503, refused.text
        with pytest.raises(sqlite3.OperationalError):
            sched.sweep()  # a housekeeper's retry of the rebuild, failing half way
        assert reads[0] >= 2
        health = svc.client.get("/healthz").json()
        assert (health["status"], health["queued"], health["leased"]) == ("degraded", 0, 0)
        # Memory holds nothing now: no answer may come from it.
        poll = svc.client.post("/v1/poll", json={"worker_id": "w2"}, headers=w)
        assert poll.status_code == 503 and poll.headers["Retry-After"] == "1", poll.text
        complete = svc.client.post(f"/v1/tasks/{lease['task_id']}/complete", json=done,
                                   headers=w)
        assert complete.status_code == 503, complete.text
        again = svc.client.post("/v1/tasks", json=task(), headers=a)
        assert again.status_code == 503, again.text
        assert health["detail"] == "reloading state from the database"
        monkeypatch.setattr(sched.store, "latest_time", latest_time)  # the database is back
        sched.sweep()
        # Memory is back; the last write the database was asked to take still failed.
        health = svc.client.get("/healthz").json()
        assert (health["status"], health["queued"], health["leased"]) == ("degraded", 1, 1)
        assert health["detail"] == (
            "the database did not take the last write: disk I/O error (injected)"
        )
        complete = svc.client.post(f"/v1/tasks/{lease['task_id']}/complete", json=done,
                                   headers=w)
        assert complete.status_code == 204, complete.text
        health = svc.client.get("/healthz").json()
        assert (health["status"], health["detail"], health["leased"]) == ("ok", None, 0)
        poll = svc.client.post("/v1/poll", json={"worker_id": "w2"}, headers=w)
        assert poll.status_code == 200 and poll.json()["task_id"] != lease["task_id"]
        assert sorted(state for state, _ in stored_tasks(svc.db).values()) == ["done", "leased"]
    finally:
        monkeypatch.undo()
        svc.close()

def test_a_stderr_that_nobody_reads_never_blocks_the_services_logging(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # It did: a harness that read the service's stderr only at exit left it blocked in a
    # logging call under the scheduler's lock and on the event loop, answering nothing.
    from desched.cli.service import _log_with_levels

    service_log = logging.getLogger("desched.service")
    monkeypatch.setattr(service_log, "handlers", [])
    monkeypatch.setattr(service_log, "propagate", False)
    read_end, write_end = os.pipe()
    stuck = os.fdopen(write_end, "w")
    monkeypatch.setattr(sys, "stderr", stuck)
    log = _log_with_levels()
    drain = PipeDrain(os.fdopen(read_end, "rb"), keep_bytes=64 << 20)
    scheduler_lock, stop = threading.Lock(), threading.Event()

    def recovering() -> None:
        with scheduler_lock:  # as the writer's recovery logs
            for j in range(20_000):
                if stop.is_set():
                    return
                service_log.error("commit failed, rebuilding state (%d): %s", j, "x" * 200)

    logging_thread = threading.Thread(target=recovering, daemon=True)
    try:
        logging_thread.start()
        logging_thread.join(30)
        assert not logging_thread.is_alive(), "logging blocked on a stderr nobody reads"
        assert log is not None
        dropped = log.handler.dropped_total
        assert dropped > 0
        drain.start()  # someone reads stderr again
        deadline = time.monotonic() + 30
        while log.records.qsize() > 0:
            assert time.monotonic() < deadline, "the log thread never wrote its queue"
            time.sleep(0.01)
        service_log.error("after the stall")
        log.close(timeout_s=30)
    finally:
        stop.set()
        if drain.ident is None:
            drain.start()
        logging_thread.join(30)
        stuck.close()
    lines = drain.text().splitlines()
    # Every dropped record is counted in a notice; there is more than one notice when the
    # log thread takes a record off the full queue while the logging goes on.
    notice = re.compile(r"WARNING desched\.service: (\d+) log records dropped: the log queue "
                        r"was full \(stderr not read\)$")
    notices = [int(m[1]) for line in lines if (m := notice.search(line))]
    assert notices and sum(notices) == dropped, (notices, dropped)
    assert lines[-1].endswith("ERROR desched.service: after the stall")
    assert len(lines) == 20_000 - dropped + len(notices) + 1

def chattr(flag: str, *paths: Path) -> None:
    subprocess.run(["chattr", flag, *map(str, paths)], check=True, capture_output=True)


@pytest.fixture
def immutable_files(tmp_path: Path) -> Iterator[list[Path]]:
    """Files the test makes immutable (``chattr +i``), made mutable again afterwards."""
    probe = tmp_path / "probe"
    probe.touch()
    try:
        chattr("+i", probe)
        chattr("-i", probe)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("chattr +i is not allowed here (needs CAP_LINUX_IMMUTABLE and ext4)")
    files: list[Path] = []
    try:
        yield files
    finally:
        for path in files:
            chattr("-i", path)


def test_a_read_only_sqlite_file_refuses_writes_with_503_and_serves_again_once_writable(
    tmp_path: Path, immutable_files: list[Path]
) -> None:
    svc = InProcess(tmp_path)
    try:
        before, _ = submits_until_refused(svc, rounds=2)
        assert len(before) == 2
        # Never the -shm file: SQLite maps it, and a write to an immutable mapping is SIGBUS.
        immutable_files.extend([Path(svc.db), Path(svc.db + "-wal")])
        chattr("+i", *immutable_files)
        acked, refused = submits_until_refused(svc, rounds=3)
        assert acked == {} and len(refused) == 3
        poll = svc.client.post("/v1/poll", json={"worker_id": "w"}, headers=auth(svc.tokens.worker))
        assert poll.status_code == 503, poll.text
        chattr("-i", *immutable_files)
        immutable_files.clear()
        after, none = submits_until_refused(svc, rounds=2)
        assert len(after) == 2 and none == []
        assert_stored_exactly(svc, {**before, **after}, refused)
        served = 0
        while (p := svc.client.post("/v1/poll", json={"worker_id": "w"},
                                    headers=auth(svc.tokens.worker))).status_code == 200:
            lease = p.json()
            done = svc.client.post(f"/v1/tasks/{lease['task_id']}/complete",
                                   json={"lease_id": lease["lease_id"], "duration_s": 0.1},
                                   headers=auth(svc.tokens.worker))
            assert done.status_code == 204, done.text
            served += 1
        assert served == 80 and p.status_code == 204
    finally:
        svc.close()


def test_a_postgresql_server_that_cannot_be_reached_is_a_503_to_retry_and_one_line_at_start(
) -> None:
    # A request that finds the server down (a restart) reconnects through the same path as
    # a start-up: a 503 for the client to retry, not a 400, and still one line for the CLI.
    pytest.importorskip("psycopg")
    from desched.errors import DeschedError
    from desched.service.answers import refusal
    from desched.service.errors import Unavailable
    from desched.service.store import Store

    with pytest.raises(Unavailable, match="cannot connect to PostgreSQL") as caught:
        Store(f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere")
    assert isinstance(caught.value, DeschedError) and "\n" not in str(caught.value)
    assert refusal(caught.value).status_code == 503


# Processes ------------------------------------------------------------------------------


def settle_traffic(traffic: Traffic, need: int = 1, timeout_s: float = 60.0) -> None:
    """Wait until ``traffic`` has ``need`` acknowledged tasks and one completion."""
    deadline = time.monotonic() + timeout_s
    while len(traffic.accepted) < need or not traffic.completions:
        assert time.monotonic() < deadline, "the traffic never got going"
        assert not traffic.errors, traffic.errors[:3]
        time.sleep(0.05)


def finish(traffic: Traffic, service: Service, db: str, log_dir: Path) -> Audit:
    """Drain ``service``'s queue, then audit; the audit's figures are printed. A queue that
    never drains fails with what the traffic saw and the first lines of the service's log
    that are not about requests (where the trouble started)."""
    try:
        traffic.drain(service.url)
    except AssertionError as exc:
        service.stop()
        notes = [line for line in service.stderr().splitlines() if " 127.0.0.1:" not in line]
        log = "\n".join(notes[:60])
        raise AssertionError(f"{exc}\n{dict(traffic.statuses)}\nservice log:\n{log}") from None
    result = audit(db, traffic, log_dir)
    print(result, dict(traffic.statuses), f"stalls {len(traffic.stalls)}")
    return result


@pytest.mark.slow
@pytest.mark.e2e
def test_a_service_paused_past_its_leases_loses_nothing_and_completes_nothing_twice(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "state.db")
    tokens = add_principals(db)
    service = Service(db=db, log_dir=tmp_path / "logs", lease_s=1.0).start()
    traffic = Traffic(tokens, [service.url])
    assert service.proc is not None
    stopped = False
    try:
        traffic.start()
        settle_traffic(traffic, need=30)
        # A worker of its own holds a lease across the pause.
        with httpx.Client(base_url=service.url, timeout=30) as http:
            w2 = auth(tokens.worker2)
            while (r := http.post("/v1/poll", json={"worker_id": "slow"}, headers=w2)
                   ).status_code != 200:
                time.sleep(0.02)
            held = r.json()
            service.proc.send_signal(signal.SIGSTOP)
            stopped = True
            time.sleep(2.5)  # past every lease's expiry (lease_s 1)
            service.proc.send_signal(signal.SIGCONT)
            stopped = False
            beat = http.post(f"/v1/tasks/{held['task_id']}/heartbeat",
                             json={"lease_id": held["lease_id"]}, headers=w2)
            late = http.post(f"/v1/tasks/{held['task_id']}/complete",
                             json={"lease_id": held["lease_id"], "duration_s": 1.0}, headers=w2)
        time.sleep(1.0)  # the workers keep going after the pause
        result = finish(traffic, service, db, tmp_path / "logs")
        expiries = metric(service.url, "desched_lease_expiries_total")
    finally:
        traffic.stop()
        if stopped:
            service.proc.send_signal(signal.SIGCONT)
        service.stop()
    # The lease expired during the pause: 409, or 403 when a worker's poll buffered during
    # the pause was answered first and got the task.
    assert {beat.status_code, late.status_code} <= {403, 409}, (beat.text, late.text)
    assert expiries >= 1
    assert not traffic.errors and not traffic.stalls, (traffic.errors[:3], traffic.stalls[:3])
    assert stored_tasks(db)[held["task_id"]][0] == "done"
    assert clean(result) == CLEAN and result.acknowledged > 30


@pytest.fixture(scope="module")
def pg() -> Iterator[ThrowawayPostgres]:
    """A PostgreSQL server of this module's own (skipped without the server binaries)."""
    pytest.importorskip("psycopg")
    if pg_bin() is None or (shutil.which("runuser") is None and _root()):
        pytest.skip("no PostgreSQL server binaries to start a throw-away server")
    server = ThrowawayPostgres()
    try:
        yield server
    finally:
        server.stop()


def _root() -> bool:
    import os

    return os.geteuid() == 0


def slow_writes(db: str, per_row_s: float) -> None:
    """Make every row the service writes take ``per_row_s`` longer (a trigger), so that the
    writer spends most of its time inside a transaction."""
    import psycopg

    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "CREATE OR REPLACE FUNCTION desched_slow() RETURNS trigger AS $$ BEGIN "
            f"PERFORM pg_sleep({per_row_s}); RETURN NEW; END $$ LANGUAGE plpgsql"
        )
        conn.execute("CREATE TRIGGER desched_slow BEFORE INSERT OR UPDATE ON tasks "
                     "FOR EACH ROW EXECUTE FUNCTION desched_slow()")


def writer_in_transaction(db: str, timeout_s: float = 10.0) -> int:
    """Wait until the session holding the writer lock is inside a transaction; its pid."""
    import psycopg

    deadline = time.monotonic() + timeout_s
    with psycopg.connect(db, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT a.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 "
                "AND a.datname = current_database() AND a.xact_start IS NOT NULL "
                "AND a.state <> 'idle'"
            ).fetchone()
            if row is not None:
                return int(row[0])
            time.sleep(0.001)
    raise AssertionError("the writer was never seen inside a transaction")


def pg_service(pg: ThrowawayPostgres, tmp_path: Path, **env: str) -> tuple[Service, Traffic, str]:
    db = pg.fresh_database()
    tokens = add_principals(db)
    service = Service(db=db, log_dir=tmp_path / "logs", lease_s=2.0, env=env).start()
    return service, Traffic(tokens, [service.url]), db


@pytest.mark.slow
@pytest.mark.e2e
def test_postgresql_sessions_terminated_mid_transaction_lose_no_acknowledged_task(
    pg: ThrowawayPostgres, tmp_path: Path
) -> None:
    import psycopg

    service, traffic, db = pg_service(pg, tmp_path)
    terminated = 0
    try:
        slow_writes(db, 0.003)
        traffic.start()
        settle_traffic(traffic)
        for _ in range(6):
            pid = writer_in_transaction(db)
            with psycopg.connect(db, autocommit=True) as conn:
                conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
            terminated += 1
            time.sleep(0.4)
        time.sleep(1.0)
        result = finish(traffic, service, db, tmp_path / "logs")
    finally:
        traffic.stop()
        service.stop()
    print(f"terminated {terminated} writer sessions inside a transaction")
    assert not traffic.errors and not traffic.stalls, (traffic.errors[:3], traffic.stalls[:3])
    assert clean(result) == CLEAN and result.acknowledged > 0
    assert traffic.statuses["submit 503"] + traffic.statuses["complete 503"] > 0


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.parametrize(("mode", "durability"), [("fast", "process"), ("immediate", "machine")])
def test_postgresql_restarted_under_load_loses_no_acknowledged_task(
    pg: ThrowawayPostgres, tmp_path: Path, mode: str, durability: str
) -> None:
    service, traffic, db = pg_service(pg, tmp_path, DESCHED_DURABILITY=durability)
    try:
        traffic.start()
        settle_traffic(traffic)
        for _ in range(2):
            pg.restart(mode)
            time.sleep(1.0)
        result = finish(traffic, service, db, tmp_path / "logs")
        health = httpx.get(f"{service.url}/healthz").json()
    finally:
        traffic.stop()
        service.stop()
    assert not traffic.errors and not traffic.stalls, (traffic.errors[:3], traffic.stalls[:3])
    assert clean(result) == CLEAN and result.acknowledged > 0
    assert (health["status"], health["role"]) == ("ok", "active")


@pytest.mark.slow
@pytest.mark.e2e
def test_a_stalled_postgresql_holds_up_neither_healthz_nor_the_rest_and_loses_nothing(
    pg: ThrowawayPostgres, tmp_path: Path
) -> None:
    # Every server process stopped for 3 s under load (keyed submits, polls, completions):
    # /healthz answers throughout, and once the server goes on everything drains. Before the
    # keyed submit's read left the event loop, /healthz waited for the whole stall.
    service, traffic, db = pg_service(pg, tmp_path, DESCHED_DURABILITY="machine")
    probes: list[int] = []
    try:
        traffic.start()
        settle_traffic(traffic, need=30)
        with pg.paused():
            deadline = time.monotonic() + 3.0
            while time.monotonic() < deadline:
                # a timeout (the event loop held up) fails the test before the server resumes
                probes.append(httpx.get(f"{service.url}/healthz", timeout=5.0).status_code)
                time.sleep(0.1)
        result = finish(traffic, service, db, tmp_path / "logs")
    finally:
        traffic.stop()
        service.stop()
    assert len(probes) >= 10 and set(probes) == {200}, probes
    assert not traffic.errors and not traffic.stalls, (traffic.errors[:3], traffic.stalls[:3])
    assert clean(result) == CLEAN and result.acknowledged > 30


@pytest.mark.slow
@pytest.mark.e2e
def test_a_service_idle_through_a_postgresql_restart_takes_the_next_work_at_the_first_try(
    pg: ThrowawayPostgres, tmp_path: Path
) -> None:
    # The quiet path: nobody writes while the server restarts, so only the writer's idle
    # rounds (every 0.25 s) find the session gone; they must reconnect and take the writer
    # lock back before work arrives, leaving no stale session for the first write to fail on.
    from tests.test_service_ha import lock_holder

    service, traffic, db = pg_service(pg, tmp_path)
    tokens = traffic.tokens
    try:
        with httpx.Client(base_url=service.url, timeout=30) as http:
            first = http.post("/v1/tasks", json=[task()], headers=auth(tokens.tenant_a))
            assert first.status_code == 201
            before = lock_holder(db)
            pg.restart("fast")
            deadline = time.monotonic() + 30
            while (holder := lock_holder(db)) in (None, before):
                assert time.monotonic() < deadline, "the idle service never took the lock back"
                time.sleep(0.05)
            time.sleep(1.0)  # a few more idle rounds: their checks get through
            health = http.get("/healthz").json()
            keyed = http.post("/v1/tasks", json=[task()], headers={
                **auth(tokens.tenant_a), "Idempotency-Key": "after-the-restart"})
            worker = auth(tokens.worker)
            leases = [http.post("/v1/poll", json={"worker_id": "w"}, headers=worker)
                      for _ in range(2)]
            done = [http.post(f"/v1/tasks/{r.json()['task_id']}/complete", headers=worker,
                              json={"lease_id": r.json()["lease_id"], "duration_s": 0.1})
                    for r in leases if r.status_code == 200]
    finally:
        service.stop()
    assert (health["status"], health["detail"]) == ("ok", None), health
    assert holder is not None and holder != before
    assert keyed.status_code == 201, keyed.text
    assert [r.status_code for r in leases] == [200, 200], [r.text for r in leases]
    assert [r.status_code for r in done] == [204, 204], [r.text for r in done]
    assert sorted(state for state, _ in stored_tasks(db).values()) == ["done", "done"]


RESTART_ROUNDS = int(os.environ.get("DESCHED_PG_RESTART_ROUNDS", "3"))
"""Rounds of ``test_postgresql_restarted_at_random_moments_...``; more for a soak."""


@pytest.mark.slow
@pytest.mark.e2e
def test_postgresql_restarted_at_random_moments_under_load_serves_again_every_time(
    pg: ThrowawayPostgres, tmp_path: Path
) -> None:
    # One service through RESTART_ROUNDS rounds of traffic, each with one to three restarts
    # (fast or immediate) at random moments, some while the service is still reconnecting
    # from the one before; every round must drain, and lose and repeat nothing. Run this
    # way 23 rounds reproduced, once, the CI failure of 2026-12-06: a psycopg session left
    # unusable, every write 503 for a minute while /healthz said ok.
    seed = int(os.environ.get("DESCHED_PG_RESTART_SEED", str(time.time_ns() % 10_000)))
    rng = random.Random(seed)
    service, first, db = pg_service(pg, tmp_path, DESCHED_DURABILITY="machine")
    tokens = first.tokens
    plans = []
    try:
        for _ in range(RESTART_ROUNDS):
            traffic = Traffic(tokens, [service.url], key_prefix=f"round{len(plans)}-")
            traffic.start()
            settle_traffic(traffic)
            plan = [(rng.choice(["fast", "immediate"]), rng.choice([0.0, 0.05, 0.2, 1.0]) *
                     rng.random()) for _ in range(rng.randint(1, 3))]
            plans.append(plan)
            for mode, pause_s in plan:
                pg.restart(mode)
                time.sleep(pause_s)
            result = finish(traffic, service, db, tmp_path / "logs")
            assert not traffic.errors and not traffic.stalls, (traffic.errors[:3], plan)
            assert clean(result) == CLEAN and result.acknowledged > 0, plan
    finally:
        service.stop()
    print(f"seed {seed}: {len(plans)} rounds drained, restarts {plans}")


RESTARTS = 30


@pytest.mark.slow
@pytest.mark.e2e
def test_a_store_committing_through_postgresql_restarts_commits_again_after_each_one(
    pg: ThrowawayPostgres,
) -> None:
    # The store of the writer thread, committing batches (``executemany`` in a transaction,
    # as the writer does) while the server restarts RESTARTS times: after each restart it
    # commits again, on a session that holds the writer lock. A ``fast`` stop's
    # "terminating connection" error can end an ``executemany`` in a way that leaves psycopg
    # in pipeline mode, neither closed nor broken (about one restart in thirty here); before
    # the store replaced such a session it never committed again.
    from psycopg import pq

    from desched.service.errors import Unavailable
    from desched.service.store import Store, db_errors

    db = pg.fresh_database()
    store = Store(db, durability="machine")  # an immediate stop loses no commit
    store.migrate()
    assert store.try_writer_lock()
    store.execute("CREATE TABLE beats (k INTEGER PRIMARY KEY, n INTEGER NOT NULL)")
    store.execute("INSERT INTO beats SELECT g, 0 FROM generate_series(0, 63) AS g")
    commits = [0]
    rows_committed = [0]
    rows_unsure = [0]  # of failed commits, which may have committed before the failure
    left_unusable = [0]  # sessions psycopg left neither closed nor broken, yet unusable
    failures: Counter[str] = Counter()
    stop = threading.Event()

    def commit_batches() -> None:
        rows = 1
        while not stop.is_set():
            rows = rows % 64 + 1
            try:
                with store.transaction():
                    store.executemany("UPDATE beats SET n = n + 1 WHERE k = ?",
                                      [(k,) for k in range(rows)])
                commits[0] += 1
                rows_committed[0] += rows
            except (Unavailable, *db_errors()) as exc:
                failures[str(exc).strip().splitlines()[0][:60]] += 1
                rows_unsure[0] += rows
                pgconn = store.conn.pgconn
                if not (store.conn.closed or store.conn.broken) and (
                    pgconn.pipeline_status != pq.PipelineStatus.OFF
                    or pgconn.transaction_status == pq.TransactionStatus.ACTIVE
                ):
                    left_unusable[0] += 1
                time.sleep(0.01)

    thread = threading.Thread(target=commit_batches)
    thread.start()
    try:
        for r in range(RESTARTS):
            pg.restart("fast" if r % 3 else "immediate")
            after = commits[0]
            deadline = time.monotonic() + 30
            while commits[0] < after + 2:
                assert time.monotonic() < deadline, (
                    f"no commit in 30 s after restart {r + 1}: {dict(failures)}"
                )
                time.sleep(0.01)
    finally:
        stop.set()
        thread.join(timeout=30)
    try:
        pid = int(store.execute("SELECT pg_backend_pid()").fetchone()[0])
        holder = store.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2 "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        ).fetchall()
        total = store.execute("SELECT sum(n) FROM beats").fetchone()[0]
    finally:
        store.close()
    print(f"{commits[0]} commits through {RESTARTS} restarts, {left_unusable[0]} sessions left "
          f"unusable; failed tries: {dict(failures)}")
    assert store.holds_writer_lock and holder == [(pid,)]
    assert rows_committed[0] <= total <= rows_committed[0] + rows_unsure[0]


@pytest.mark.slow
@pytest.mark.e2e
def test_the_standby_takes_over_without_loss_when_the_active_dies_mid_batch(
    pg: ThrowawayPostgres, tmp_path: Path
) -> None:
    db = pg.fresh_database()
    tokens = add_principals(db)
    env = {"DESCHED_STANDBY_POLL_S": "0.1"}
    active = Service(db=db, log_dir=tmp_path / "logs", lease_s=1.0, env=env).start()
    standby = Service(db=db, log_dir=tmp_path / "logs", lease_s=1.0, env=env)
    traffic = Traffic(tokens, [active.url])
    takeover: dict[str, Any] = {}
    try:
        standby.start(standby=True)
        traffic.urls.append(standby.url)
        slow_writes(db, 0.005)
        traffic.start()
        settle_traffic(traffic, need=20)
        writer_in_transaction(db)
        active.kill()
        killed_at = time.monotonic()
        while httpx.get(f"{standby.url}/healthz").status_code != 200:
            assert time.monotonic() - killed_at < 60, "the standby never took over"
            time.sleep(0.02)
        takeover["s"] = time.monotonic() - killed_at
        time.sleep(1.0)
        result = finish(traffic, standby, db, tmp_path / "logs")
    finally:
        traffic.stop()
        active.stop()
        standby.stop()
    print(f"takeover {takeover['s']:.2f} s after a SIGKILL mid-batch")
    assert not traffic.errors and not traffic.stalls, (traffic.errors[:3], traffic.stalls[:3])
    assert clean(result) == CLEAN and result.acknowledged > 20
