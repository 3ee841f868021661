"""Tenant controls in the live service, over real HTTP against ``desched serve``
subprocesses on SQLite and PostgreSQL: what ``desched tenants set`` changes (caps, weights,
rate limits), priorities at submit, ``/metrics`` and the decision log, and that the controls
persist across a SIGKILL."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
from click.testing import CliRunner

from desched.cli import cli
from tests import test_service
from tests.test_service import Backend, Service, auth, start_service, task

backend = test_service.backend  # the backend-parametrised fixture, reused here


def post(url: str, path: str, token: str, body: object = None) -> httpx.Response:
    return httpx.post(url + path, json=body, headers=auth(token), timeout=30.0)


def metrics(url: str) -> dict[str, float]:
    out = {}
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def tenants_set(db: str, *args: str) -> str:
    out = CliRunner().invoke(cli, ["tenants", "set", *args, "--db", db])
    assert out.exit_code == 0, out.output
    return out.output


def poll(url: str, token: str, slot: str = "s0") -> httpx.Response:
    return post(url, "/v1/poll", token, {"worker_id": slot})


def complete(url: str, token: str, lease: dict, duration_s: float = 1.0) -> None:
    r = post(url, f"/v1/tasks/{lease['task_id']}/complete", token,
             {"lease_id": lease["lease_id"], "duration_s": duration_s})
    assert r.status_code == 204, r.text


def decision_rows(log_dir: Path) -> list[dict]:
    rows = []
    for path in sorted(log_dir.glob("*.jsonl")):
        rows += [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in rows if r["kind"] == "decision"]


def test_a_cap_holds_a_tenant_to_n_leased_tasks_and_shows_in_metrics_and_log(
    backend: Backend, tmp_path: Path
) -> None:
    service, t = start_service(backend, tmp_path, lease_s=30.0)
    try:
        url = service.url
        out = tenants_set(service.db, "tenant-a", "--cap", "2", "--weight", "2")
        assert "cap 2" in out and "weight 2" in out and "applies them" in out
        a_ids = post(url, "/v1/tasks", t.tenant_a, [task() for _ in range(5)]).json()["task_ids"]
        b_ids = post(url, "/v1/tasks", t.tenant_b, [task(), task()]).json()["task_ids"]
        leases = []
        while (r := poll(url, t.worker)).status_code == 200:
            leases.append(r.json())
        got = [lease["task_id"] for lease in leases]
        assert sum(i in a_ids for i in got) == 2 and set(b_ids) <= set(got)
        assert r.status_code == 204  # a's other 3 wait behind the cap; nothing else queued
        m = metrics(url)
        assert m['desched_tenant_cap{tenant="tenant-a"}'] == 2
        assert m['desched_tenant_weight{tenant="tenant-a"}'] == 2
        assert m['desched_tenant_running{tenant="tenant-a"}'] == 2
        assert m['desched_queue_length{tenant="tenant-a"}'] == 3
        # Ending one of a's leases frees one place under the cap, exactly one.
        complete(url, t.worker, next(x for x in leases if x["task_id"] in a_ids))
        nxt = poll(url, t.worker)
        assert nxt.status_code == 200 and nxt.json()["task_id"] in a_ids
        assert poll(url, t.worker).status_code == 204
        # Raising the cap lets the rest go at once.
        tenants_set(service.db, "tenant-a", "--cap", "none")
        assert [poll(url, t.worker).status_code for _ in range(3)] == [200, 200, 204]
        assert "desched_tenant_cap{tenant=\"tenant-a\"}" not in metrics(url)
    finally:
        service.stop()
    rows = decision_rows(tmp_path / "logs")
    a_rows = [r for r in rows if r["tenant"] == "tenant-a"]
    assert [r["tenant_cap"] for r in a_rows] == [2, 2, 2, None, None]
    assert {r["tenant_weight"] for r in a_rows} == {2.0}
    assert {(r["tenant_weight"], r["tenant_cap"]) for r in rows if r["tenant"] == "tenant-b"} == {
        (1.0, None)
    }


def test_weights_share_the_workers_under_vtc(backend: Backend, tmp_path: Path) -> None:
    """Both tenants backlogged, one worker, every task 1 s: weight 3 gets 3 of every 4."""
    service, t = start_service(backend, tmp_path, lease_s=30.0, env={"DESCHED_POLICY": "vtc"})
    try:
        url = service.url
        tenants_set(service.db, "tenant-a", "--weight", "3")
        a_ids = set(post(url, "/v1/tasks", t.tenant_a, [task() for _ in range(30)])
                    .json()["task_ids"])
        post(url, "/v1/tasks", t.tenant_b, [task() for _ in range(30)])
        served = []
        for _ in range(24):
            r = poll(url, t.worker)
            assert r.status_code == 200
            served.append(r.json()["task_id"] in a_ids)
            complete(url, t.worker, r.json(), 1.0)
        assert abs(sum(served) - 18) <= 1, served
    finally:
        service.stop()


def test_a_tenant_over_its_rate_limit_gets_429_with_retry_after(
    backend: Backend, tmp_path: Path
) -> None:
    service, t = start_service(backend, tmp_path)
    try:
        url = service.url
        tenants_set(service.db, "tenant-b", "--rate", "60/m", "--burst", "3")
        keyed = {**auth(t.tenant_b), "Idempotency-Key": "k1"}
        first = httpx.post(url + "/v1/tasks", json=[task()], headers=keyed)
        codes = [post(url, "/v1/tasks", t.tenant_b, [task()]).status_code for _ in range(2)]
        assert [first.status_code, *codes] == [201, 201, 201]
        over = post(url, "/v1/tasks", t.tenant_b, [task()])
        assert over.status_code == 429 and "rate limit" in over.json()["detail"]
        assert int(over.headers["Retry-After"]) >= 1
        too_big = post(url, "/v1/tasks", t.tenant_b, [task() for _ in range(4)])
        # A batch larger than the burst can never pass: 413 saying so, not 429.
        assert too_big.status_code == 413 and "never pass" in too_big.json()["detail"]
        assert "burst of 3" in too_big.json()["detail"] and "Retry-After" not in too_big.headers
        # A replay of an accepted submit needs no token; the other tenant is not limited.
        replay = httpx.post(url + "/v1/tasks", json=[task()], headers=keyed)
        assert replay.status_code == 200 and replay.json() == {**first.json(), "created": False}
        assert post(url, "/v1/tasks", t.tenant_a, [task() for _ in range(10)]).status_code == 201
        assert metrics(url)["desched_rate_limited_submits_total"] == 1
        assert metrics(url)['desched_tenant_rate_limit{tenant="tenant-b"}'] == 1.0
        time.sleep(1.2)  # one token back at 1 per second
        assert post(url, "/v1/tasks", t.tenant_b, [task()]).status_code == 201
        # Lifting the limit: the bucket is gone.
        tenants_set(service.db, "tenant-b", "--rate", "none")
        assert post(url, "/v1/tasks", t.tenant_b, [task() for _ in range(20)]).status_code == 201
    finally:
        service.stop()


def test_priority_orders_a_tenants_own_tasks(backend: Backend, tmp_path: Path) -> None:
    service, t = start_service(backend, tmp_path, lease_s=30.0)
    try:
        url = service.url
        prios = [0, 5, 1, 0, 5]
        ids = post(url, "/v1/tasks", t.tenant_a,
                   [task(priority=p) for p in prios]).json()["task_ids"]
        got = [poll(url, t.worker).json()["task_id"] for _ in prios]
        assert [prios[ids.index(i)] for i in got] == [5, 5, 1, 0, 0]
        view = httpx.get(f"{url}/v1/tasks/{ids[1]}", headers=auth(t.tenant_a)).json()
        assert view["priority"] == 5
        bad = post(url, "/v1/tasks", t.tenant_a, [task(priority="high")])
        assert bad.status_code == 422
    finally:
        service.stop()
    rows = decision_rows(tmp_path / "logs")
    assert [r["priority"] for r in rows] == [5, 5, 1, 0, 0]


def test_controls_and_priorities_survive_a_sigkill(backend: Backend, tmp_path: Path) -> None:
    service, t = start_service(backend, tmp_path, lease_s=30.0)
    db = service.db
    try:
        tenants_set(db, "tenant-a", "--cap", "1", "--weight", "0.5", "--rate", "100/s")
        ids = post(service.url, "/v1/tasks", t.tenant_a,
                   [task(priority=p) for p in (0, 3, 1)]).json()["task_ids"]
        first = poll(service.url, t.worker).json()
        assert first["task_id"] == ids[1]
        service.kill()
        service = Service(db=db, log_dir=tmp_path / "logs2", lease_s=30.0).start()
        url = service.url
        m = metrics(url)
        assert m['desched_tenant_cap{tenant="tenant-a"}'] == 1
        assert m['desched_tenant_weight{tenant="tenant-a"}'] == 0.5
        assert m['desched_tenant_running{tenant="tenant-a"}'] == 1  # the lease survived
        assert poll(url, t.worker).status_code == 204  # and still counts against the cap
        complete(url, t.worker, first)
        assert poll(url, t.worker).json()["task_id"] == ids[2]  # priority 1 before 0
    finally:
        service.stop()
    listed = CliRunner().invoke(cli, ["tenants", "controls", "--db", db])
    assert listed.exit_code == 0 and listed.output.split("\n")[0].split("\t") == [
        "tenant-a", "0.5", "1", "100", "-"]


def test_tenants_set_refuses_bad_values_in_one_line(tmp_path: Path) -> None:
    db = str(tmp_path / "d.db")
    runner = CliRunner()
    for args, message in (
        (["--cap", "0"], "cap must be an integer from 1 to 2,147,483,647"),
        # past what a counter, SQLite or a Retry-After can hold (a QA pass: 5e-324 made
        # vtc's counter infinite for good; a huge cap raised OverflowError)
        (["--weight", "5e-324"], "weight must be between 1e-06 and 1e+06, got 5e-324"),
        (["--weight", "1e308"], "weight must be between 1e-06 and 1e+06"),
        (["--cap", "99999999999999999999999"], "cap must be an integer from 1 to"),
        (["--rate", "1e-300/s"], "rate must be between 1e-06 and 1e+09 per second"),
        (["--cap", "two"], "--cap 'two': expected int or none"),
        (["--weight", "-1"], "weight must be a finite number > 0"),
        (["--rate", "fast"], "--rate 'fast': expected a number > 0"),
        (["--burst", "5"], "burst needs a rate"),
    ):
        out = runner.invoke(cli, ["tenants", "set", "tenant-a", *args, "--db", db])
        assert out.exit_code != 0 and message in out.output, (args, out.output)
    ok = runner.invoke(cli, ["tenants", "set", "tenant-a", "--rate", "5/s", "--db", db])
    assert ok.exit_code == 0 and "rate 5" in ok.output
    # a tenant with no token yet: recorded, and said (a typo had passed in silence)
    assert "note: no tenant 'tenant-a' has a token in this store" in ok.stderr
    assert runner.invoke(cli, ["tenants", "add", "tenant-a", "--db", db]).exit_code == 0
    again = runner.invoke(cli, ["tenants", "set", "tenant-a", "--weight", "2", "--db", db])
    assert again.exit_code == 0 and "note:" not in again.stderr
    assert runner.invoke(cli, ["tenants", "set", "--help"]).exit_code == 0
