"""``desched serve`` over real HTTP on loopback, against SQLite and PostgreSQL.

Each service runs as a real subprocess (uvicorn on 127.0.0.1, a free port), so SIGKILL is
real. PostgreSQL tests use a fresh database per test session (dropped after) on the server at
127.0.0.1:5432, and a fresh schema per service; they are skipped when no server answers.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote

import httpx
import pytest

from desched.cli.service import serve_argv

ROOT = Path(__file__).resolve().parents[1]
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
START_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Tokens:
    tenant_a: str
    tenant_b: str
    worker: str
    worker2: str


class PipeDrain(threading.Thread):
    """Reads a child's pipe until its end, keeping the last ``keep_bytes``, so that the child
    never blocks writing to it. A pipe holds about 64 KiB: a service whose stderr nobody
    reads blocks in its first logging call past that (a database outage logs a few KiB a
    second), holding whatever lock it held, and stops answering."""

    def __init__(self, pipe: IO[bytes], keep_bytes: int = 1 << 20) -> None:
        super().__init__(name="pipe-drain", daemon=True)
        self.pipe = pipe
        self.keep_bytes = keep_bytes
        self.tail = bytearray()
        self.total_bytes = 0

    def run(self) -> None:
        fd = self.pipe.fileno()
        while chunk := os.read(fd, 1 << 16):
            self.total_bytes += len(chunk)
            self.tail += chunk
            if len(self.tail) > 2 * self.keep_bytes:
                del self.tail[: -self.keep_bytes]

    def text(self, timeout_s: float = 10.0) -> str:
        """What was read (its last ``keep_bytes``), once the pipe ended or ``timeout_s``
        passed."""
        self.join(timeout_s)
        return bytes(self.tail[-self.keep_bytes :]).decode(errors="replace")


@dataclass
class Service:
    """One ``desched serve`` subprocess over one database (path or URL); its stderr is read
    all along (``log``)."""

    db: str
    log_dir: Path
    lease_s: float = 5.0
    max_retries: int = 3
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    url: str = ""
    log: PipeDrain | None = None

    def start(self, standby: bool = False) -> Service:
        """Start and wait until ``/healthz`` says it serves (200), or, with ``standby``,
        that it stands by (503, role standby)."""
        port = free_port()
        env = {
            **os.environ,
            "DESCHED_DB": self.db,
            "DESCHED_LEASE_S": str(self.lease_s),
            "DESCHED_MAX_RETRIES": str(self.max_retries),
            "DESCHED_LOG_DIR": str(self.log_dir),
            "DESCHED_SWEEP_S": "0.1",
            "DESCHED_PREDICTOR_REGISTRY": str(self.log_dir / "no-registry"),
            **self.env,
        }
        self.proc = subprocess.Popen(
            serve_argv(port),
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        assert self.proc.stderr is not None
        self.log = PipeDrain(self.proc.stderr)
        self.log.start()
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.stderr()
                raise RuntimeError(f"service exited with {self.proc.returncode}:\n{err}")
            try:
                r = httpx.get(f"{self.url}/healthz", timeout=1.0)
                if r.status_code == 200 and not standby:
                    return self
                if r.status_code == 503 and standby and r.json().get("role") == "standby":
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("service did not start in time")

    def kill(self) -> None:
        """SIGKILL: no shutdown handler runs."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.proc is not None and self.proc.stderr is not None:
            if self.log is not None:
                self.log.join(timeout=10)
            self.proc.stderr.close()

    def stderr(self) -> str:
        """What the service wrote to stderr (its last MiB), once it exited."""
        return self.log.text() if self.log is not None else ""


class Backend:
    """Makes fresh, empty state databases of one kind: SQLite files or PostgreSQL schemas."""

    def __init__(self, kind: str, tmp: Path, pg_database: str | None = None) -> None:
        self.kind = kind
        self.tmp = tmp
        self.pg_database = pg_database

    def fresh(self) -> str:
        name = f"s{uuid.uuid4().hex[:12]}"
        if self.kind == "sqlite":
            return str(self.tmp / name / "desched.db")
        import psycopg

        base = f"postgresql://postgres@127.0.0.1:5432/{self.pg_database}"
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}")
        return f"{base}?options={quote(f'-csearch_path={name}')}"


