"""Helpers of the reliability tests (``test_service_faults``, ``test_service_soak``).

- ``Traffic``: tenants and workers that keep going through faults the way a careful client
  does (a submit is retried with its Idempotency-Key until it gets a 2xx; a completion is
  retried until it is answered with something other than a 5xx), and count what they saw:
  acknowledged task ids, 204 completions per task, 5xx answers, stalls (no answer within
  ``timeout_s``).
- ``audit``: the database and the decision log against what ``Traffic`` was told: every
  acknowledged task stored (and, once drained, done), none completed twice.
- ``ThrowawayPostgres``: a PostgreSQL server of this test's own (``initdb`` and ``pg_ctl`` in
  a temporary folder, a free loopback port), which a test may restart or kill at will;
  never the shared server at 5432.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.test_service import Tokens, auth, free_port, task


@dataclass
class Traffic:
    """Submitters and workers against ``urls`` (a client moves to the next address on a
    connection error or a 5xx); see the module docstring."""

    tokens: Tokens
    urls: list[str]
    timeout_s: float = 10.0
    batch: int = 3
    pause_s: float = 0.02
    key_prefix: str = ""
    """Before every Idempotency-Key (a second traffic on the same service needs its own)."""
    accepted: set[str] = field(default_factory=set)
    completions: Counter[str] = field(default_factory=Counter)
    statuses: Counter[str] = field(default_factory=Counter)
    stalls: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.submitting = threading.Event()
        self.working = threading.Event()
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []

    def call(self, http: httpx.Client, what: str, method: str, path: str, token: str,
             body: Any = None, headers: dict[str, str] | None = None,
             keep_going: threading.Event | None = None) -> httpx.Response | None:
        """One request, retried on a connection error or a 5xx (at the next address) until
        it is answered otherwise; None when ``keep_going`` was cleared meanwhile."""
        j = 0
        while keep_going is None or keep_going.is_set():
            url = self.urls[j % len(self.urls)]
            try:
                r = http.request(method, url + path, json=body,
                                 headers={**auth(token), **(headers or {})},
                                 timeout=self.timeout_s)
            except httpx.TimeoutException:
                with self.lock:
                    self.stalls.append(f"{what}: no answer in {self.timeout_s} s")
                j += 1
                continue
            except httpx.TransportError:
                j += 1
                time.sleep(0.05)
                continue
            with self.lock:
                self.statuses[f"{what} {r.status_code}"] += 1
            if r.status_code < 500:
                return r
            j += 1
            time.sleep(0.05)
        return None

    def submitter(self, name: str, token: str) -> None:
        with httpx.Client() as http:
            n = 0
            while self.submitting.is_set():
                key = f"{self.key_prefix}{name}-{n}"
                r = self.call(http, "submit", "POST", "/v1/tasks", token,
                              [task() for _ in range(self.batch)], {"Idempotency-Key": key},
                              keep_going=self.submitting)
                if r is None:
                    return
                if r.status_code not in (200, 201):
                    self.errors.append(f"submit {r.status_code} {r.text}")
                    return
                with self.lock:
                    self.accepted.update(r.json()["task_ids"])
                n += 1
                time.sleep(self.pause_s)

    def worker(self, worker_id: str) -> None:
        token = self.tokens.worker
        with httpx.Client() as http:
            while self.working.is_set():
                r = self.call(http, "poll", "POST", "/v1/poll", token, {"worker_id": worker_id},
                              keep_going=self.working)
                if r is None:
                    return
                if r.status_code == 204:
                    time.sleep(self.pause_s)
                    continue
                if r.status_code != 200:
                    self.errors.append(f"poll {r.status_code} {r.text}")
                    return
                lease = r.json()
                c = self.call(http, "complete", "POST", f"/v1/tasks/{lease['task_id']}/complete",
                              token, {"lease_id": lease["lease_id"], "duration_s": 0.01})
                if c is not None and c.status_code == 204:
                    with self.lock:
                        self.completions[lease["task_id"]] += 1
                elif c is not None and c.status_code not in (409, 410):
                    # 409: the lease ended meanwhile (expired while the service was paused,
                    # or a retried completion whose first try committed)
                    self.errors.append(f"complete {c.status_code} {c.text}")

    def start(self, tenants: int = 2, workers: int = 3) -> None:
        names = [("a", self.tokens.tenant_a), ("b", self.tokens.tenant_b)][:tenants]
        self.submitting.set()
        self.working.set()
        self.threads = [threading.Thread(target=self.submitter, args=nt) for nt in names]
        self.threads += [threading.Thread(target=self.worker, args=(f"w{j}",))
                         for j in range(workers)]
        for t in self.threads:
            t.start()

    def drain(self, url: str, deadline_s: float = 60.0) -> None:
        """Stop submitting, let the workers finish what is queued, then stop them. Drained
        means ``/healthz`` says ok with nothing queued or leased: while memory waits for a
        rebuild (degraded) it shows no task, whatever the database holds."""
        self.submitting.clear()
        deadline = time.monotonic() + deadline_s
        try:
            while True:
                try:
                    h = httpx.get(f"{url}/healthz", timeout=5.0).json()
                except httpx.TransportError:
                    h = {"queued": -1, "leased": -1}
                submitting = any(t.is_alive() for t in self.threads[:2])
                idle = h.get("status") == "ok" and h.get("queued") == h.get("leased") == 0
                if idle and not submitting:
                    return
                assert time.monotonic() < deadline, f"queue never drained: {h}"
                time.sleep(0.1)
        finally:
            self.stop()

    def stop(self) -> None:
        self.submitting.clear()
        self.working.clear()
        for t in self.threads:
            t.join(timeout=2 * self.timeout_s + 5)


def stored_tasks(db: str) -> dict[str, tuple[str, str | None]]:
    """``task_id -> (state, batch_key)`` of every stored task."""
    from desched.service.store import Store

    store = Store(db)
    try:
        rows = store.execute("SELECT task_id, state, batch_key FROM tasks").fetchall()
    finally:
        store.close()
    return {r[0]: (r[1], r[2]) for r in rows}


def ok_records(log_dir: Path) -> Counter[str]:
    """Completion records with status ok in the decision log, per task."""
    ok: Counter[str] = Counter()
    for path in log_dir.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec["kind"] == "completion" and rec["status"] == "ok":
                ok[rec["task_id"]] += 1
    return ok


@dataclass(frozen=True)
class Audit:
    """What the database and the decision log say of one run's traffic."""

    acknowledged: int
    lost: int
    not_done: int
    completed_twice: int
    logged_twice: int
    batch_sizes: frozenset[int]


