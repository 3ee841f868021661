"""The ``retrain-duration-model`` deployment runs to completion through a real worker.

Starts ``prefect server start`` on 127.0.0.1 (state under .prefect/deploy-test/), creates the
``cpu`` process work pool, deploys from prefect.yaml with ``prefect --no-prompt deploy``,
starts ``prefect worker start --pool cpu`` and runs the deployment with ``--watch``, which
exits 0 only when the flow run ends COMPLETED. About 45 s.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from desched.cli.live import prefect_server_argv
from desched.trace import write_trace
from desched.workloads import generate

ROOT = Path(__file__).resolve().parents[1]
DEPLOYMENT = "retrain-duration-model/retrain-duration-model"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _prefect(*args: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "prefect", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    """End a process this test started (and its children), by its own process group."""
    if process.poll() is None:
        os.killpg(process.pid, 15)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait(timeout=10)


@pytest.fixture()
def prefect_server(tmp_path: Path) -> Iterator[dict[str, str]]:
    home = ROOT / ".prefect" / "deploy-test"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    port = _free_port()
    env = {
        **os.environ,
        "PREFECT_HOME": str(home),
        "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_UI_ENABLED": "false",
        "PREFECT_LOGGING_LEVEL": "INFO",
    }
    with open(tmp_path / "server.log", "wb") as log:
        server = subprocess.Popen(
            prefect_server_argv(port),
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(
                        "prefect server did not start:\n" + (tmp_path / "server.log").read_text()
                    ) from None
                time.sleep(1)
        yield env
    finally:
        _stop(server)


def test_the_retrain_deployment_runs_to_completion_through_a_process_worker(
    prefect_server: dict[str, str], tmp_path: Path
) -> None:
    env = prefect_server
    trace = write_trace(generate("steady", tasks=1500, tenants=8, seed=5), tmp_path / "t.parquet")
    registry = tmp_path / "models" / "duration"

    pool = _prefect(
        "work-pool", "create", "cpu", "--type", "process", "--overwrite", env=env, timeout=120
    )
    assert pool.returncode == 0, pool.stdout + pool.stderr
    deploy = _prefect(
        "--no-prompt", "deploy", "--name", "retrain-duration-model", env=env, timeout=180
    )
    assert deploy.returncode == 0, deploy.stdout + deploy.stderr

    with open(tmp_path / "worker.log", "wb") as worker_log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "prefect", "worker", "start", "--pool", "cpu"],
            cwd=ROOT,
            env=env,
            stdout=worker_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        run = _prefect(
            "deployment",
            "run",
            DEPLOYMENT,
            "--param",
            f"trace={trace}",
            "--param",
            f"registry={registry}",
            "--param",
            "max_rounds=60",
            "--watch",
            "--watch-timeout",
            "420",
            env=env,
            timeout=480,
        )
    finally:
        _stop(worker)
    detail = run.stdout + run.stderr + "\nworker log:\n" + (tmp_path / "worker.log").read_text()
    assert run.returncode == 0, detail
    assert "Completed" in run.stdout, detail
    card = json.loads((registry / "v0001" / "card.json").read_text())
    assert card["verdict"] == "promoted"
    assert (registry / "CHAMPION").read_text().strip() == "v0001"
