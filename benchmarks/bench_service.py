"""Decisions per second and poll latency of ``desched serve``, beside a plain DB queue.

For each backend (SQLite file, PostgreSQL on loopback) this script:

1. starts ``desched serve`` (a real subprocess, uvicorn on 127.0.0.1) on a fresh database,
2. submits ``--tasks`` tasks over HTTP (batches of 1,000) and reads the service's resident
   memory with that queue,
3. runs ``--workers`` concurrent workers (asyncio + httpx, one keep-alive connection each)
   for ``--seconds``: each polls, then completes the task it got; it reports decisions per
   second (polls answered with a task) and the client-side p50/p99 poll latency,
4. runs the anchor on the same database engine: a plain FIFO queue table, ``--workers``
   threads with one connection each, polling by direct SQL (no HTTP, no policy) and
   completing with a second UPDATE. PostgreSQL: ``UPDATE ... WHERE id = (SELECT id ...
   ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id``. SQLite has no SKIP LOCKED;
   the closest plain equivalent is the same UPDATE ... RETURNING of the oldest queued row
   inside ``BEGIN IMMEDIATE`` (the write lock serialises the pollers).

The client runs on the same machine as the service and competes with it for the CPUs; the
machine and its load average are recorded. Results go to ``benchmarks/out/service.json``
and a Markdown table on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import os
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
BATCH = 1000


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


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


def start_service(db: str, tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {
        **os.environ,
        "DESCHED_DB": db,
        "DESCHED_LEASE_S": "600",
        "DESCHED_LOG_DIR": str(tmp / "logs"),
        "DESCHED_PREDICTOR_REGISTRY": str(tmp / "no-registry"),
    }
    proc = subprocess.Popen(serve_argv(port), cwd=ROOT, env=env)
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


def preload(url: str, token: str, n: int, tenants: list[str]) -> float:
    """Submit ``n`` tasks in batches; returns tasks per second."""
    t0 = time.perf_counter()
    with httpx.Client(base_url=url, timeout=60) as client:
        for start in range(0, n, BATCH):
            size = min(BATCH, n - start)
            body = [
                {
                    "task_type": "extract",
                    "document_ref": f"s3://docs/{start + j}.pdf",
                    "doc_bytes": 1000 + j,
                    "pages": 1 + j % 7,
                }
                for j in range(size)
            ]
            tenant_token = tenants[(start // BATCH) % len(tenants)] if tenants else token
            r = client.post(
                "/v1/tasks", json=body, headers={"Authorization": f"Bearer {tenant_token}"}
            )
            r.raise_for_status()
    return n / (time.perf_counter() - t0)


def cpu_s(pid: int) -> float:
    """User + system CPU seconds ``pid`` has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def run_workers(
    url: str, token: str, workers: int, seconds: float, *, complete: bool = True
) -> dict[str, Any]:
    """``workers`` concurrent workers: poll, then (if ``complete``) complete the task."""
    latencies: list[float] = []
    decisions = 0
    stop_at = time.perf_counter() + seconds
    headers = {"Authorization": f"Bearer {token}"}

    async def worker(k: int) -> None:
        nonlocal decisions
        async with httpx.AsyncClient(base_url=url, timeout=30, headers=headers) as client:
            while time.perf_counter() < stop_at:
                t0 = time.perf_counter()
                r = await client.post("/v1/poll", json={"worker_id": f"w{k}", "free_mem_mb": 4096})
                latencies.append(time.perf_counter() - t0)
                if r.status_code == 204:
                    await asyncio.sleep(0.01)
                    continue
                r.raise_for_status()
                lease = r.json()
                decisions += 1
                if not complete:
                    continue
                c = await client.post(
                    f"/v1/tasks/{lease['task_id']}/complete",
                    json={"lease_id": lease["lease_id"], "duration_s": 0.5, "peak_mem_mb": 100},
                )
                c.raise_for_status()

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