def audit(db: str, traffic: Traffic, log_dir: Path, batch: int = 3) -> Audit:
    """``traffic``'s acknowledged tasks against the database and the decision log."""
    stored = stored_tasks(db)
    per_key = Counter(key for _, key in stored.values() if key is not None)
    logged = ok_records(log_dir)
    return Audit(
        acknowledged=len(traffic.accepted),
        lost=len(traffic.accepted - set(stored)),
        not_done=sum(stored.get(t, ("", None))[0] != "done" for t in traffic.accepted),
        completed_twice=sum(n > 1 for n in traffic.completions.values()),
        logged_twice=sum(n > 1 for n in logged.values()),
        batch_sizes=frozenset(per_key.values()),
    )


def pg_bin() -> Path | None:
    """The folder of PostgreSQL's server binaries (initdb, pg_ctl), or None."""
    for folder in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (folder / "initdb").exists() and (folder / "pg_ctl").exists():
            return folder
    found = shutil.which("initdb")
    return Path(found).parent if found else None


class ThrowawayPostgres:
    """A PostgreSQL server in a temporary folder on a free loopback port, run as the
    ``postgres`` user when this process is root (initdb refuses root); ``stop`` removes it."""

    def __init__(self) -> None:
        folder = pg_bin()
        if folder is None:
            raise FileNotFoundError("no PostgreSQL server binaries (initdb, pg_ctl)")
        self.bin = folder
        self.dir = Path(tempfile.mkdtemp(prefix="desched-pg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres")
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres",
                  "--no-sync", "-E", "UTF8")
        self.start()

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run([*self.as_user, str(self.bin / tool), *args], check=True,
                       capture_output=True, timeout=120, cwd=self.dir)

    def start(self) -> None:
        options = (f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
                   "-c max_connections=60")
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.dir / "log"),
                  "-w", "-t", "60", "start")

    def restart(self, mode: str = "fast") -> None:
        """Stop (``fast``: roll back and disconnect every session; ``immediate``: as a crash)
        and start again on the same port."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")
        self.start()

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Every process of the server stopped (SIGSTOP) inside the block, as a database
        machine that stalls: sessions stay open and nothing answers."""
        main = int((self.data / "postmaster.pid").read_text().split()[0])
        children = subprocess.run(["pgrep", "-P", str(main)], capture_output=True, text=True,
                                  check=False).stdout.split()
        pids = [main, *map(int, children)]
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)

    @property
    def admin(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def fresh_database(self) -> str:
        """A new, empty database's URL."""
        import psycopg

        name = f"d{os.urandom(6).hex()}"
        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        except subprocess.CalledProcessError:
            pass  # not running
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
