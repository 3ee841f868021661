"""Start-up soak (slow, e2e): many fresh ``desched serve`` start-ups with paused traffic.

Issue 18's lost write showed only on the quiet path: a fresh SQLite service, one tenant
submitting 1-50 tasks at a time with 0.3-0.6 s pauses and one worker polling with 0.2-0.5 s
pauses. The writer's idle wait timed out between requests and dropped a write that slipped
in: the request hung, memory counted tasks the database never got, and SIGTERM did not stop
the service. Each start-up here runs that traffic for ``DESCHED_SOAK_SECONDS`` (3 s), at the
default writer idle period (0.25 s), at 0.02 s and at 0.002 s (``DESCHED_STANDBY_POLL_S``: the
shorter it is, the more often the idle wait times out next to a request), then counts:

- stalls: requests without an answer within ``STALL_S``;
- acknowledged (2xx) tasks missing from the database;
- disagreements: ``/metrics``' queued and leased counts against the database's;
- the seconds SIGTERM takes to stop the service.

``DESCHED_SOAK_STARTUPS`` (6, alternating between the idle periods of
``DESCHED_SOAK_IDLE_S``, "0.25,0.02,0.002") sets how many start-ups; the figures are printed
(``pytest -s``); README's reliability figures give them for the writer before 758381f too.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.reliability import stored_tasks
from tests.test_service import Service, add_principals, auth, task
from tests.test_service_stateful import parse_metrics

STALL_S = 10.0
"""A request without an answer this long is a stall (the writer's commit timeout is 30 s)."""
STOP_LIMIT_S = 10.0
"""SIGTERM must stop the service within this (then it is killed, and the run counted)."""


@dataclass
class StartUp:
    """What one start-up's traffic saw and what the database holds afterwards."""

    idle_s: str
    acknowledged: set[str] = field(default_factory=set)
    statuses: dict[str, int] = field(default_factory=dict)
    stalls: int = 0
    lost: int = 0
    disagreements: int = 0
    stop_s: float = 0.0

    @property
    def errors(self) -> int:
        return sum(n for k, n in self.statuses.items() if k.endswith(("500", "503")))

    def count(self, what: str, r: httpx.Response) -> None:
        key = f"{what} {r.status_code}"
        self.statuses[key] = self.statuses.get(key, 0) + 1


def tenant(run: StartUp, url: str, token: str, until: float, rng: random.Random) -> None:
    with httpx.Client(base_url=url, timeout=STALL_S) as http:
        n = 0
        while time.monotonic() < until:
            key = f"soak-{n}"
            body = [task() for _ in range(rng.randint(1, 50))]
            try:
                r = http.post("/v1/tasks", json=body,
                              headers={**auth(token), "Idempotency-Key": key})
            except httpx.TimeoutException:
                run.stalls += 1
                continue  # the same key again
            run.count("submit", r)
            if r.status_code in (200, 201):
                run.acknowledged.update(r.json()["task_ids"])
                n += 1
            time.sleep(rng.uniform(0.3, 0.6))


def worker(run: StartUp, url: str, token: str, until: float, rng: random.Random) -> None:
    with httpx.Client(base_url=url, timeout=STALL_S) as http:
        while time.monotonic() < until:
            try:
                r = http.post("/v1/poll", json={"worker_id": "soak"}, headers=auth(token))
                run.count("poll", r)
                if r.status_code == 200:
                    lease = r.json()
                    c = http.post(f"/v1/tasks/{lease['task_id']}/complete",
                                  json={"lease_id": lease["lease_id"], "duration_s": 0.01},
                                  headers=auth(token))
                    run.count("complete", c)
            except httpx.TimeoutException:
                run.stalls += 1
            time.sleep(rng.uniform(0.2, 0.5))


def start_up(folder: Path, idle_s: str, seconds: float, seed: int) -> StartUp:
    """One fresh service, ``seconds`` of paused traffic, the checks, SIGTERM."""
    db = str(folder / "state.db")
    tokens = add_principals(db)
    service = Service(db=db, log_dir=folder / "logs", env={"DESCHED_STANDBY_POLL_S": idle_s})
    run = StartUp(idle_s)
    service.start()
    assert service.proc is not None
    try:
        until = time.monotonic() + seconds
        threads = [
            threading.Thread(target=tenant, args=(run, service.url, tokens.tenant_a, until,
                                                  random.Random(seed))),
            threading.Thread(target=worker, args=(run, service.url, tokens.worker, until,
                                                  random.Random(seed + 1))),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=seconds + 3 * STALL_S)
        metrics = parse_metrics(httpx.get(f"{service.url}/metrics", timeout=STALL_S).text)
        stored = stored_tasks(db)
        queued = sum(state == "queued" for state, _ in stored.values())
        leased = sum(state == "leased" for state, _ in stored.values())
        in_memory = sum(v for k, v in metrics.items() if k.startswith("desched_queue_length{"))
        run.disagreements = int(in_memory != queued) + int(
            metrics["desched_leased_tasks"] != leased)
        t0 = time.monotonic()
        service.proc.send_signal(signal.SIGTERM)
        try:
            service.proc.wait(timeout=STOP_LIMIT_S)
            run.stop_s = time.monotonic() - t0
        except subprocess.TimeoutExpired:
            run.stop_s = float("inf")
    finally:
        service.stop()  # kills what SIGTERM did not stop
    run.lost = len(run.acknowledged - set(stored_tasks(db)))
    return run


def summary(runs: list[StartUp]) -> str:
    lines = []
    for idle in sorted({r.idle_s for r in runs}):
        mine = [r for r in runs if r.idle_s == idle]
        stops = sorted(r.stop_s for r in mine)
        lines.append(
            f"idle {idle} s: {len(mine)} start-ups, {sum(r.stalls > 0 for r in mine)} with a "
            f"stall ({sum(r.stalls for r in mine)} stalls), "
            f"{sum(len(r.acknowledged) for r in mine)} acknowledged, "
            f"{sum(r.lost for r in mine)} lost, {sum(r.disagreements > 0 for r in mine)} with "
            f"memory != database, {sum(r.errors for r in mine)} 5xx answers, "
            f"SIGTERM stop median {stops[len(stops) // 2]:.2f} s max {stops[-1]:.2f} s"
        )
    return "\n".join(lines)


@pytest.mark.slow
@pytest.mark.e2e
def test_fresh_start_ups_with_paused_traffic_never_stall_lose_or_disagree(
    tmp_path: Path,
) -> None:
    startups = int(os.environ.get("DESCHED_SOAK_STARTUPS", "6"))
    seconds = float(os.environ.get("DESCHED_SOAK_SECONDS", "3"))
    idles = os.environ.get("DESCHED_SOAK_IDLE_S", "0.25,0.02,0.002").split(",")
    runs = []
    for k in range(startups):
        idle = idles[k % len(idles)]
        runs.append(start_up(tmp_path / f"run{k}", idle, seconds, seed=k))
    report = summary(runs)
    print(report)
    assert all(r.acknowledged for r in runs), report
    assert sum(r.stalls for r in runs) == 0, report
    assert sum(r.lost for r in runs) == 0, report
    assert sum(r.disagreements for r in runs) == 0, report
    assert max(r.stop_s for r in runs) < STOP_LIMIT_S, report