def bench(kind: str, n: int, workers: int, seconds: float) -> dict[str, Any]:
    from desched.service.store import Role, Store

    tmp = Path(tempfile.mkdtemp(prefix=f"bench-service-{kind}-"))
    db = Database(kind, tmp)
    try:
        store = Store(db.url)
        store.migrate()
        tenant_tokens = [store.add_principal(Role.TENANT, f"tenant{k:02d}") for k in range(16)]
        worker_token = store.add_principal(Role.WORKER, "bench")
        store.close()
        proc, url = start_service(db.url, tmp)
        try:
            rss_idle, _ = rss_mb(proc.pid)
            submit_rate = preload(url, tenant_tokens[0], n, tenant_tokens)
            rss_loaded, _ = rss_mb(proc.pid)
            print(
                f"[{kind}] preloaded {n} tasks at {submit_rate:,.0f}/s; RSS {rss_loaded:.0f} MiB",
                file=sys.stderr,
            )
            cpu0, wall0 = cpu_s(proc.pid), time.perf_counter()
            service = asyncio.run(run_workers(url, worker_token, workers, seconds))
            cpu = cpu_s(proc.pid) - cpu0
            service["server_cpu_share"] = cpu / (time.perf_counter() - wall0)
            service["server_cpu_ms_per_decision"] = 1e3 * cpu / max(service["decisions"], 1)
            service.update(server_latency(url))
            cpu0, wall0 = cpu_s(proc.pid), time.perf_counter()
            poll_only = asyncio.run(
                run_workers(url, worker_token, workers, seconds / 2, complete=False)
            )
            cpu = cpu_s(proc.pid) - cpu0
            poll_only["server_cpu_share"] = cpu / (time.perf_counter() - wall0)
            poll_only["server_cpu_ms_per_decision"] = 1e3 * cpu / max(poll_only["decisions"], 1)
            _, rss_peak = rss_mb(proc.pid)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        print(f"[{kind}] service: {service}", file=sys.stderr)
        print(f"[{kind}] service, poll only: {poll_only}", file=sys.stderr)
        anchor_result = anchor(db, n, workers, seconds)
        print(f"[{kind}] anchor: {anchor_result}", file=sys.stderr)
        return {
            "backend": kind,
            "queued_tasks": n,
            "workers": workers,
            "seconds": seconds,
            "submit_tasks_per_s": submit_rate,
            "rss_idle_mb": rss_idle,
            "rss_with_queue_mb": rss_loaded,
            "rss_peak_mb": rss_peak,
            "service": service,
            "service_poll_only": poll_only,
            "anchor": anchor_result,
        }
    finally:
        db.drop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="sqlite,postgres")
    ap.add_argument("--tasks", type=int, default=100_000)
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=20.0)
    args = ap.parse_args()
    results = [
        bench(kind, args.tasks, args.workers, args.seconds) for kind in args.backends.split(",")
    ]
    payload = {"machine": machine(), "results": results}
    path = write_json("service.json", payload)
    rows = []
    for r in results:
        for name, x in (
            ("desched serve: poll + complete", r["service"]),
            ("desched serve: poll only", r["service_poll_only"]),
            ("anchor: plain FIFO queue, direct SQL, poll + complete", r["anchor"]),
        ):
            served = name.startswith("desched")
            rows.append(
                [
                    r["backend"],
                    name,
                    f"{x['decisions_per_s']:,.0f}",
                    f"{x['poll_p50_ms']:.2f}",
                    f"{x['poll_p99_ms']:.2f}",
                    f"{x['server_cpu_ms_per_decision']:.2f}" if served else "",
                    f"{r['rss_with_queue_mb']:.0f}" if served else "",
                ]
            )
    print(
        markdown_table(
            [
                "database",
                "queue",
                "decisions/s",
                "poll p50 ms",
                "poll p99 ms",
                "server CPU ms/decision",
                "service RSS MiB",
            ],
            rows,
        )
    )
    print(f"\n{path}", file=sys.stderr)


if __name__ == "__main__":
    main()