def psycopg_errors() -> type[Exception]:
    import psycopg

    return psycopg.Error


def pg_available() -> bool:
    try:
        import psycopg

        with psycopg.connect(PG_ADMIN, connect_timeout=3):
            return True
    except (ImportError, OSError, psycopg_errors()):
        return False


@pytest.fixture(scope="session", params=["sqlite", "postgres"])
def backend(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Backend]:
    tmp = tmp_path_factory.mktemp(f"service-{request.param}")
    if request.param == "sqlite":
        yield Backend("sqlite", tmp)
        return
    if not pg_available():
        if os.environ.get("DESCHED_REQUIRE_POSTGRES"):
            pytest.fail("DESCHED_REQUIRE_POSTGRES is set but no PostgreSQL answers at 127.0.0.1:5432")
        pytest.skip("no PostgreSQL server at 127.0.0.1:5432")
    import psycopg

    database = f"desched_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    try:
        yield Backend("postgres", tmp, database)
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


def add_principals(db: str) -> Tokens:
    from desched.service.records import Role
    from desched.service.store import Store

    store = Store(db)
    try:
        store.migrate()
        return Tokens(
            tenant_a=store.add_principal(Role.TENANT, "tenant-a"),
            tenant_b=store.add_principal(Role.TENANT, "tenant-b"),
            worker=store.add_principal(Role.WORKER, "worker-1"),
            worker2=store.add_principal(Role.WORKER, "worker-2"),
        )
    finally:
        store.close()


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass
class Running:
    service: Service
    tokens: Tokens
    client: httpx.Client

    def submit(self, tasks: Any, token: str | None = None, **kw: Any) -> httpx.Response:
        return self.client.post(
            "/v1/tasks", json=tasks, headers={**auth(token or self.tokens.tenant_a), **kw}
        )

    def poll(self, token: str | None = None, worker_id: str = "slot-0") -> httpx.Response:
        return self.client.post(
            "/v1/poll",
            json={"worker_id": worker_id, "free_mem_mb": 1024.0},
            headers=auth(token or self.tokens.worker),
        )

    def drain(self) -> None:
        """Complete everything queued, so a test starts from an empty queue."""
        while (r := self.poll()).status_code == 200:
            lease = r.json()
            self.client.post(
                f"/v1/tasks/{lease['task_id']}/complete",
                json={"lease_id": lease["lease_id"], "duration_s": 0.1},
                headers=auth(self.tokens.worker),
            )


def start_service(backend: Backend, tmp: Path, **kw: Any) -> tuple[Service, Tokens]:
    db = backend.fresh()
    tokens = add_principals(db)
    return Service(db=db, log_dir=tmp / "logs", **kw).start(), tokens


