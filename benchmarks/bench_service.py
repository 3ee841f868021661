"""Decisions per second and poll latency of ``desched serve``, beside a plain DB queue.

For each backend (SQLite file, PostgreSQL on loopback) this script:

1. starts ``desched serve`` (a real subprocess, uvicorn on 127.0.0.1) on a fresh database,
   once per ``--variants`` entry: ``hot`` is the service as it ships (well-formed polls and
   completions answered by its hot path), ``fastapi`` the same service with
   ``DESCHED_HOT_PATH=false`` (every request through the FastAPI routes), ``page`` the
   shipped service while an operator page is open on it (a thread fetching ``/ui/state``
   every ``--page-every`` seconds, as the page does, over the timed runs),
2. submits ``--tasks`` tasks over HTTP (batches of 1,000) and reads the service's resident
   memory with that queue,
3. runs ``--workers`` concurrent workers (asyncio, one keep-alive connection each; a
   minimal HTTP/1.1 client, ``RawHttp``, or httpx with ``--client httpx``) for
   ``--seconds``: each polls, then completes the task it got; it reports decisions per
   second (polls answered with a task) and the client-side p50/p99 poll latency; then a
   run half as long that only polls. Each of ``--repeats`` runs starts with ``--tasks``
   queued (the queue is topped up over HTTP first); the table shows medians,
4. runs the anchor on the same database engine: a plain FIFO queue table, ``--workers``
   threads with one connection each, polling by direct SQL (no HTTP, no policy) and
   completing with a second UPDATE. PostgreSQL: ``UPDATE ... WHERE id = (SELECT id ...
   ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id``. SQLite has no SKIP LOCKED;
   the closest plain equivalent is the same UPDATE ... RETURNING of the oldest queued row
   inside ``BEGIN IMMEDIATE`` (the write lock serialises the pollers). Also ``--repeats``
   times, each on a fresh table of ``--tasks`` rows.

The client runs on the same machine as the service and competes with it for the CPUs; the
machine and its load average are recorded. Results go to ``benchmarks/out/service.json``
and a Markdown table on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, machine, markdown_table, write_json

from desched.cli.service import serve_argv

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
SUBMIT_TRIES = 5
SUBMIT_RETRIES = [0]
"""Submits answered 503 and retried (with their idempotency key) during the set-up: on this
shared machine a commit has once taken more than the service's 30 s commit timeout."""
PROFILE_DIR: Path | None = None
"""``--profile DIR``: run the service under cProfile, one profile for the event loop's
thread and one for the writer thread, written to DIR at a clean stop. Times are each
thread's CPU time (``time.thread_time``), not wall time: on a loaded machine, wall time
mostly measures waiting for a CPU or for the GIL."""
SERVE = """
import faulthandler, signal
faulthandler.register(signal.SIGUSR1, all_threads=True)  # a stalled set-up dumps its stacks
from desched.cli import main
main()
"""
"""``desched serve`` as the bench runs it: the CLI, with every thread's stack written to
stderr on SIGUSR1 (sent when a set-up submit is answered 503)."""
SERVICE_PID = [0]
PROFILED_SERVE = """
import cProfile, faulthandler, os, signal, sys, time
faulthandler.register(signal.SIGUSR1, all_threads=True)
from desched.cli import main
# uvicorn re-raises the SIGTERM it stopped on: exit through the finally below.
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
from desched.service import writer
base = os.environ["DESCHED_BENCH_PROFILE"]
run = writer.Writer.run
def profiled_run(self):
    prof = cProfile.Profile(time.thread_time)
    prof.enable()
    try:
        run(self)
    finally:
        prof.disable()
        prof.dump_stats(base + "-writer.prof")
writer.Writer.run = profiled_run
prof = cProfile.Profile(time.thread_time)
prof.enable()
try:
    main()
finally:
    prof.disable()
    prof.dump_stats(base + "-loop.prof")
"""
BATCH = 1000


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) by numpy's default (linear) method; NaN when empty."""
    import numpy as np

    return float(np.percentile(values, q * 100)) if values else float("nan")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of ``pid`` in MiB."""
    fields: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = float(value.split()[0]) / 1024
    return fields["VmRSS"], fields["VmHWM"]


class Database:
    """A fresh SQLite file or PostgreSQL database, removed by ``drop``."""

    def __init__(self, kind: str, tmp: Path) -> None:
        self.kind = kind
        if kind == "sqlite":
            self.url = str(tmp / "bench.db")
            self.name = ""
        else:
            import psycopg

            self.name = f"desched_bench_{uuid.uuid4().hex[:10]}"
            with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE {self.name}")
            self.url = f"postgresql://postgres@127.0.0.1:5432/{self.name}"

    def drop(self) -> None:
        if self.kind == "postgres":
            import psycopg

            with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)")


def start_service(
    db: str, tmp: Path, hot_path: bool, policy: str | None = None, source: Path = ROOT
) -> tuple[subprocess.Popen[bytes], str]:
    """``desched serve`` on a free port, run from the source tree ``source``."""
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(source),
        "DESCHED_HOT_PATH": "true" if hot_path else "false",
        "DESCHED_DB": db,
        "DESCHED_LEASE_S": "600",
        "DESCHED_LOG_DIR": str(tmp / "logs"),
        "DESCHED_PREDICTOR_REGISTRY": str(tmp / "no-registry"),
    }
    options = ("--policy", policy) if policy else ()
    argv = serve_argv(port, *options)
    if PROFILE_DIR is not None:
        PROFILE_DIR.mkdir(parents=True, exist_ok=True)
        env["DESCHED_BENCH_PROFILE"] = str(PROFILE_DIR / f"serve-{port}")
        argv[1:3] = ["-c", PROFILED_SERVE]
    else:
        argv[1:3] = ["-c", SERVE]
    proc = subprocess.Popen(argv, cwd=source, env=env)
    SERVICE_PID[0] = proc.pid
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"service exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("service did not start")


def preload(url: str, tenants: list[str], wanted: dict[int, int]) -> float:
    """Submit ``wanted[k]`` tasks as tenant ``k`` (bearer ``tenants[k]``), in batches of at
    most ``BATCH``; returns tasks per second."""
    t0 = time.perf_counter()
    n = 0
    with httpx.Client(base_url=url, timeout=60) as client:
        for k, count in wanted.items():
            for start in range(0, count, BATCH):
                size = min(BATCH, count - start)
                body = [
                    {
                        "task_type": "extract",
                        "document_ref": f"s3://docs/{k}/{start + j}.pdf",
                        "doc_bytes": 1000 + j,
                        "pages": 1 + j % 7,
                    }
                    for j in range(size)
                ]
                headers = {
                    "Authorization": f"Bearer {tenants[k]}",
                    "Idempotency-Key": uuid.uuid4().hex,
                }
                for attempt in range(SUBMIT_TRIES):
                    r = client.post("/v1/tasks", json=body, headers=headers)
                    if r.status_code != 503 or attempt == SUBMIT_TRIES - 1:
                        break
                    # "retry": the same key, so a submit that did commit creates nothing new
                    SUBMIT_RETRIES[0] += 1
                    print(f"submit answered 503 ({r.text[:120]}): retrying", file=sys.stderr)
                    if SERVICE_PID[0]:  # the service's stacks, for the record
                        os.kill(SERVICE_PID[0], signal.SIGUSR1)
                    time.sleep(1)
                if r.status_code not in (200, 201):
                    raise RuntimeError(f"submit answered {r.status_code}: {r.text[:300]}")
                n += size
    return n / max(time.perf_counter() - t0, 1e-9)


def backlog(url: str) -> dict[str, int]:
    """Queued tasks per tenant name, from ``desched_queue_length{tenant}`` in /metrics."""
    out: dict[str, int] = {}
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        if line.startswith("desched_queue_length{"):
            name = line.split('tenant="', 1)[1].split('"', 1)[0]
            out[name] = int(float(line.split()[-1]))
    return out


def top_up(url: str, tenants: list[str], per_tenant: int) -> float:
    """Bring every tenant back to ``per_tenant`` queued tasks; tasks per second."""
    queued_now = backlog(url)
    wanted = {
        k: per_tenant - queued_now.get(tenant_name(k), 0)
        for k in range(len(tenants))
        if queued_now.get(tenant_name(k), 0) < per_tenant
    }
    return preload(url, tenants, wanted) if wanted else float("nan")


def tenant_name(k: int) -> str:
    return f"tenant{k:04d}"


def cpu_s(pid: int) -> float:
    """User + system CPU seconds ``pid`` has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class RawHttp:
    """A minimal HTTP/1.1 keep-alive client over one asyncio stream (the bench's worker).

    httpx costs the client about as much CPU per request as the service spends answering
    it; on a 2-core machine that shared client then starves the service and inflates the
    latency it measures (a response waits for the client's event loop). This client writes
    each request as one pre-encoded buffer and reads the status line, the headers up to the
    blank line and ``Content-Length`` bytes of body: enough for uvicorn's responses, which
    always carry ``Content-Length`` on this API. It is still real HTTP over loopback TCP.
    """

    def __init__(self, host: str, port: int, token: str) -> None:
        self.host, self.port = host, port
        self.head = (
            f"Host: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
            "Content-Type: application/json\r\n"
        ).encode()
        self.reader: asyncio.StreamReader
        self.writer: asyncio.StreamWriter

    async def connect(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def post(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        data = json.dumps(body, separators=(",", ":")).encode()
        self.writer.write(
            b"POST "
            + path.encode()
            + b" HTTP/1.1\r\n"
            + self.head
            + b"Content-Length: "
            + str(len(data)).encode()
            + b"\r\n\r\n"
            + data
        )
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        body_bytes = await self.reader.readexactly(length) if length else b""
        return status, body_bytes

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


class HttpxHttp:
    """The same interface over ``httpx.AsyncClient`` (``--client httpx``), for comparison."""

    def __init__(self, host: str, port: int, token: str) -> None:
        self.client = httpx.AsyncClient(
            base_url=f"http://{host}:{port}",
            timeout=30,
            headers={"Authorization": f"Bearer {token}"},
        )

    async def connect(self) -> None:
        pass

    async def post(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        r = await self.client.post(path, json=body)
        return r.status_code, r.content

    async def close(self) -> None:
        await self.client.aclose()


CLIENTS: dict[str, Any] = {"raw": RawHttp, "httpx": HttpxHttp}


async def run_workers(
    url: str,
    token: str,
    workers: int,
    seconds: float,
    *,
    complete: bool = True,
    client_kind: str = "raw",
) -> dict[str, Any]:
    """``workers`` concurrent workers: poll, then (if ``complete``) complete the task."""
    latencies: list[float] = []
    decisions = 0
    stop_at = time.perf_counter() + seconds
    host, port = url.removeprefix("http://").split(":")

    async def worker(k: int) -> None:
        nonlocal decisions
        client = CLIENTS[client_kind](host, int(port), token)
        await client.connect()
        poll = {"worker_id": f"w{k}", "free_mem_mb": 4096}
        try:
            while time.perf_counter() < stop_at:
                t0 = time.perf_counter()
                status, body = await client.post("/v1/poll", poll)
                latencies.append(time.perf_counter() - t0)
                if status == 204:
                    await asyncio.sleep(0.01)
                    continue
                if status != 200:
                    raise RuntimeError(f"poll answered {status}: {body[:200]!r}")
                lease = json.loads(body)
                decisions += 1
                if not complete:
                    continue
                status, body = await client.post(
                    f"/v1/tasks/{lease['task_id']}/complete",
                    {"lease_id": lease["lease_id"], "duration_s": 0.5, "peak_mem_mb": 100},
                )
                if status != 204:
                    raise RuntimeError(f"complete answered {status}: {body[:200]!r}")
        finally:
            await client.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(k) for k in range(workers)))
    wall = time.perf_counter() - t0
    return {
        "decisions": decisions,
        "decisions_per_s": decisions / wall,
        "poll_p50_ms": percentile(latencies, 0.50) * 1e3,
        "poll_p99_ms": percentile(latencies, 0.99) * 1e3,
        "poll_mean_ms": statistics.fmean(latencies) * 1e3 if latencies else float("nan"),
    }


def server_latency(url: str) -> dict[str, float]:
    """Mean server-side decision latency, from /metrics: the time a poll holds the scheduler's
    lock (expire, pop, queue the write); the commit and the decision log come after it."""
    text = httpx.get(f"{url}/metrics").text
    values = {}
    for line in text.splitlines():
        if line.startswith("desched_decision_latency_seconds_sum"):
            values["sum"] = float(line.split()[-1])
        elif line.startswith("desched_decision_latency_seconds_count"):
            values["count"] = float(line.split()[-1])
    return {"server_decision_mean_ms": 1e3 * values["sum"] / max(values["count"], 1)}


# Anchor ---------------------------------------------------------------------------------------

ANCHOR_DDL = (
    (
        "CREATE TABLE anchor (id BIGINT PRIMARY KEY, tenant TEXT NOT NULL, state TEXT NOT NULL, "
        "worker TEXT, leased_at DOUBLE PRECISION, done_at DOUBLE PRECISION)"
    ),
    "CREATE INDEX anchor_queued ON anchor (id) WHERE state = 'queued'",
)


def anchor(db: Database, n: int, workers: int, seconds: float) -> dict[str, Any]:
    rows = [(i, f"tenant{i % 16}", "queued") for i in range(n)]
    if db.kind == "sqlite":
        path = str(Path(db.url).with_name("anchor.db"))
        for suffix in ("", "-wal", "-shm"):
            Path(path + suffix).unlink(missing_ok=True)
        setup = sqlite3.connect(path, isolation_level=None)
        setup.execute("PRAGMA journal_mode=WAL")
        for ddl in ANCHOR_DDL:
            setup.execute(ddl)
        setup.execute("BEGIN")
        setup.executemany("INSERT INTO anchor (id, tenant, state) VALUES (?, ?, ?)", rows)
        setup.execute("COMMIT")
        setup.close()

        def connect() -> Any:
            conn = sqlite3.connect(path, isolation_level=None, timeout=60, check_same_thread=False)
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA busy_timeout=60000")
            return conn

        def poll(conn: Any, w: str) -> int | None:
            conn.execute("BEGIN IMMEDIATE")
            row = conn.execute(
                "UPDATE anchor SET state = 'leased', worker = ?, leased_at = ? WHERE id = "
                "(SELECT id FROM anchor WHERE state = 'queued' ORDER BY id LIMIT 1) RETURNING id",
                (w, time.time()),
            ).fetchone()
            conn.execute("COMMIT")
            return None if row is None else int(row[0])

        def complete(conn: Any, i: int) -> None:
            conn.execute(
                "UPDATE anchor SET state = 'done', done_at = ? WHERE id = ?", (time.time(), i)
            )
    else:
        import psycopg

        with psycopg.connect(db.url, autocommit=True) as setup:
            setup.execute("DROP TABLE IF EXISTS anchor")
            for ddl in ANCHOR_DDL:
                setup.execute(ddl)
            with (
                setup.cursor() as cur,
                cur.copy("COPY anchor (id, tenant, state) FROM STDIN") as cp,
            ):
                for row in rows:
                    cp.write_row(row)
            setup.execute("VACUUM ANALYZE anchor")

        def connect() -> Any:
            return psycopg.connect(db.url, autocommit=True)

        def poll(conn: Any, w: str) -> int | None:
            row = conn.execute(
                "UPDATE anchor SET state = 'leased', worker = %s, leased_at = %s WHERE id = "
                "(SELECT id FROM anchor WHERE state = 'queued' ORDER BY id LIMIT 1 "
                "FOR UPDATE SKIP LOCKED) RETURNING id",
                (w, time.time()),
            ).fetchone()
            return None if row is None else int(row[0])

        def complete(conn: Any, i: int) -> None:
            conn.execute(
                "UPDATE anchor SET state = 'done', done_at = %s WHERE id = %s", (time.time(), i)
            )

    latencies: list[list[float]] = [[] for _ in range(workers)]
    counts = [0] * workers
    stop_at = time.perf_counter() + seconds
    start = threading.Barrier(workers + 1)

    def worker(k: int) -> None:
        conn = connect()
        start.wait()
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            i = poll(conn, f"w{k}")
            latencies[k].append(time.perf_counter() - t0)
            if i is None:
                break
            counts[k] += 1
            complete(conn, i)
        conn.close()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(workers)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    flat = [x for xs in latencies for x in xs]
    return {
        "decisions": sum(counts),
        "decisions_per_s": sum(counts) / wall,
        "poll_p50_ms": percentile(flat, 0.50) * 1e3,
        "poll_p99_ms": percentile(flat, 0.99) * 1e3,
        "poll_mean_ms": statistics.fmean(flat) * 1e3 if flat else float("nan"),
    }


class PageViewer(threading.Thread):
    """An open operator page: ``GET /ui/state`` every ``every_s`` seconds until stopped;
    ``fetch_ms`` holds each answer's latency."""

    def __init__(self, url: str, token: str, every_s: float) -> None:
        super().__init__(daemon=True)
        self.url, self.token, self.every_s = url, token, every_s
        self.stopped = threading.Event()
        self.fetch_ms: list[float] = []

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=60) as c:
            while True:
                t0 = time.perf_counter()
                r = c.get("/ui/state", headers={"Authorization": f"Bearer {self.token}"})
                r.raise_for_status()
                self.fetch_ms.append(1e3 * (time.perf_counter() - t0))
                if self.stopped.wait(self.every_s):
                    return


