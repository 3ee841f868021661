"""The replay-log flow against a real ``desched serve``: a fresh service ends with decision
logs, completions and queued receipts; and the cache keys of the content-addressed tasks."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from desched.service.records import Role
from desched.service.store import Store
from desched.tasks.demo import _without_images
from tests.test_service import Service, auth


def test_a_replay_submits_the_scenario_completes_it_but_the_tail_and_the_service_logs_it(
    prefect_harness, tmp_path: Path, monkeypatch
) -> None:
    from desched.flows.replay import replay_log

    db = str(tmp_path / "state.db")
    store = Store(db)
    store.migrate()
    worker = store.add_principal(Role.WORKER, "replayer")
    operator = store.add_principal(Role.OPERATOR, "ops")
    store.close()
    service = Service(db=db, log_dir=tmp_path / "logs", lease_s=30.0).start()
    try:
        monkeypatch.setenv("DESCHED_WORKER_TOKEN", worker)
        out = replay_log(service_url=service.url, store=db, token_block=None, tasks=120,
                         tenants=4, leave_queued=10)
        state = httpx.get(f"{service.url}/ui/state", headers=auth(operator)).json()
    finally:
        service.stop()
    assert sum(out.submitted.values()) == 120 and out.left_queued == 10
    assert sum(out.completed.values()) == 110
    assert set(out.submitted) == {"replay-flood", "replay-t00", "replay-t01", "replay-t02"}
    assert sum(t["queued"] for t in state["tenants"]) == 10
    assert sum(t["done"] for t in state["tenants"]) == 110
    records = [json.loads(line) for f in (tmp_path / "logs").glob("*.jsonl")
               for line in f.read_text().splitlines()]
    kinds = [r["kind"] for r in records]
    assert kinds.count("decision") == 110 and kinds.count("completion") == 110
    done = [r for r in records if r["kind"] == "completion"]
    assert all(r["peak_mem_mb"] > 0 and r["duration_s"] > 0 for r in done)


def test_a_log_case_is_keyed_on_the_file_content_not_its_path(tmp_path: Path) -> None:
    from desched.tasks.judge import _log_key

    a, b, c = (tmp_path / n for n in ("a.swf", "b.swf", "c.swf"))
    a.write_text("1 0 0 10 1\n")
    b.write_text("1 0 0 10 1\n")
    c.write_text("1 0 0 11 1\n")
    key = _log_key(None, {"path": str(a), "max_tasks": 100})  # type: ignore[arg-type]
    assert key == _log_key(None, {"path": str(b), "max_tasks": 100})  # type: ignore[arg-type]
    assert key != _log_key(None, {"path": str(c), "max_tasks": 100})  # type: ignore[arg-type]
    assert key != _log_key(None, {"path": str(a), "max_tasks": 200})  # type: ignore[arg-type]


def test_an_evaluation_cell_is_keyed_on_its_trace_content_and_its_other_inputs(
    tmp_path: Path,
) -> None:
    from desched.tasks.evaluate import _cell_key

    def key(trace: str, **kw: object) -> str:
        inputs = {"trace": trace, "policy": "fifo", "seed": 0, "workers": 4, "window_s": None}
        return _cell_key(None, {**inputs, **kw})  # type: ignore[arg-type]

    f = tmp_path / "t.parquet"
    f.write_bytes(b"one")
    first = key(str(f))
    assert first == key(str(f)) and first != key(str(f), seed=1)
    assert first != key(str(f), policy="vtc") and key("flood") != key("steady")
    f.write_bytes(b"two")
    assert key(str(f)) != first


def test_the_report_artifact_drops_inline_images() -> None:
    text = "# R\n\n![pareto](data:image/png;base64," + "A" * 500_000 + ")\n\n| a |\n|---|\n"
    out = _without_images(text)
    assert len(out) < 200 and "[plot: pareto" in out and "| a |" in out


RUN_LOG_SCRIPT = """
import asyncio, time
from desched.cli.output import configure_logging
configure_logging(False)
from prefect import flow, get_run_logger
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
from prefect.context import get_run_context

@flow
def tiny():
    get_run_logger().info("step one done")
    return get_run_context().flow_run.id

run_id = tiny()
time.sleep(3)  # the API log handler sends in the background

async def main():
    async with get_client() as client:
        logs = await client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id])))
        print("SERVER HAS:", [log.message for log in logs])

asyncio.run(main())
"""


def test_a_quiet_cli_keeps_flow_run_logs_for_the_server_and_off_the_terminal(
    tmp_path: Path,
) -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(tmp_path), PREFECT_SERVER_ANALYTICS_ENABLED="false",
               PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    run = subprocess.run([sys.executable, "-c", RUN_LOG_SCRIPT], env=env, capture_output=True,
                         text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "'step one done'" in run.stdout and "Beginning flow run" in run.stdout
    assert "step one done" not in run.stderr  # the terminal shows warnings only