@pytest.fixture(scope="session")
def running(backend: Backend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """One service per backend, shared by the tests that leave its queue empty."""
    service, tokens = start_service(backend, tmp_path_factory.mktemp("shared"))
    try:
        with httpx.Client(base_url=service.url, timeout=10.0) as client:
            yield Running(service, tokens, client)
    finally:
        service.stop()


@pytest.fixture
def svc(running: Running) -> Running:
    running.drain()
    return running


def task(task_type: str = "extract", **kw: Any) -> dict[str, Any]:
    return {"task_type": task_type, "document_ref": "s3://docs/1.pdf", **kw}


# Tenants and workers ------------------------------------------------------------------------


def test_a_submitted_task_is_polled_completed_and_reported_done(svc: Running) -> None:
    r = svc.submit([task(doc_bytes=1000, pages=2), task("ocr_clean"), task("embed")])
    assert r.status_code == 201, r.text
    ids = r.json()["task_ids"]
    assert len(ids) == 3 and r.json()["created"] is True
    single = svc.submit(task("classify"))
    assert single.status_code == 201 and len(single.json()["task_ids"]) == 1
    ids += single.json()["task_ids"]

    view = svc.client.get(f"/v1/tasks/{ids[0]}", headers=auth(svc.tokens.tenant_a)).json()
    assert view["state"] == "queued" and view["tenant"] == "tenant-a"
    assert view["predicted_s"] is None

    done = []
    while (r := svc.poll()).status_code == 200:
        lease = r.json()
        assert lease["tenant"] == "tenant-a" and lease["attempt"] == 1
        hb = svc.client.post(
            f"/v1/tasks/{lease['task_id']}/heartbeat",
            json={"lease_id": lease["lease_id"]},
            headers=auth(svc.tokens.worker),
        )
        assert hb.status_code == 200 and hb.json()["lease_expires_at"] >= lease["lease_expires_at"]
        c = svc.client.post(
            f"/v1/tasks/{lease['task_id']}/complete",
            json={
                "lease_id": lease["lease_id"],
                "duration_s": 1.5,
                "peak_mem_mb": 300.0,
                "result_ref": f"s3://results/{lease['task_id']}.json",
            },
            headers=auth(svc.tokens.worker),
        )
        assert c.status_code == 204, c.text
        done.append(lease["task_id"])
    assert r.status_code == 204
    assert sorted(done) == sorted(ids)

    view = svc.client.get(f"/v1/tasks/{ids[0]}", headers=auth(svc.tokens.tenant_a)).json()
    assert view["state"] == "done" and view["duration_s"] == 1.5
    assert view["result_ref"] == f"s3://results/{ids[0]}.json"
    assert view["end_s"] >= view["start_s"] >= view["submit_s"]

    again = svc.client.post(
        f"/v1/tasks/{ids[0]}/complete",
        json={"lease_id": "whatever", "duration_s": 1.0},
        headers=auth(svc.tokens.worker),
    )
    assert again.status_code == 409 and "done" in again.json()["detail"]

    metrics = svc.client.get("/metrics").text
    assert (
        "desched_decisions_total" in metrics
        and 'desched_queue_length{tenant="tenant-a"} 0' in metrics
    )
    assert "desched_decision_latency_seconds_bucket" in metrics
    health = svc.client.get("/healthz").json()
    assert health["status"] == "ok" and health["queued"] == 0


def test_a_retried_submit_with_the_same_idempotency_key_creates_no_second_task(
    svc: Running,
) -> None:
    key = f"batch-{uuid.uuid4().hex}"
    first = svc.submit([task(), task("embed")], **{"Idempotency-Key": key})
    second = svc.submit([task(), task("embed")], **{"Idempotency-Key": key})
    assert first.status_code == 201 and second.status_code == 200
    assert second.json() == {"task_ids": first.json()["task_ids"], "created": False}
    other = svc.submit([task("classify")], **{"Idempotency-Key": key})
    assert other.status_code == 409 and "Idempotency-Key" in other.json()["detail"]
    # The same key of another tenant is another submit.
    b = svc.submit([task(), task("embed")], token=svc.tokens.tenant_b, **{"Idempotency-Key": key})
    assert b.status_code == 201
    assert svc.client.get("/healthz").json()["queued"] == 4


def test_a_failed_task_retries_up_to_the_limit_then_is_dead_lettered(svc: Running) -> None:
    (task_id,) = svc.submit([task()]).json()["task_ids"]
    states = []
    for attempt in range(1, 10):
        lease = svc.poll().json()
        assert lease["task_id"] == task_id and lease["attempt"] == attempt
        r = svc.client.post(
            f"/v1/tasks/{task_id}/fail",
            json={"lease_id": lease["lease_id"], "error": "OOM"},
            headers=auth(svc.tokens.worker),
        )
        assert r.status_code == 200, r.text
        states.append(r.json()["state"])
        if states[-1] == "dead":
            break
    assert states == ["queued", "queued", "queued", "dead"]  # max_retries = 3
    view = svc.client.get(f"/v1/tasks/{task_id}", headers=auth(svc.tokens.tenant_a)).json()
    assert view["state"] == "dead" and view["error"] == "OOM" and view["attempts"] == 4
    assert svc.poll().status_code == 204


def test_tenants_see_only_their_tasks_and_roles_are_enforced(svc: Running) -> None:
    t = svc.tokens
    (b_task,) = svc.submit([task()], token=t.tenant_b).json()["task_ids"]
    get = svc.client.get(f"/v1/tasks/{b_task}", headers=auth(t.tenant_a))
    assert get.status_code == 404
    assert svc.client.get(f"/v1/tasks/{b_task}", headers=auth(t.tenant_b)).status_code == 200

    lease = svc.poll().json()
    assert lease["task_id"] == b_task
    body = {"lease_id": lease["lease_id"], "duration_s": 1.0}
    as_tenant = svc.client.post(f"/v1/tasks/{b_task}/complete", json=body, headers=auth(t.tenant_a))
    assert as_tenant.status_code == 403
    owner = svc.client.post(f"/v1/tasks/{b_task}/complete", json=body, headers=auth(t.tenant_b))
    assert owner.status_code == 403
    foreign = svc.client.post(f"/v1/tasks/{b_task}/complete", json=body, headers=auth(t.worker2))
    assert foreign.status_code == 403 and "another worker" in foreign.json()["detail"]
    wrong_lease = svc.client.post(
        f"/v1/tasks/{b_task}/complete",
        json={**body, "lease_id": "not-the-lease"},
        headers=auth(t.worker),
    )
    assert wrong_lease.status_code == 409

    assert svc.submit([task()], token=t.worker).status_code == 403
    assert svc.poll(token=t.tenant_a).status_code == 403
    assert svc.client.post("/v1/tasks", json=[task()]).status_code == 401
    assert svc.submit([task()], token="not-a-token").status_code == 401
    assert svc.client.get(f"/v1/tasks/{b_task}").status_code == 401
    ok = svc.client.post(f"/v1/tasks/{b_task}/complete", json=body, headers=auth(t.worker))
    assert ok.status_code == 204


@pytest.mark.parametrize(
    ("content", "headers", "status", "says"),
    [
        (b"x" * 2_000_000, {"content-type": "application/json"}, 413, "larger than"),
        (b'[{"task_type": "extract"', {"content-type": "application/json"}, 422, "JSON"),
        (b'{"task_type": 7}', {"content-type": "application/json"}, 422, "string"),
        (
            b'{"task_type": "extract", "pages": "many"}',
            {"content-type": "application/json"},
            422,
            "integer",
        ),
        (
            b'{"task_type": "extract", "mem_mb": NaN}',
            {"content-type": "application/json"},
            422,
            "finite",
        ),
        (
            b'{"task_type": "extract", "colour": "red"}',
            {"content-type": "application/json"},
            422,
            "Extra inputs",
        ),
        (
            b'{"task_type": "extract", "document_ref": "a\\u0000b"}',
            {"content-type": "application/json"},
            422,
            "NUL",
        ),
        (
            b'{"task_type": "extract", "document_ref": "\\ud800"}',
            {"content-type": "application/json"},
            422,
            "unicode",
        ),
        (b"[]", {"content-type": "application/json"}, 422, "at least 1"),
        (
            json.dumps([task()] * 1001).encode(),
            {"content-type": "application/json"},
            422,
            "at most 1000",
        ),
        (b"task_type=extract", {"content-type": "application/x-www-form-urlencoded"}, 422,
         "Content-Type: application/json"),
        (b'{"task_type": "extract"}', {}, 422, "Content-Type: application/json"),
    ],
    ids=[
        "oversized",
        "truncated-json",
        "wrong-type",
        "wrong-int",
        "nan",
        "unknown-field",
        "nul",
        "surrogate",
        "empty-list",
        "too-many",
        "form-encoded",
        "no-content-type",
    ],
)
def test_malformed_requests_get_a_4xx_with_a_clear_message(
    svc: Running, content: bytes, headers: dict[str, str], status: int, says: str
) -> None:
    r = svc.client.post(
        "/v1/tasks", content=content, headers={**auth(svc.tokens.tenant_a), **headers}
    )
    assert r.status_code == status, r.text
    assert says in r.text
    assert svc.client.get("/healthz").json()["queued"] == 0


def test_a_submit_error_names_the_field_of_the_shape_sent_not_the_other_shape(
    svc: Running,
) -> None:
    a = auth(svc.tokens.tenant_a)
    one = svc.client.post("/v1/tasks", json={"task_type": 7}, headers=a).json()["detail"]
    assert [e["loc"] for e in one] == [["body", "TaskIn", "task_type"]]
    many = svc.client.post("/v1/tasks", json=[{"task_type": 7}], headers=a).json()["detail"]
    assert [e["loc"] for e in many] == [["body", "list[TaskIn]", "0", "task_type"]]
    neither = svc.client.post("/v1/tasks", json="extract", headers=a).json()["detail"]
    assert {e["type"] for e in neither} >= {"list_type"}  # nothing deeper: both shapes said


def test_a_bad_task_id_or_lease_is_a_4xx(svc: Running) -> None:
    w = auth(svc.tokens.worker)
    assert svc.client.get("/v1/tasks/%00", headers=auth(svc.tokens.tenant_a)).status_code == 422
    assert svc.client.get("/v1/tasks/nope", headers=auth(svc.tokens.tenant_a)).status_code == 404
    r = svc.client.post(
        "/v1/tasks/nope/complete", json={"lease_id": "x", "duration_s": 1}, headers=w
    )
    assert r.status_code == 404
    r = svc.client.post(
        "/v1/tasks/nope/complete", json={"lease_id": "x", "duration_s": -1}, headers=w
    )
    assert r.status_code == 422
    r = svc.client.post("/v1/poll", json={"free_mem_mb": 3}, headers=w)
    assert r.status_code == 422 and "worker_id" in r.text


def test_policy_set_switches_the_live_policy(svc: Running) -> None:
    from click.testing import CliRunner

    from desched.cli import cli

    runner = CliRunner()
    db = svc.service.db
    out = runner.invoke(cli, ["policy", "set", "round-robin", "--db", db])
    assert out.exit_code == 0, out.output
    deadline = time.monotonic() + 10
    while svc.client.get("/healthz").json()["policy"] != "round-robin":
        assert time.monotonic() < deadline, "the service did not switch policy"
        time.sleep(0.05)
    out = runner.invoke(
        cli, ["policy", "set", "ifs-memoryless?w_wait=0.8", "--store", db]
    )
    assert out.exit_code == 0, out.output
    while svc.client.get("/healthz").json()["params"].get("w_wait") != 0.8:
        assert time.monotonic() < deadline, "the service did not switch policy"
        time.sleep(0.05)
    bad = runner.invoke(cli, ["policy", "set", "ifs-memoryless?w_nope=1", "--store", db])
    assert bad.exit_code == 2 and "w_nope" in bad.output


def test_a_child_that_writes_more_to_stderr_than_a_pipe_holds_runs_to_its_end() -> None:
    # Without the drain the child blocks in its write once the pipe holds about 64 KiB, as
    # a service logging through a database outage did (it stopped answering, mid-test).
    code = "import sys; sys.stderr.write('x' * (1 << 20)); sys.stderr.write('\\nlast line\\n')"
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE)
    assert proc.stderr is not None
    drain = PipeDrain(proc.stderr, keep_bytes=4096)
    drain.start()
    try:
        assert proc.wait(timeout=30) == 0
        assert drain.text().endswith("x\nlast line\n") and len(drain.text()) == 4096
        assert drain.total_bytes == (1 << 20) + len("\nlast line\n")
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()