def phase(
    proc: subprocess.Popen[bytes],
    url: str,
    token: str,
    workers: int,
    seconds: float,
    page: tuple[str, float] | None = None,
    **kw: Any,
) -> dict[str, Any]:
    """One timed run of the workers, with the service's CPU time over it and the machine's
    1-minute load average as it started; with ``page`` (operator token, period) an operator
    page is open over it (``PageViewer``)."""
    load = os.getloadavg()[0]
    viewer = None if page is None else PageViewer(url, page[0], page[1])
    cpu0, wall0 = cpu_s(proc.pid), time.perf_counter()
    if viewer is not None:
        viewer.start()
    out = asyncio.run(run_workers(url, token, workers, seconds, **kw))
    if viewer is not None:
        viewer.stopped.set()
        viewer.join()
        out["page_fetches"] = len(viewer.fetch_ms)
        out["page_fetch_p50_ms"] = statistics.median(viewer.fetch_ms)
    cpu = cpu_s(proc.pid) - cpu0
    out["server_cpu_share"] = cpu / (time.perf_counter() - wall0)
    out["server_cpu_ms_per_decision"] = 1e3 * cpu / max(out["decisions"], 1)
    out["load_avg_1m"] = load
    return out


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-metric medians over repeats, with the repeats themselves under ``runs``."""
    keys = [k for k, v in runs[0].items() if isinstance(v, int | float)]
    return {**{k: statistics.median(r[k] for r in runs) for k in keys}, "runs": runs}


def merge(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One configuration's result over its rounds: medians of each measurement's runs."""
    out = {**runs[0], "repeats": len(runs)}
    for key in ("service", "service_poll_only", "anchor"):
        if runs[0][key] is not None:
            out[key] = median_of([x for r in runs for x in r[key]["runs"]])
    out["rss_peak_mb"] = max(r["rss_peak_mb"] for r in runs)
    return out


