"""Cancellation and token life, over real HTTP against ``desched serve`` subprocesses, on
SQLite and PostgreSQL: a tenant cancels its queued or leased tasks (the worker hears 410 at
its next heartbeat), tokens expire and are revoked while the service runs, and both survive
a SIGKILL of the service."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
from click.testing import CliRunner

from desched.cli import cli
from tests import test_service
from tests.test_service import Backend, Service, auth, start_service, task

backend = test_service.backend  # the backend-parametrised fixture, reused here


def post(url: str, path: str, token: str, body: object = None) -> httpx.Response:
    return httpx.post(url + path, json=body, headers=auth(token), timeout=10.0)


def metric(url: str, line_start: str) -> float:
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.split()[-1])
    raise AssertionError(line_start)


def test_a_tenant_cancels_its_queued_and_leased_tasks_and_the_worker_stops(
    backend: Backend, tmp_path: Path
) -> None:
    service, t = start_service(backend, tmp_path, lease_s=30.0)
    try:
        url = service.url
        ids = post(url, "/v1/tasks", t.tenant_a, [task(), task(), task()]).json()["task_ids"]
        (b_task,) = post(url, "/v1/tasks", t.tenant_b, [task()]).json()["task_ids"]

        # A queued task: cancelled once, a repeat changes nothing, never handed out.
        first = post(url, f"/v1/tasks/{ids[0]}/cancel", t.tenant_a)
        assert first.status_code == 200, first.text
        assert first.json() == {"task_id": ids[0], "state": "cancelled", "was": "queued"}
        again = post(url, f"/v1/tasks/{ids[0]}/cancel", t.tenant_a).json()
        assert again["was"] == "cancelled"
        # Another tenant's task is not found; a worker may not cancel.
        assert post(url, f"/v1/tasks/{b_task}/cancel", t.tenant_a).status_code == 404
        assert post(url, f"/v1/tasks/{ids[1]}/cancel", t.tenant_b).status_code == 404
        assert post(url, f"/v1/tasks/{ids[1]}/cancel", t.worker).status_code == 403
        assert post(url, "/v1/tasks/nope/cancel", t.tenant_a).status_code == 404

        # A leased task: the worker's heartbeat, completion and failure get 410.
        leases = {}
        while (p := post(url, "/v1/poll", t.worker, {"worker_id": "s0"})).status_code == 200:
            leases[p.json()["task_id"]] = p.json()["lease_id"]
        assert set(leases) == {ids[1], ids[2], b_task}  # the cancelled one is never handed out
        leased = post(url, f"/v1/tasks/{ids[1]}/cancel", t.tenant_a).json()
        assert leased["was"] == "leased"
        lease = {"lease_id": leases[ids[1]]}
        for path, body in (
            ("heartbeat", lease),
            ("complete", {**lease, "duration_s": 1.0}),
            ("fail", {**lease, "error": "x"}),
        ):
            r = post(url, f"/v1/tasks/{ids[1]}/{path}", t.worker, body)
            assert r.status_code == 410 and "cancelled" in r.json()["detail"], (path, r.text)
        # A task that ended cannot be cancelled.
        done = post(url, f"/v1/tasks/{ids[2]}/complete", t.worker,
                    {"lease_id": leases[ids[2]], "duration_s": 1.0})
        assert done.status_code == 204
        assert post(url, f"/v1/tasks/{ids[2]}/cancel", t.tenant_a).status_code == 409

        assert metric(url, 'desched_tasks_cancelled_total{was="queued"}') == 1
        assert metric(url, 'desched_tasks_cancelled_total{was="leased"}') == 1
        view = httpx.get(f"{url}/v1/tasks/{ids[1]}", headers=auth(t.tenant_a)).json()
        assert view["state"] == "cancelled" and view["end_s"] is not None

        # Crash safety: after a SIGKILL the cancellations hold and nothing is handed out.
        service.kill()
        service.start()
        url = service.url
        assert post(url, "/v1/poll", t.worker, {"worker_id": "s0"}).status_code == 204
        r = post(url, f"/v1/tasks/{ids[1]}/heartbeat", t.worker, lease)
        assert r.status_code == 410
        assert post(url, f"/v1/tasks/{ids[0]}/cancel", t.tenant_a).json()["was"] == "cancelled"
        for task_id in ids[:2]:
            view = httpx.get(f"{url}/v1/tasks/{task_id}", headers=auth(t.tenant_a)).json()
            assert view["state"] == "cancelled"
    finally:
        service.stop()
    kinds = [
        (rec["kind"], rec.get("was"))
        for path in (tmp_path / "logs").glob("*.jsonl")
        for rec in map(json.loads, path.read_text().splitlines())
        if rec["task_id"] in ids[:2] and rec["kind"] == "cancel"
    ]
    assert sorted(kinds) == [("cancel", "leased"), ("cancel", "queued")]


def test_a_revoked_or_expired_token_gets_401_at_once_from_a_running_service(
    backend: Backend, tmp_path: Path
) -> None:
    service, t = start_service(backend, tmp_path)
    runner = CliRunner()
    db = service.db
    try:
        url = service.url
        assert post(url, "/v1/tasks", t.tenant_a, [task()]).status_code == 201
        assert post(url, "/v1/poll", t.worker2, {"worker_id": "a"}).status_code == 200
        out = runner.invoke(cli, ["tenants", "revoke", "tenant-a", "--db", db])
        assert out.exit_code == 0 and "refuses its token" in out.output, out.output
        r = post(url, "/v1/tasks", t.tenant_a, [task()])
        assert r.status_code == 401 and "revoked" in r.json()["detail"]
        assert post(url, "/v1/tasks", t.tenant_b, [task()]).status_code == 201
        # A worker's poll goes through the hot path: revoked there too.
        out = runner.invoke(cli, ["workers", "revoke", "worker-2", "--db", db])
        assert out.exit_code == 0, out.output
        assert post(url, "/v1/poll", t.worker2, {"worker_id": "a"}).status_code == 401
        assert post(url, "/v1/poll", t.worker, {"worker_id": "a"}).status_code == 200
        again = runner.invoke(cli, ["tenants", "revoke", "tenant-a", "--db", db])
        assert again.exit_code == 0
        assert runner.invoke(cli, ["tenants", "revoke", "nobody", "--db", db]).exit_code == 2

        # A new token for a revoked name works; the old one stays refused.
        out = runner.invoke(cli, ["tenants", "add", "tenant-a", "--db", db])
        fresh = out.output.strip()
        assert out.exit_code == 0 and post(url, "/v1/tasks", fresh, [task()]).status_code == 201
        assert post(url, "/v1/tasks", t.tenant_a, [task()]).status_code == 401

        # Expiry: the token works until its instant, then gets 401, cached or not.
        out = runner.invoke(cli, ["tenants", "add", "brief", "--expires", "3s", "--db", db])
        assert out.exit_code == 0, out.output
        brief = out.output.splitlines()[0]
        added = time.time()
        assert post(url, "/v1/tasks", brief, [task()]).status_code == 201
        time.sleep(max(0.0, added + 3.2 - time.time()))
        r = post(url, "/v1/tasks", brief, [task()])
        assert r.status_code == 401 and "expired" in r.json()["detail"]
        listed = runner.invoke(cli, ["tenants", "list", "--db", db]).output
        assert "brief\t" in listed and "expired" in listed and "revoked" not in listed

        # Revocations outlive a SIGKILL and a restart.
        service.kill()
        service.start()
        assert post(service.url, "/v1/poll", t.worker2, {"worker_id": "a"}).status_code == 401
        assert post(service.url, "/v1/tasks", brief, [task()]).status_code == 401
        assert post(service.url, "/v1/tasks", fresh, [task()]).status_code == 201
    finally:
        service.stop()


def test_the_admin_commands_refuse_bad_expiries_and_names_in_one_line(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    assert CliRunner().invoke(cli, ["tenants", "add", "y", "--db", db]).exit_code == 0
    for args, says in (
        (["tenants", "add", "x", "--expires", "soon"], "expected a duration"),
        (["tenants", "add", "x", "--expires", "2001-01-01"], "has passed"),
        (["workers", "add", "x", "--expires", "0s"], "positive"),
        (["workers", "revoke", "ghost"], "no worker 'ghost'"),
        # past year 9999 the token had been stored, and every later `list` failed (QA)
        (["tenants", "add", "x", "--expires", "99999999999d"], "past the year 9999"),
        (["operators", "add", "x", "--expires", "999999999999999999999s"], "past the year"),
        # the service itself: one line before start-up, not a traceback (QA)
        (["serve", "--port", "18299", "--policy", "sjf-predicted"],
         "ranks on predicted durations, and no duration model is loaded"),
        (["serve", "--port", "18299", "--logs", str(Path(db) / "under-a-file")],
         "cannot write here"),
        # a clairvoyant bound is no policy to run (it had been accepted without a word)
        (["serve", "--port", "18299", "--policy", "sjf-oracle"], "ranks on the true durations"),
        (["policy", "set", "sjf-oracle"], "ranks on the true durations"),
    ):
        out = subprocess.run(
            [sys.executable, "-m", "desched.cli", *args, "--db", db],
            capture_output=True, text=True, check=False, timeout=120,
        )
        assert out.returncode == 2 and out.stderr.count("\n") == 1 and says in out.stderr, out
    listed = subprocess.run([sys.executable, "-m", "desched.cli", "tenants", "list", "--db", db],
                            capture_output=True, text=True, check=False)
    assert listed.returncode == 0 and listed.stdout.startswith("y\t"), listed
    (tmp_path / "junk.db").write_text("not a database")
    out = subprocess.run([sys.executable, "-m", "desched.cli", "serve", "--port", "18299",
                          "--db", str(tmp_path / "junk.db")],
                         capture_output=True, text=True, check=False, timeout=120)
    assert out.returncode == 2 and out.stderr.strip() == (
        f"error: --store {tmp_path / 'junk.db'}: not a desched store (file is not a "
        "database)"), out


def test_a_service_started_after_a_revocation_refuses_the_token(
    backend: Backend, tmp_path: Path
) -> None:
    service, t = start_service(backend, tmp_path)
    service.stop()
    out = CliRunner().invoke(cli, ["tenants", "revoke", "tenant-b", "--db", service.db])
    assert out.exit_code == 0 and out.output.strip() == "revoked tenant 'tenant-b'"
    restarted = Service(db=service.db, log_dir=tmp_path / "logs").start()
    try:
        assert post(restarted.url, "/v1/tasks", t.tenant_b, [task()]).status_code == 401
        assert post(restarted.url, "/v1/tasks", t.tenant_a, [task()]).status_code == 201
    finally:
        restarted.stop()