def test_tenants_add_prints_a_token_that_is_stored_hashed(backend: Backend) -> None:
    from click.testing import CliRunner

    from desched.cli import cli
    from desched.service.records import Role
    from desched.service.store import Store, hash_token

    db = backend.fresh()
    runner = CliRunner()
    out = runner.invoke(cli, ["tenants", "add", "acme", "--db", db])
    assert out.exit_code == 0, out.output
    token = out.stdout.strip()  # the note that the store was created goes to stderr
    assert len(token) >= 40
    again = runner.invoke(cli, ["tenants", "add", "acme", "--db", db])
    assert again.exit_code == 2 and "already exists" in again.output
    worker = runner.invoke(cli, ["workers", "add", "gpu-1", "--db", db])
    assert worker.exit_code == 0
    store = Store(db)
    try:
        assert store.principal(hash_token(token))[:2] == (Role.TENANT, "acme")
        stored = store.execute("SELECT token_sha256 FROM principals").fetchall()
        assert all(token not in row[0] for row in stored)
    finally:
        store.close()


# Failures -------------------------------------------------------------------------------------

WORKER_SCRIPT = """
import sys, time, httpx
url, token = sys.argv[1], sys.argv[2]
r = httpx.post(url + "/v1/poll", json={"worker_id": "doomed"},
               headers={"Authorization": "Bearer " + token})
print(r.text, flush=True)
time.sleep(600)
"""


