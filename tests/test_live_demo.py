"""``desched live-demo --quick`` end to end: service, Prefect server, workers, pipeline.

Runs the command as a user would (a subprocess; it starts ``desched serve``, a Prefect
server on loopback and two enrichment workers with the tiny model), then checks what it
left behind: every receipt enriched once, the results in the warehouse, the decision log
ingested, and both models retrained from it. About 40 s.

With ``--keep`` (and ``--no-pipeline``) it checks over HTTP what the command leaves running
and that the ``kill`` line it prints stops all of it. Every process the demo starts, at any
depth, inherits a marker in its environment, so the test finds and stops whatever is left
even when an assertion fails first (Linux: it reads ``/proc``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import httpx
import pytest

from desched.service.records import Role
from desched.service.store import Store

ROOT = Path(__file__).resolve().parents[1]
MARK = "DESCHED_TEST_LIVE_DEMO_RUN"


def test_live_demo_drains_every_tenant_and_retrains_on_its_logs(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    env.pop("PREFECT_API_URL", None)  # live-demo starts its own server (with its UI)
    run = subprocess.run(
        [sys.executable, "-m", "desched.cli", "live-demo", "--quick", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    state = sqlite3.connect(out / "desched.db")
    by_tenant = dict(
        state.execute(
            "SELECT tenant, COUNT(*) FROM tasks WHERE state = 'done' GROUP BY tenant"
        ).fetchall()
    )
    assert by_tenant == {"flood": 24, "acme": 8, "globex": 8, "initech": 8}
    assert state.execute("SELECT COUNT(*) FROM tasks WHERE state != 'done'").fetchone() == (0,)
    state.close()

    (log,) = (out / "logs").glob("*.jsonl")
    kinds = [json.loads(line)["kind"] for line in log.read_text().splitlines()]
    assert kinds.count("decision") == 48 and kinds.count("completion") == 48

    warehouse = duckdb.connect(str(out / "warehouse.duckdb"), read_only=True)
    try:
        counts = {
            t: warehouse.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
            for t in ("decisions", "completions", "quarantine")
        }
        results = warehouse.execute(
            "SELECT COUNT(DISTINCT task_id), COUNT(*) FROM enrichment_results"
        ).fetchone()
    finally:
        warehouse.close()
    assert counts == {"decisions": 48, "completions": 48, "quarantine": 0}
    assert results == (48, 48)  # every receipt enriched and stored exactly once

    # one model per workload: the service's log folder is the demo's only one
    (duration,) = (out / "models" / "duration").iterdir()
    (card_path,) = duration.glob("v0001/card.json")
    card = json.loads(card_path.read_text())
    # 48 measured enrichment times: the model is promoted when it beats the constant median
    # prediction on its held-out rows, and otherwise kept as rejected, saying so
    if card["verdict"] == "promoted":
        assert (duration / "CHAMPION").read_text().strip() == "v0001"
    else:
        assert "does not beat the constant median prediction" in card["reason"], card
        assert not (duration / "CHAMPION").exists()
    memory = out / "models" / "memory"
    assert (memory / (memory / "CHAMPION").read_text().strip() / "model.txt").exists()
    assert "per tenant: tasks done / submitted" in run.stdout
    # the retraining's verdict per workload reaches the terminal, not only pipeline.log
    assert re.search(r"^  duration model \S+: v\d+ (promoted|rejected) - ", run.stdout,
                     re.MULTILINE), run.stdout
    # The demo checks its own answers: every acknowledged task done, none lost.
    ledger = {
        m[0]: (int(m[1]), int(m[2]), int(m[3]))
        for m in re.findall(r"^  (\w+) +(\d+) +(\d+) +(\d+)   \S", run.stdout, re.MULTILINE)
    }
    assert "per tenant: acknowledged, done, lost" in run.stdout
    assert ledger == {"flood": (24, 24, 0), "acme": (8, 8, 0), "globex": (8, 8, 0),
                      "initech": (8, 8, 0)}
    assert "the flood in numbers: 'flood' sent 24 tasks at once" in run.stdout, run.stdout
    assert re.search(r"operator page: http://127\.0\.0\.1:\d+/ui#token=\S+", run.stdout)
    assert re.search(r"prefect server: http://127\.0\.0\.1:\d+/api, UI http", run.stdout)


def process_state(pid: int) -> str | None:
    """The state letter of process ``pid`` (R, S, Z, ...), None when there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie waits for a reaper that may never come)."""
    return process_state(pid) not in (None, "Z", "X")


def marked_processes(tag: str) -> list[int]:
    """The running processes whose environment holds ``MARK=tag``."""
    needle = f"{MARK}={tag}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if needle in environ and running(int(entry.name)):
            found.append(int(entry.name))
    return found


def command_line(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_until(condition: Callable[[], bool], limit_s: float) -> bool:
    deadline = time.monotonic() + limit_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def stop_marked(tag: str) -> None:
    """SIGTERM to the group of every marked process, SIGKILL to what is left after 20 s."""
    own_group = os.getpgrp()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in marked_processes(tag):
            try:
                group = os.getpgid(pid)
                if group == own_group:
                    os.kill(pid, sig)
                else:
                    os.killpg(group, sig)
            except ProcessLookupError:
                pass
        if wait_until(lambda: not marked_processes(tag), 20.0):
            return


@dataclass(frozen=True)
class KeptDemo:
    tag: str
    out: Path
    returncode: int
    stdout: str
    stderr: str

    def tail(self) -> str:
        return self.stdout[-3000:] + self.stderr[-3000:]


@pytest.fixture
def kept_demo(tmp_path: Path) -> Iterator[KeptDemo]:
    """``live-demo --quick --keep --no-pipeline`` run to its end, in its own session; at
    teardown every process it started is stopped, whatever the test did."""
    tag = uuid.uuid4().hex
    out = tmp_path / "demo"
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        MARK: tag,
    }
    env.pop("PREFECT_API_URL", None)
    demo = subprocess.Popen(
        [sys.executable, "-m", "desched.cli", "live-demo", "--quick", "--keep",
         "--no-pipeline", "--out", str(out)],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        try:
            stdout, stderr = demo.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            os.killpg(demo.pid, signal.SIGINT)  # its own handles stop what it started
            stdout, stderr = demo.communicate(timeout=60)
            pytest.fail(f"live-demo --keep ran past 600 s:\n{stdout[-3000:]}{stderr[-3000:]}")
        yield KeptDemo(tag, out, demo.returncode, stdout, stderr)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
        stop_marked(tag)


def test_keep_leaves_the_service_page_prefect_ui_and_working_workers_up_until_its_kill_line(
    kept_demo: KeptDemo,
) -> None:
    assert kept_demo.returncode == 0, kept_demo.tail()
    assert "left running (--keep):" in kept_demo.stdout, kept_demo.tail()
    block = kept_demo.stdout.split("left running (--keep):", 1)[1]

    def line(pattern: str) -> re.Match[str] | None:
        return re.search(pattern, block, re.MULTILINE)

    page = line(r"^  operator page +(http://127\.0\.0\.1:\d+/ui)#token=(\S+)$")
    service = line(r"^  service +(http://127\.0\.0\.1:(\d+)) ")
    prefect = line(r"^  prefect UI +(http://127\.0\.0\.1:(\d+))$")
    stop = line(r"^stop them with: (sh -c '.+')$")
    assert page and service and prefect and stop, block
    service_url, prefect_url = service[1], prefect[1]
    ports = [int(service[2]), int(prefect[2])]
    groups = [int(pid) for pids in re.findall(r"kill -- ((?:-\d+ ?)+)", stop[1])
              for pid in re.findall(r"\d+", pids)]

    # The printed process groups: the Prefect server, the service and the two workers.
    assert all(running(pid) for pid in groups), {pid: process_state(pid) for pid in groups}
    commands = [command_line(pid) for pid in groups]
    assert sum("prefect server start" in c for c in commands) == 1, commands
    assert sum(" serve --port " + service[2] in c for c in commands) == 1, commands
    assert sum("enrichment_worker(" in c for c in commands) == 2, commands

    with httpx.Client(timeout=30) as http:
        health = http.get(f"{service_url}/healthz")
        assert health.status_code == 200 and health.json()["role"] == "active", health.text
        html = http.get(page[1])  # the token after '#' stays in the browser
        assert html.status_code == 200 and 'id="tenants"' in html.text
        state = http.get(f"{service_url}/ui/state", headers={"Authorization": f"Bearer {page[2]}"})
        assert state.status_code == 200, state.text
        done = {row["tenant"]: row["done"] for row in state.json()["tenants"]}
        assert done == {"flood": 24, "acme": 8, "globex": 8, "initech": 8}
        assert http.get(f"{service_url}/ui/state").status_code == 401
        wrong = http.get(f"{service_url}/ui/state", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401

        assert http.get(f"{prefect_url}/api/health").json() is True
        ui = http.get(f"{prefect_url}/", headers={"Accept": "text/html"}, follow_redirects=True)
        assert ui.status_code == 200 and "<title>Prefect Server</title>" in ui.text, ui.text[:500]
        # Each worker is a running flow run there, so the UI shows its steps (a worker
        # that got no task before the queue drained may still be starting its run).
        def running_workers() -> list[str]:
            runs = http.post(f"{prefect_url}/api/flow_runs/filter", json={
                "flows": {"name": {"any_": ["enrichment-worker"]}},
                "flow_runs": {"state": {"type": {"any_": ["RUNNING"]}}},
            })
            assert runs.status_code == 200, runs.text
            return [run["name"] for run in runs.json()]

        assert wait_until(lambda: len(running_workers()) == 2, 60.0), running_workers()

        # The workers still take work: a tenant added now (as `desched tenants add` does)
        # submits a receipt, and it is done.
        store = Store(str(kept_demo.out / "desched.db"))
        try:
            token = store.add_principal(Role.TENANT, "late")
            (ref,) = store.execute("SELECT document_ref FROM tasks LIMIT 1").fetchone()
        finally:
            store.close()
        auth = {"Authorization": f"Bearer {token}"}
        submitted = http.post(f"{service_url}/v1/tasks", headers=auth,
                              json={"task_type": "extract", "document_ref": ref})
        assert submitted.status_code == 201, submitted.text
        (task_id,) = submitted.json()["task_ids"]
        assert wait_until(
            lambda: http.get(f"{service_url}/v1/tasks/{task_id}", headers=auth).json()["state"]
            == "done",
            60.0,
        ), http.get(f"{service_url}/v1/tasks/{task_id}", headers=auth).text

    # The printed line, as a person would paste it, stops every one of them.
    subprocess.run(stop[1], shell=True, check=True, timeout=60)
    assert wait_until(lambda: not any(running(pid) for pid in groups), 30.0), [
        (process_state(pid), c) for pid, c in zip(groups, commands, strict=True) if running(pid)]
    assert not [port for port in ports if listening(port)]
    assert wait_until(lambda: not marked_processes(kept_demo.tag), 10.0), [
        command_line(pid) for pid in marked_processes(kept_demo.tag)]


def test_live_demo_uses_the_prefect_server_at_prefect_api_url_and_starts_none(
    tmp_path: Path,
) -> None:
    """A Prefect server the user runs (here: started by the test, on loopback) is the one
    the demo's workers report to; the demo starts no server of its own."""
    from desched.cli.live import prefect_server_argv

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    api = f"http://127.0.0.1:{port}/api"
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_UI_ENABLED": "false",
    }
    env.pop("PREFECT_API_URL", None)
    (tmp_path / "prefect-home").mkdir()
    server = subprocess.Popen(prefect_server_argv(port), env=env, cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        with httpx.Client(timeout=10) as http:
            def healthy() -> bool:
                try:
                    return bool(http.get(f"{api}/health").json() is True)
                except httpx.HTTPError:
                    return False

            assert wait_until(healthy, 180.0), "the test's Prefect server did not start"
            out = tmp_path / "demo"
            run = subprocess.run(
                [sys.executable, "-m", "desched.cli", "live-demo", "--quick", "--no-pipeline",
                 "--out", str(out)],
                cwd=ROOT, env={**env, "PREFECT_API_URL": api}, capture_output=True, text=True,
                timeout=600, check=False,
            )
            assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
            assert f"prefect server: {api}, UI http://127.0.0.1:{port} (given by " \
                   "PREFECT_API_URL" in run.stdout, run.stdout
            assert not (out / "prefect-server.log").exists()  # none started
            runs = http.post(f"{api}/flow_runs/filter", json={
                "flows": {"name": {"any_": ["enrichment-worker"]}}})
            assert runs.status_code == 200, runs.text
            states = sorted(r["state_type"] for r in runs.json())
            assert states == ["COMPLETED", "COMPLETED"], states
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
