"""``desched live-demo``: the whole live loop on one machine.

Starts ``desched serve`` (SQLite under the output folder), a local Prefect server (with its
UI; or uses the one at $PREFECT_API_URL when set) and N enrichment workers (subprocesses
running ``flows.enrich.enrichment_worker`` against that server); registers tenants, one of
which floods the queue at the start while the others submit steadily, and an operator
(the service's page, ``/ui``); prints the queue per tenant as it drains and, at the end, the
flood in numbers; then ingests the decision logs into a DuckDB warehouse and retrains the
duration and peak-memory models with the pipeline's flows. Every process it starts is
stopped by its own handle, also on error or Ctrl-C, unless ``--keep`` leaves the service,
the Prefect server and the workers running (their addresses are printed, and the line that
stops them: ``stop_line``).
"""

from __future__ import annotations

import math
import os
import re
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import click

from desched.cli.live_ledger import SubmitLedger
from desched.cli.service import serve_argv
from desched.errors import DeschedError
from desched.today import TODAY_SCORER

ROOT = Path(__file__).resolve().parents[2]
TASK_TYPES = ("extract", "classify", "embed", "ocr_clean")
QUEUE_LINE = re.compile(
    r'^desched_queue_length\{tenant="([^"]*)"\} ([0-9.e+-]+)$', re.MULTILINE
)
SCALAR_LINE = re.compile(r"^(desched_[a-z_]+) ([0-9.e+-]+)$", re.MULTILINE)