def test_the_task_of_a_killed_worker_is_requeued_when_its_lease_expires(
    backend: Backend, tmp_path: Path
) -> None:
    service, tokens = start_service(backend, tmp_path, lease_s=1.0)
    try:
        with httpx.Client(base_url=service.url, timeout=10.0) as client:
            r = client.post("/v1/tasks", json=[task()], headers=auth(tokens.tenant_a))
            (task_id,) = r.json()["task_ids"]
            worker = subprocess.Popen(
                [sys.executable, "-c", WORKER_SCRIPT, service.url, tokens.worker],
                stdout=subprocess.PIPE,
            )
            assert worker.stdout is not None
            first = json.loads(worker.stdout.readline())
            assert first["task_id"] == task_id
            worker.send_signal(signal.SIGKILL)
            worker.wait(timeout=10)

            poll = {"worker_id": "survivor"}
            w2 = auth(tokens.worker2)
            assert client.post("/v1/poll", json=poll, headers=w2).status_code == 204
            deadline = time.monotonic() + 10
            while (r := client.post("/v1/poll", json=poll, headers=w2)).status_code == 204:
                assert time.monotonic() < deadline, "the lease never expired"
                time.sleep(0.1)
            second = r.json()
            assert second["task_id"] == task_id and second["attempt"] == 2
            assert second["lease_id"] != first["lease_id"]

            late = client.post(
                f"/v1/tasks/{task_id}/complete",
                json={"lease_id": first["lease_id"], "duration_s": 1.0},
                headers=auth(tokens.worker),
            )
            assert late.status_code == 403  # leased to worker-2 now
            ok = client.post(
                f"/v1/tasks/{task_id}/complete",
                json={"lease_id": second["lease_id"], "duration_s": 1.0},
                headers=w2,
            )
            assert ok.status_code == 204
            assert "desched_lease_expiries_total 1" in client.get("/metrics").text
    finally:
        service.stop()


