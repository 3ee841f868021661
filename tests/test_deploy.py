"""The README's "Run it on a Prefect server" works as written.

The commands are read out of the README's fenced blocks under that heading, so the two cannot
drift. The slow test runs them with bash, as written, in a copy of the checkout (the flows
write ``data/`` and ``models/`` there), changing only the port (a free one instead of 4200)
and ``PREFECT_HOME`` (a temporary folder): a real ``prefect server start`` on loopback,
``desched deploy``, a process worker on the ``cpu`` pool and a first run of every CPU
deployment, each ``--watch``ed to completion. The GPU block runs only where CUDA is there;
elsewhere the GPU deployment is checked to exist. About 4 to 8 minutes.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from desched.cli.deploy import POOLS

ROOT = Path(__file__).resolve().parents[1]
HEADING = "## Run it on a Prefect server"
README_PORT = "4200"
README_SERVICE_PORT = "8000"
README_HOME = '"$PWD/.prefect/server"'
RUN = re.compile(r"^prefect deployment run (\S+)/(\S+) .*--watch$")


def deploy_blocks() -> tuple[str, str]:
    """The section's two ``sh`` blocks: the CPU path, then the GPU machine's commands."""
    text = (ROOT / "README.md").read_text()
    assert HEADING in text, f"README.md has no section {HEADING!r}"
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 2, f"expected 2 sh blocks under {HEADING!r}, found {len(blocks)}"
    return blocks[0], blocks[1]


def runs_in(block: str) -> list[tuple[str, str]]:
    """(flow, deployment) of every ``prefect deployment run ... --watch`` line."""
    return [m.groups() for line in block.splitlines() if (m := RUN.match(line.strip()))]


def test_the_readme_deploy_section_runs_every_deployment_of_prefect_yaml_on_its_pool() -> None:
    config = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    pools = {d["name"]: d["work_pool"]["name"] for d in config["deployments"]}
    cpu, gpu = deploy_blocks()
    assert set(pools.values()) == set(POOLS)
    assert "desched deploy" in cpu and "prefect worker start --pool cpu" in cpu
    assert "prefect worker start --pool gpu" in gpu
    assert {d for _, d in runs_in(cpu)} == {n for n, p in pools.items() if p == "cpu"}
    assert {d for _, d in runs_in(gpu)} == {n for n, p in pools.items() if p == "gpu"}
    flows = {d["name"]: d["entrypoint"].rsplit(":", 1)[1] for d in config["deployments"]}
    for flow, name in runs_in(cpu) + runs_in(gpu):  # the flow name is the @flow's
        assert flow.replace("-", "_") == flows[name], (flow, name)
    assert README_PORT in cpu and README_HOME in cpu and README_SERVICE_PORT in cpu


def test_deploy_creates_the_missing_work_pools_and_leaves_existing_ones(prefect_harness) -> None:
    import asyncio

    from prefect.client.orchestration import get_client

    from desched.cli.deploy import ensure_pools

    names = ("i9-test-cpu", "i9-test-gpu")
    first = asyncio.run(ensure_pools(names))
    assert first == [f"work pool {n}: created (type process)" for n in names]
    assert asyncio.run(ensure_pools(names)) == [
        f"work pool {n}: exists (type process), left as it is" for n in names
    ]

    async def template(name: str) -> dict:
        async with get_client() as client:
            return (await client.read_work_pool(name)).base_job_template

    assert "job_configuration" in asyncio.run(template(names[0]))  # the process default


def test_deploy_without_a_server_address_is_a_one_line_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT))

    def deploy(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "desched.cli", "deploy", *args], env=env, cwd=tmp_path,
            capture_output=True, text=True, timeout=120, check=False,
        )

    unset = deploy("--project", str(ROOT))
    assert unset.returncode == 2
    assert unset.stderr.startswith("error: PREFECT_API_URL is not set"), unset.stderr
    assert unset.stderr.count("\n") == 1 and unset.stdout == ""
    elsewhere = deploy()  # tmp_path has no prefect.yaml, but the checkout desched runs from has
    assert elsewhere.returncode == 2 and "PREFECT_API_URL is not set" in elsewhere.stderr
    missing = deploy("--project", str(ROOT / "docs"))
    assert missing.returncode == 2 and "no prefect.yaml" in missing.stderr, missing.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _copy_checkout(dest: Path) -> Path:
    """The checkout's source, samples and models, without outputs, caches or the venv."""
    skip = {".git", ".venv", ".prefect", "__pycache__", ".pytest_cache", ".hypothesis",
            ".ruff_cache", ".mypy_cache", "out"}

    def ignore(folder: str, names: list[str]) -> set[str]:
        if Path(folder) == ROOT / "data":
            return {n for n in names if n not in ("samples", "README.md")}
        return {n for n in names if n in skip or n.endswith(".egg-info")}

    shutil.copytree(ROOT, dest, ignore=ignore, symlinks=False)
    return dest