def prefect_server_argv(port: int) -> list[str]:
    """The command line of a local Prefect server on loopback at ``port``."""
    return [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
            "--port", str(port)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_http(
    url: str, proc: subprocess.Popen[bytes], what: str, log: Path, limit_s: float
) -> None:
    import httpx

    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DeschedError(f"{what} exited with {proc.returncode}; see {log}")
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise DeschedError(f"{what} did not answer {url} within {limit_s:.0f} s; see {log}")


@contextmanager
def _process(
    cmd: list[str], env: dict[str, str], log: Path, keep: bool = False
) -> Iterator[subprocess.Popen[bytes]]:
    """A child process in its own session, ended (SIGTERM, then SIGKILL) with its group,
    unless ``keep`` and this block ends without an error (then it is left running)."""
    with log.open("ab") as out:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    ok = False
    try:
        yield proc
        ok = True
    finally:
        if proc.poll() is None and not (keep and ok):
            os.killpg(proc.pid, 15)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait(timeout=10)


def _metrics(client: Any) -> tuple[dict[str, int], dict[str, float]]:
    text = client.get("/metrics").text
    queues = {t: int(float(n)) for t, n in QUEUE_LINE.findall(text)}
    scalars = {k: float(v) for k, v in SCALAR_LINE.findall(text)}
    return queues, scalars


def _tenant_table(db: Path) -> list[tuple[str, int, int, float, float, float]]:
    """(tenant, tasks, done, mean wait, p99 wait, max wait) from the service's database."""
    con = sqlite3.connect(db)
    try:
        rows = con.execute(
            "SELECT tenant, state, start_s - submit_s FROM tasks ORDER BY tenant"
        ).fetchall()
    finally:
        con.close()
    import numpy as np

    out = []
    for tenant in sorted({r[0] for r in rows}):
        waits = sorted(r[2] for r in rows if r[0] == tenant and r[2] is not None)
        n = sum(1 for r in rows if r[0] == tenant)
        done = sum(1 for r in rows if r[0] == tenant and r[1] == "done")
        p99 = float(np.percentile(waits, 99)) if waits else float("nan")
        mean = float(np.mean(waits)) if waits else float("nan")
        out.append((tenant, n, done, mean, p99, waits[-1] if waits else float("nan")))
    return out



def _finite(value: float | None) -> float | None:
    """``value`` unless NaN, which passes a click range (every comparison with it is false)
    and would leave the drain without a deadline."""
    if value is not None and math.isnan(value):
        raise click.BadParameter("nan is not a number of seconds")
    return value

@click.command("live-demo")
@click.option("--quick", is_flag=True, help="small and fast: 48 receipts, 2 workers, tiny model")
@click.option("--receipts", type=click.IntRange(min=1), default=None,
              help="receipts to submit [626; quick 48]")
@click.option("--workers", "n_workers", type=click.IntRange(min=1), default=None,
              help="workers [3; quick 2]")
@click.option(
    "--model",
    type=click.Choice(["auto", "minilm", "tiny"]),
    default=None,
    help="embedding model [auto; quick tiny]",
)
@click.option("--policy", default=TODAY_SCORER, show_default=True, metavar="SPEC",
              help="live policy: NAME or 'NAME?KEY=VALUE&KEY=VALUE'")
@click.option("--out", default=None, help="output folder [data/live-demo/<time>]")
@click.option("--timeout-s", type=click.FloatRange(min=0, min_open=True, max=86400.0),
              default=None, callback=lambda _c, _p, v: _finite(v),
              help="drain time limit, seconds [900; quick 240]")
@click.option("--no-pipeline", is_flag=True, help="skip ingestion and retraining")
@click.option("--keep", is_flag=True,
              help="leave the service (and its operator page), the Prefect server and the "
                   "workers running at the end, and print their addresses")
def live_demo(
    quick: bool,
    receipts: int | None,
    n_workers: int | None,
    model: str | None,
    policy: str,
    out: str | None,
    timeout_s: float | None,
    no_pipeline: bool,
    keep: bool,
) -> None:
    """Service + Prefect server + workers; tenants submit SROIE receipts (one floods); the
    queue drains per tenant; then ingestion and retraining run on the decision logs.

    Uses the Prefect server at $PREFECT_API_URL when set, else starts one (UI included) on
    a free port. The service's operator page is printed with its token."""
    from desched.cli.grammar import policy_spec

    policy_spec(policy)  # a bad policy spec is one line, before anything starts
    import httpx

    from desched.enrich.documents import DEFAULT_SROIE, load_sroie
    from desched.service.records import Role
    from desched.service.store import Store

    n_receipts = receipts if receipts is not None else (48 if quick else 626)
    n_workers = n_workers if n_workers is not None else (2 if quick else 3)
    model = model or ("tiny" if quick else "auto")
    limit_s = timeout_s if timeout_s is not None else (240.0 if quick else 900.0)
    folder = Path(out or ROOT / "data" / "live-demo" / time.strftime("%Y%m%d-%H%M%S"))
    folder.mkdir(parents=True, exist_ok=True)
    state_db, logs, warehouse = folder / "desched.db", folder / "logs", folder / "warehouse.duckdb"
    memory_model = folder / "models" / "memory"
    docs = load_sroie(DEFAULT_SROIE, limit=n_receipts)
    if not docs:
        raise DeschedError(f"no receipts under {DEFAULT_SROIE}")

    store = Store(str(state_db))
    try:
        store.migrate()
        tenants = ["flood", "acme", "globex", "initech"]
        tokens = {t: store.add_principal(Role.TENANT, t) for t in tenants}
        worker_token = store.add_principal(Role.WORKER, "enrich")
        operator_token = store.add_principal(Role.OPERATOR, "live-demo")
    finally:
        store.close()

    # The flood tenant submits half the receipts at once; the others share the rest, a few
    # at a time while the workers run.
    jobs = [
        {
            "task_type": TASK_TYPES[j % len(TASK_TYPES)],
            "document_ref": d.ref,
            "doc_bytes": len(d.text.encode()),
            "pages": 1,
        }
        for j, d in enumerate(docs)
    ]
    half = len(jobs) // 2
    flood_jobs, steady_jobs = jobs[:half], jobs[half:]
    steady = {t: steady_jobs[k::3] for k, t in enumerate(tenants[1:])}

    prefect_home = ROOT / ".prefect" / "live-demo"
    prefect_home.mkdir(parents=True, exist_ok=True)
    given_api = os.environ.get("PREFECT_API_URL", "").rstrip("/")
    prefect_port, service_port = _free_port(), _free_port()
    prefect_api = given_api or f"http://127.0.0.1:{prefect_port}/api"
    base_env = {
        **os.environ,
        "PREFECT_HOME": os.environ.get("PREFECT_HOME", str(prefect_home)),
        "PREFECT_API_URL": prefect_api,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        # Run logs at INFO for the server (the UI shows the workers' steps); the terminal
        # of each child keeps to warnings.
        "PREFECT_LOGGING_LOGGERS_PREFECT_FLOW_RUNS_LEVEL": "INFO",
        "PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL": "INFO",
        "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL": "WARNING",
        "HF_HUB_OFFLINE": "1",
    }
    service_env = {
        **base_env,
        "DESCHED_DB": str(state_db),
        "DESCHED_LOG_DIR": str(logs),
        "DESCHED_PREDICTOR_REGISTRY": str(folder / "models" / "duration"),
        "DESCHED_MEMORY_MODEL": str(memory_model),
        "DESCHED_LEASE_S": "30",
    }
    service_url = f"http://127.0.0.1:{service_port}"
    click.echo(f"output: {folder}")
    started = time.monotonic()
    with ExitStack() as running:
        server = None
        if not given_api:
            server = running.enter_context(_process(
                prefect_server_argv(prefect_port), base_env, folder / "prefect-server.log",
                keep=keep))
        service = running.enter_context(_process(
            serve_argv(service_port, "--policy", policy), service_env, folder / "service.log",
            keep=keep))
        _wait_http(f"{service_url}/healthz", service, "desched serve", folder / "service.log", 120)
        click.echo(f"service: {service_url} (policy {policy})")
        click.echo(f"operator page: {service_url}/ui#token={operator_token}")
        if server is not None:
            _wait_http(f"{prefect_api}/health", server, "prefect server",
                       folder / "prefect-server.log", 180)
        prefect_ui = prefect_api.removesuffix("/api")
        click.echo(f"prefect server: {prefect_api}, UI {prefect_ui} "
                   f"({'given by PREFECT_API_URL' if given_api else 'started here'}; "
                   f"{time.monotonic() - started:.0f} s)")

        ledger = SubmitLedger()  # every answer counted, every acknowledged id kept
        with httpx.Client(base_url=service_url, timeout=30) as http:
            for start in range(0, len(flood_jobs), 500):
                chunk, key = flood_jobs[start : start + 500], f"flood-{start}"
                code = ledger.submit(http, "flood", tokens["flood"], chunk, key)
                if code not in (200, 201):
                    raise DeschedError(f"submit failed: {code or 'no answer'}")
            click.echo(f"flood submitted {len(flood_jobs)} tasks at once")

            stop_submitting = threading.Event()

            def submit_steadily() -> None:
                with httpx.Client(base_url=service_url, timeout=30) as own:
                    rounds = max(len(v) for v in steady.values()) if steady else 0
                    for k in range(0, rounds, 2):
                        for t, items in steady.items():
                            chunk = items[k : k + 2]
                            if chunk:
                                ledger.submit(own, t, tokens[t], chunk, f"{t}-{k}")
                        if stop_submitting.wait(0.5):
                            return

            submitter = threading.Thread(target=submit_steadily, daemon=True)
            submitter.start()

            worker_env = {**base_env, "DESCHED_WORKER_TOKEN": worker_token}
            worker_cmds = []
            for k in range(n_workers):
                batched = k == 0  # one GPU-style worker: several leases at once
                call = (
                    "from desched.flows.enrich import enrichment_worker; enrichment_worker("
                    f"service_url={service_url!r}, worker_id='demo-{k}', db_path={str(warehouse)!r}, "
                    f"model={model!r}, max_batch={8 if batched else 1}, "
                    f"idle_exit_s={None if keep else 4.0}, "
                    f"mem_budget_mb={2048.0 if batched else 512.0})"
                )
                worker_cmds.append([sys.executable, "-c", call])
            with _workers(worker_cmds, worker_env, folder, keep) as procs:
                click.echo(f"{len(procs)} workers started (demo-0 holds up to 8 leases)")
                _watch(http, tenants, limit_s, started, submitter, procs)
                stop_submitting.set()
                if not keep:
                    _let_finish(procs, 30.0)  # idle workers end their flow runs themselves
            stop_submitting.set()
            submitter.join(timeout=5)
        table = _tenant_table(state_db)
        click.echo("\nper tenant: tasks done / submitted, wait mean / p99 / max (s)")
        for tenant, n, done, mean, p99, worst in table:
            click.echo(f"  {tenant:8s} {done:4d}/{n:<4d}  {mean:7.2f} {p99:7.2f} {worst:7.2f}")
        outcomes = ledger.outcomes(state_db, tenants)
        click.echo("\nper tenant: acknowledged, done, lost (HTTP answers to its submits)")
        for outcome in outcomes:
            click.echo(outcome.line())
        service_stop = time.monotonic()
        if not no_pipeline:
            _pipeline(base_env, logs, warehouse, folder)
        click.echo(
            f"\ndone in {time.monotonic() - started:.0f} s "
            f"(pipeline {time.monotonic() - service_stop:.0f} s); logs and state in {folder}"
        )
        click.echo(flood_in_numbers(state_db))
        if keep:
            others = [p.pid for p in (service, server) if p is not None]
            click.echo(
                f"\nleft running (--keep):\n  operator page  {service_url}/ui#token="
                f"{operator_token}\n  service        {service_url} (/metrics, /healthz)\n"
                f"  prefect UI     {prefect_ui}\n  workers        {len(procs)} (logs "
                f"{folder}/worker-*.log)\nstop them with: "
                + stop_line([p.pid for p in procs], others)
            )
        lost = {o.tenant: o.lost for o in outcomes if o.lost}
        if lost:
            raise DeschedError(
                f"{sum(map(len, lost.values()))} acknowledged tasks were not done ("
                + ", ".join(f"{t}: {', '.join(ids[:3])}" for t, ids in lost.items())
                + f"); see {folder / 'service.log'}"
            )


def stop_line(worker_pids: list[int], other_pids: list[int]) -> str:
    """One ``sh`` line that stops what ``--keep`` left running, each child by its process
    group (SIGTERM): the workers first, then, once they are gone or 30 s have passed, the
    service and the Prefect server. The order matters: a worker ended after its Prefect
    server never exits (Prefect's log and event queues wait for the server at exit)."""
    workers = " ".join(f"-{pid}" for pid in worker_pids)
    alive = " || ".join(f"kill -0 {pid}" for pid in worker_pids)
    others = " ".join(f"-{pid}" for pid in other_pids)
    return (f"sh -c 'kill -- {workers}; i=0; while {{ {alive}; }} 2>/dev/null "
            f"&& [ $((i+=1)) -le 150 ]; do sleep 0.2; done; kill -- {others}'")


@contextmanager
def _workers(
    cmds: list[list[str]], env: dict[str, str], folder: Path, keep: bool = False
) -> Iterator[list[subprocess.Popen[bytes]]]:
    with ExitStack() as stack:
        yield [
            stack.enter_context(_process(cmd, env, folder / f"worker-{k}.log", keep))
            for k, cmd in enumerate(cmds)
        ]


def flood_in_numbers(db: Path, flooder: str = "flood") -> str:
    """The flood in a few numbers, from the service's database: how many tasks the flooder
    sent, how long its backlog took to drain, and the waits of its tasks beside those of
    everyone else's tasks submitted while it drained."""
    con = sqlite3.connect(db)
    try:
        rows = con.execute(
            "SELECT tenant, submit_s, start_s, end_s FROM tasks WHERE start_s IS NOT NULL"
        ).fetchall()
    finally:
        con.close()
    import numpy as np

    mine = [r for r in rows if r[0] == flooder]
    if not mine:
        return f"the flood: no task of {flooder!r} ran"
    t0 = min(r[1] for r in mine)
    drained = max(r[2] for r in mine)
    others = [r[2] - r[1] for r in rows if r[0] != flooder and t0 <= r[1] <= drained]
    waits = [r[2] - r[1] for r in mine]

    def stat(w: list[float]) -> str:
        if not w:
            return "none submitted meanwhile"
        return f"mean {np.mean(w):.1f} s, p99 {np.percentile(w, 99):.1f} s ({len(w)} tasks)"

    return (f"the flood in numbers: {flooder!r} sent {len(mine)} tasks at once; its backlog "
            f"drained in {drained - t0:.0f} s; its waits {stat(waits)}; the other tenants' "
            f"tasks submitted meanwhile waited {stat(others)}")


def _let_finish(procs: list[subprocess.Popen[bytes]], limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass


def _watch(
    http: Any,
    tenants: list[str],
    limit_s: float,
    started: float,
    submitter: threading.Thread,
    procs: list[subprocess.Popen[bytes]],
) -> None:
    """Print the queue per tenant every 2 s until it is empty and nothing is leased."""
    click.echo("   time  " + " ".join(f"{t:>8s}" for t in tenants) + "   leased     done")
    deadline = time.monotonic() + limit_s
    while True:
        queues, scalars = _metrics(http)
        leased = int(scalars.get("desched_leased_tasks", 0))
        done = int(scalars.get("desched_tasks_completed_total", 0))
        click.echo(
            f"{time.monotonic() - started:6.0f}s  "
            + " ".join(f"{queues.get(t, 0):8d}" for t in tenants)
            + f"  {leased:7d}  {done:7d}"
        )
        if not submitter.is_alive() and sum(queues.values()) == 0 and leased == 0:
            return
        if all(p.poll() is not None for p in procs):
            raise DeschedError("every worker exited with work left; see worker-*.log")
        if time.monotonic() > deadline:
            click.echo(f"time limit of {limit_s:.0f} s reached; stopping")
            return
        time.sleep(2.0)


def _pipeline(env: dict[str, str], logs: Path, warehouse: Path, folder: Path) -> None:
    """Ingest the decision logs and retrain both models, in a child process that talks to the
    still running Prefect server (so the runs show there)."""
    code = f"""
import json, sys
from desched.flows.ingest import ingest_logs
summary = ingest_logs(logs_dir={str(logs)!r}, db_path={str(warehouse)!r})
print("ingest:", summary.line())
try:
    from desched.flows.retrain import SkippedWorkload, retrain_duration_model
    out = retrain_duration_model(db={str(warehouse)!r}, registry={str(folder / "models" / "duration")!r}, min_rows=40)
    if out.nothing_to_train:
        print("duration model: nothing to train:", out.nothing_to_train)
    for key, card in out.workloads.items():
        if isinstance(card, SkippedWorkload):
            print("duration model", key + ": skipped:", card.skipped)
        else:
            print("duration model", key + ":", card.version, card.verdict, "-", card.reason)
except Exception as exc:
    print("duration model: not trained:", type(exc).__name__, str(exc)[:300])
try:
    from desched.flows.enrich import retrain_memory_model
    from desched.tasks.enrich import NothingToTrain
    card = retrain_memory_model(db_path={str(warehouse)!r}, out={str(folder / "models" / "memory")!r})
    if isinstance(card, NothingToTrain):
        raise RuntimeError(card.nothing_to_train)
    print("memory model:", card.rows, "rows, held-out MAE", round(card.metrics.mae_mb, 3), "MiB",
          "(per-type median:", round(card.metrics.baseline_type_median_mae_mb, 3), "MiB)")
except Exception as exc:
    print("memory model: not trained:", type(exc).__name__, str(exc)[:300])
"""
    click.echo("\npipeline: ingest-logs, retrain-duration-model, retrain-memory-model")
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    (folder / "pipeline.log").write_text(done.stdout + done.stderr)
    for line in done.stdout.splitlines():
        if line.startswith(("ingest:", "duration model", "memory model:")):
            click.echo("  " + line)
    if done.returncode != 0:
        click.echo(f"  pipeline failed (exit {done.returncode}); see {folder / 'pipeline.log'}")