class Load:
    """Submitters and workers against a service whose URL may change (a restart)."""

    def __init__(self, tokens: Tokens, url: str) -> None:
        self.tokens = tokens
        self.url = url
        self.accepted: set[str] = set()
        self.completions: Counter[str] = Counter()
        self.submitting = threading.Event()
        self.working = threading.Event()
        self.lock = threading.Lock()
        self.errors: list[str] = []
        self.local = threading.local()

    def call(
        self, method: str, path: str, token: str, body: Any, headers: dict[str, str] | None = None
    ) -> httpx.Response:
        """Retry on a transport error (the service is down) until it answers."""
        if not hasattr(self.local, "client"):
            self.local.client = httpx.Client(timeout=5.0)
        while True:
            try:
                return self.local.client.request(
                    method, self.url + path, json=body, headers={**auth(token), **(headers or {})}
                )
            except httpx.TransportError:
                time.sleep(0.05)

    def submitter(self, name: str, token: str) -> None:
        n = 0
        while self.submitting.is_set():
            key = f"{name}-{n}"
            r = self.call(
                "POST", "/v1/tasks", token, [task() for _ in range(3)], {"Idempotency-Key": key}
            )
            if r.status_code not in (200, 201):
                self.errors.append(f"submit {r.status_code} {r.text}")
                return
            with self.lock:
                self.accepted.update(r.json()["task_ids"])
            n += 1
            time.sleep(0.02)  # about the pace the workers keep up with

    def worker(self, worker_id: str) -> None:
        token = self.tokens.worker
        while self.working.is_set():
            r = self.call("POST", "/v1/poll", token, {"worker_id": worker_id})
            if r.status_code == 204:
                time.sleep(0.02)
                continue
            if r.status_code != 200:
                self.errors.append(f"poll {r.status_code} {r.text}")
                return
            lease = r.json()
            c = self.call(
                "POST",
                f"/v1/tasks/{lease['task_id']}/complete",
                token,
                {"lease_id": lease["lease_id"], "duration_s": 0.01},
            )
            if c.status_code == 204:
                with self.lock:
                    self.completions[lease["task_id"]] += 1
            elif c.status_code != 409:  # 409: the lease ended (the service restarted late)
                self.errors.append(f"complete {c.status_code} {c.text}")