def bench(
    kind: str,
    n: int,
    tenants: int,
    policy: str | None,
    workers: int,
    seconds: float,
    repeats: int,
    client: str,
    hot_path: bool,
    with_anchor: bool,
    source: tuple[str, Path] = ("this tree", ROOT),
    page_every_s: float | None = None,
) -> dict[str, Any]:
    from desched.service.records import Role
    from desched.service.store import Store

    variant = "hot path" if hot_path else "FastAPI routes only"
    if page_every_s is not None:
        variant += f", operator page open (every {page_every_s:g} s)"
    tmp = Path(tempfile.mkdtemp(prefix=f"bench-service-{kind}-"))
    db = Database(kind, tmp)
    tag = f"[{kind}, {variant}, {source[0]}]"
    try:
        store = Store(db.url)
        store.migrate()
        tenant_tokens = [store.add_principal(Role.TENANT, tenant_name(k)) for k in range(tenants)]
        per_tenant = n // tenants
        worker_token = store.add_principal(Role.WORKER, "bench")
        page = None
        if page_every_s is not None:
            page = (store.add_principal(Role.OPERATOR, "bench-ops"), page_every_s)
        store.close()
        proc, url = start_service(db.url, tmp, hot_path, policy, source[1])
        full: list[dict[str, Any]] = []
        poll_only: list[dict[str, Any]] = []
        try:
            rss_idle, _ = rss_mb(proc.pid)
            submit_rate = top_up(url, tenant_tokens, per_tenant)
            rss_loaded, _ = rss_mb(proc.pid)
            live_policy = httpx.get(f"{url}/healthz", timeout=10).json()["policy"]
            print(
                f"{tag} policy {live_policy}: preloaded {per_tenant} tasks for each of "
                f"{tenants} tenants at {submit_rate:,.0f}/s; RSS {rss_loaded:.0f} MiB",
                file=sys.stderr,
            )
            for r in range(repeats):
                # Every timed run starts with every tenant's queue full: top them up first.
                top_up(url, tenant_tokens, per_tenant)
                full.append(
                    phase(proc, url, worker_token, workers, seconds, page, client_kind=client)
                )
                full[-1].update(server_latency(url))
                print(
                    f"{tag} repeat {r + 1}/{repeats} poll + complete: {full[-1]}", file=sys.stderr
                )
                top_up(url, tenant_tokens, per_tenant)
                poll_only.append(
                    phase(
                        proc,
                        url,
                        worker_token,
                        workers,
                        seconds / 2,
                        page,
                        complete=False,
                        client_kind=client,
                    )
                )
                print(f"{tag} repeat {r + 1}/{repeats} poll only: {poll_only[-1]}", file=sys.stderr)
            _, rss_peak = rss_mb(proc.pid)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        anchors = []
        for r in range(repeats if with_anchor else 0):
            anchors.append(anchor(db, n, workers, seconds))
            print(f"{tag} repeat {r + 1}/{repeats} anchor: {anchors[-1]}", file=sys.stderr)
        return {
            "backend": kind,
            "variant": variant,
            "queued_tasks": per_tenant * tenants,
            "tenants": tenants,
            "policy": live_policy,
            "source": source[0],
            "source_dir": str(source[1]),
            "workers": workers,
            "seconds": seconds,
            "repeats": repeats,
            "client": client,
            "submit_tasks_per_s": submit_rate,
            "rss_idle_mb": rss_idle,
            "rss_with_queue_mb": rss_loaded,
            "rss_peak_mb": rss_peak,
            "service": median_of(full),
            "service_poll_only": median_of(poll_only),
            "anchor": median_of(anchors) if anchors else None,
        }
    finally:
        db.drop()
        shutil.rmtree(tmp, ignore_errors=True)  # the database (~50 MB), its log and WAL


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="sqlite,postgres")
    ap.add_argument("--tasks", type=int, default=100_000, help="tasks queued, over all tenants")
    ap.add_argument(
        "--tenants",
        type=int,
        default=1000,
        help="tenants sharing the queue, each with tasks/tenants queued (the 16-tenant figures "
        "of earlier runs used --tenants 16)",
    )
    ap.add_argument(
        "--policies",
        default="default",
        help="policies the service runs, comma-separated, each measured in turn in this run; "
        "'default' is the service's default policy (e.g. default,fifo: the policy's share)",
    )
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=20.0, help="length of a poll + complete run")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per backend (medians)")
    ap.add_argument(
        "--client",
        choices=sorted(CLIENTS),
        default="raw",
        help="the workers' HTTP client: raw (a minimal keep-alive client) or httpx",
    )
    ap.add_argument(
        "--variants",
        default="hot,fastapi",
        help="service variants, comma-separated: hot (the default service, with its hot path), "
        "fastapi (DESCHED_HOT_PATH=false: every request through the FastAPI routes) and page "
        "(hot, with an operator page open: /ui/state every --page-every seconds)",
    )
    ap.add_argument("--page-every", type=float, default=3.0,
                    help="seconds between two /ui/state fetches of the page variant")
    ap.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="run the service under cProfile (event loop and writer thread), profiles in DIR "
        "(profiling slows it: figures of such a run are not comparable)",
    )
    ap.add_argument(
        "--before",
        type=Path,
        default=None,
        help="also run the service from this source tree (e.g. `git worktree add /tmp/before "
        "HEAD~3`), in the same rounds: before and after in one run",
    )
    args = ap.parse_args()
    global PROFILE_DIR
    PROFILE_DIR = args.profile
    variants = args.variants.split(",")
    if not 1 <= args.tenants <= args.tasks:
        ap.error(f"--tenants {args.tenants}: must be between 1 and --tasks ({args.tasks})")
    if not set(variants) <= {"hot", "fastapi", "page"}:
        ap.error(f"--variants: unknown variant in {args.variants!r} (use hot, fastapi, page)")
    sources = [("this tree", ROOT)]
    if args.before is not None:
        sources.append(("before", args.before.resolve()))
    configs = [
        (kind, policy, source, variant)
        for kind in args.backends.split(",")
        for policy in args.policies.split(",")
        for source in sources
        for variant in variants
    ]
    # Repeats are the outer loop: every configuration gets one run per round, so a drift in
    # the machine's load falls on all of them alike.
    rounds = [
        [
            bench(
                kind,
                args.tasks,
                args.tenants,
                None if policy == "default" else policy,
                args.workers,
                args.seconds,
                1,
                args.client,
                hot_path=variant != "fastapi",
                with_anchor=c == 0,
                source=source,
                page_every_s=args.page_every if variant == "page" else None,
            )
            for c, (kind, policy, source, variant) in enumerate(configs)
        ]
        for _ in range(args.repeats)
    ]
    results = [merge([one[c] for one in rounds]) for c in range(len(configs))]
    payload = {"machine": machine(), "results": results, "submit_retries_503": SUBMIT_RETRIES[0]}
    path = write_json("service.json", payload)
    rows = []
    for r in results:
        measured = [
            (f"desched serve ({r['variant']}): poll + complete", r["service"]),
            (f"desched serve ({r['variant']}): poll only", r["service_poll_only"]),
        ]
        if r["anchor"] is not None:
            measured.append(("anchor: plain FIFO queue, direct SQL, poll + complete", r["anchor"]))
        for name, x in measured:
            served = name.startswith("desched")
            rows.append(
                [
                    r["backend"],
                    f"{r['policy']}, {r['tenants']} tenants, {r['source']}" if served else "",
                    name + (f" (page answers p50 {x['page_fetch_p50_ms']:.0f} ms)"
                            if "page_fetch_p50_ms" in x else ""),
                    f"{x['decisions_per_s']:,.0f}",
                    f"{x['poll_p50_ms']:.2f}",
                    f"{x['poll_p99_ms']:.2f}",
                    f"{x['server_cpu_ms_per_decision']:.2f}" if served else "",
                    f"{r['rss_with_queue_mb']:.0f}" if served else "",
                    f"{x['load_avg_1m']:.1f}" if served else "",
                ]
            )
    print(
        markdown_table(
            [
                "database",
                "policy",
                "queue",
                "decisions/s",
                "poll p50 ms",
                "poll p99 ms",
                "server CPU ms/decision",
                "service RSS MiB",
                "load avg 1m",
            ],
            rows,
        )
    )
    print(f"\n{path}", file=sys.stderr)


if __name__ == "__main__":
    main()