def _end_group(shell: subprocess.Popen[str]) -> None:
    """End what the script started and left running (its own process group): SIGTERM, then
    SIGKILL after 30 s (a Prefect worker waits on its runs)."""
    for sig, grace in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(shell.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            shell.poll()  # reap the script itself once it has ended
            try:
                os.killpg(shell.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.5)
        else:
            continue
        break
    shell.wait(timeout=10)


def _has_cuda() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


@pytest.mark.slow
@pytest.mark.e2e
def test_the_readme_deploy_section_runs_as_written_on_a_loopback_server(tmp_path: Path) -> None:
    cpu, gpu = deploy_blocks()
    gpu_here = _has_cuda()
    port, service_port = str(_free_port()), str(_free_port())
    home = tmp_path / "prefect-home"
    checkout = _copy_checkout(tmp_path / "checkout")
    commands = cpu + (gpu if gpu_here else "")
    script = (
        commands.replace(README_PORT, port)
        .replace(README_SERVICE_PORT, service_port)
        .replace(README_HOME, f'"{home}"')
    )
    (tmp_path / "run_logs.py").write_text(RUN_LOGS)
    health = f"http://127.0.0.1:{service_port}/healthz"
    checks = (
        "prefect deployment inspect enrichment-worker/enrichment-worker-gpu\n"
        f"python {tmp_path / 'run_logs.py'}\n"
        # the service started before any model follows the registry the retrain promoted to
        f"python -c \"import httpx; print('model_version:', httpx.get('{health}')"
        ".json()['model_version'])\"\n"
    )
    (tmp_path / "readme.sh").write_text(
        "set -euxo pipefail\n"
        "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + script + checks
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=str(checkout),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
    )
    shell = subprocess.Popen(
        ["bash", str(tmp_path / "readme.sh")], cwd=checkout, env=env, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        output, _ = shell.communicate(timeout=3000)
    finally:
        _end_group(shell)

    logs = "".join(
        f"\n--- {p.name} (last 3000 chars)\n{p.read_text(errors='replace')[-3000:]}"
        for p in sorted(home.glob("*.log"))
    )
    assert shell.returncode == 0, output[-12000:] + logs
    expected = len(runs_in(cpu)) + (len(runs_in(gpu)) if gpu_here else 0)
    assert output.count("Flow run finished successfully in 'Completed'") == expected, output
    assert "work pool cpu: created" in output and "work pool gpu: created" in output
    assert "'enrichment-worker-gpu'" in output  # deployed, inspected
    # what the first runs leave in the checkout
    assert (checkout / "data" / "logs").is_dir()
    assert (checkout / "data" / "warehouse.duckdb").is_file()
    assert (checkout / "data" / "weights" / "first-run" / "card.json").is_file()
    worker_log = (home / "worker-cpu.log").read_text(errors="replace")
    # replay-log fed the service; ingest-logs loaded what the service logged of it
    assert "576 completed, 24 left queued" in worker_log, worker_log[-6000:]
    assert "1 of 1 files read; 1152 rows loaded (576 decisions, 576 completions)" in worker_log
    # both retrains trained a model; the enrichment worker enriched the 24 receipts left
    assert (checkout / "models" / "duration" / "data-logs" / "CHAMPION").is_file()
    assert "model_version: v0001" in output, output[-3000:]
    assert (checkout / "models" / "memory" / "CHAMPION").is_file()
    assert "24 documents enriched and completed" in worker_log
    assert (checkout / "data" / "judge" / "judge.md").is_file()
    assert list((checkout / "data" / "demo").glob("*/report.md"))
    # every flow run that ran has its log on the server (what the UI shows)
    runs = re.search(r"flow runs with logs: (\d+) of (\d+)", output)
    assert runs and runs[1] == runs[2] and int(runs[2]) >= expected, output[-3000:]
    assert "Refusing to publish event" not in (home / "server.log").read_text(errors="replace")


RUN_LOGS = """
import asyncio
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId


async def main():
    async with get_client() as client:
        runs = [r for r in await client.read_flow_runs()  # not the scheduled ones
                if r.state is not None and r.state.is_completed()]
        with_logs = 0
        for run in runs:
            logs = await client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run.id])))
            with_logs += bool(logs)
        print(f"flow runs with logs: {with_logs} of {len(runs)}")

asyncio.run(main())
"""


def test_deploy_saves_the_service_url_as_a_variable_and_the_worker_token_as_a_secret(
    prefect_harness,
) -> None:
    import asyncio

    from prefect.blocks.system import Secret
    from prefect.variables import Variable

    from desched.cli.deploy import SERVICE_URL_VARIABLE, WORKER_TOKEN_BLOCK, save_configuration
    from desched.tasks.replay import worker_token

    lines = asyncio.run(save_configuration("http://127.0.0.1:8123", "tok-123"))
    assert lines == [f"variable {SERVICE_URL_VARIABLE}: http://127.0.0.1:8123",
                     f"secret block {WORKER_TOKEN_BLOCK}: saved from $DESCHED_WORKER_TOKEN"]
    assert Variable.get(SERVICE_URL_VARIABLE) == "http://127.0.0.1:8123"
    assert Secret.load(WORKER_TOKEN_BLOCK).get() == "tok-123"
    assert worker_token.fn(WORKER_TOKEN_BLOCK) == "tok-123"  # what the flows read
    config = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    for d in config["deployments"]:
        if "service_url" in d["parameters"]:
            wanted = "{{ prefect.variables." + SERVICE_URL_VARIABLE + " }}"
            assert d["parameters"]["service_url"] == wanted
            assert d["parameters"]["token_block"] == WORKER_TOKEN_BLOCK