def test_a_service_killed_under_load_loses_no_accepted_task_and_completes_none_twice(
    backend: Backend, tmp_path: Path
) -> None:
    service, tokens = start_service(backend, tmp_path, lease_s=1.0)
    load = Load(tokens, service.url)
    threads = [
        threading.Thread(target=load.submitter, args=(name, token))
        for name, token in (("a", tokens.tenant_a), ("b", tokens.tenant_b))
    ] + [threading.Thread(target=load.worker, args=(f"w{j}",)) for j in range(4)]
    load.submitting.set()
    load.working.set()
    try:
        for t in threads:
            t.start()
        time.sleep(1.0)
        # kill it under load: once it has accepted something (a loaded box may take longer)
        started = time.monotonic()
        while not load.accepted and time.monotonic() - started < 60:
            time.sleep(0.1)
        service.kill()
        accepted_before = len(load.accepted)
        service.start()  # same database, new port
        load.url = service.url
        time.sleep(0.5)
        load.submitting.clear()
        deadline = time.monotonic() + 30
        with httpx.Client(base_url=service.url, timeout=5.0) as client:
            while True:
                h = client.get("/healthz").json()
                if (
                    h["queued"] == 0
                    and h["leased"] == 0
                    and not any(t.is_alive() for t in threads[:2])
                ):
                    break
                assert time.monotonic() < deadline, f"queue never drained: {h}"
                time.sleep(0.1)
    finally:
        load.submitting.clear()
        load.working.clear()
        for t in threads:
            t.join(timeout=15)
        service.stop()
    assert not load.errors, load.errors[:5]
    assert accepted_before > 0 and len(load.accepted) > accepted_before
    print(f"{backend.kind}: {len(load.accepted)} tasks accepted, {accepted_before} before the kill")

    from desched.service.store import Store

    store = Store(service.db)
    try:
        rows = store.execute("SELECT task_id, state, batch_key FROM tasks").fetchall()
    finally:
        store.close()
    state = {r[0]: r[1] for r in rows}
    assert load.accepted <= set(state), "an accepted task is missing"
    assert all(state[t] == "done" for t in load.accepted)
    assert all(n == 1 for n in load.completions.values()), "a task was completed twice"
    assert set(load.completions) <= set(state)
    per_key = Counter(r[2] for r in rows)
    assert set(per_key.values()) == {3}, "a retried submit created a second batch"
    ok_records: Counter[str] = Counter()
    for path in (tmp_path / "logs").glob("*.jsonl"):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec["kind"] == "completion" and rec["status"] == "ok":
                ok_records[rec["task_id"]] += 1
    assert ok_records and max(ok_records.values()) == 1


def test_the_service_survives_losing_its_postgresql_sessions(
    backend: Backend, tmp_path: Path
) -> None:
    if backend.kind != "postgres":
        pytest.skip("PostgreSQL sessions only")
    import psycopg

    service, tokens = start_service(backend, tmp_path)
    try:
        with httpx.Client(base_url=service.url, timeout=10.0) as client:
            tenant = auth(tokens.tenant_a)
            (before,) = client.post("/v1/tasks", json=[task()], headers=tenant).json()["task_ids"]
            admin = f"postgresql://postgres@127.0.0.1:5432/{backend.pg_database}"
            with psycopg.connect(admin, autocommit=True) as conn:
                killed = conn.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                ).fetchone()
            assert killed is not None and killed[0] >= 2
            statuses = []
            deadline = time.monotonic() + 20
            while True:
                r = client.post("/v1/tasks", json=[task()], headers=tenant)
                statuses.append(r.status_code)
                if r.status_code == 201:
                    break
                assert r.status_code == 503, r.text
                assert time.monotonic() < deadline, statuses
                time.sleep(0.1)
            (after,) = r.json()["task_ids"]
            got = set()
            while (
                p := client.post("/v1/poll", json={"worker_id": "x"}, headers=auth(tokens.worker))
            ).status_code == 200:
                lease = p.json()
                got.add(lease["task_id"])
                c = client.post(
                    f"/v1/tasks/{lease['task_id']}/complete",
                    json={"lease_id": lease["lease_id"], "duration_s": 1.0},
                    headers=auth(tokens.worker),
                )
                assert c.status_code == 204
            assert got == {before, after}
    finally:
        service.stop()
