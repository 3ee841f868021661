"""Prefect tasks of the ``replay-log`` flow: a bundled workload replayed into a running
``desched serve``, so that a fresh set-up has decision logs, completions and queued receipts.

``replay_jobs`` is a pure function of its inputs (a scenario of ``desched.workloads`` and the
bundled receipts' ids): it is cached by its inputs and its source (``INPUTS + TASK_SOURCE``),
so a second replay with the same parameters skips the generation. The others talk to the
service or its state database and are never cached; the tokens they handle never leave
memory (no result is persisted: ``cache_policy=NONE``, ``persist_result=False``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import httpx
from prefect import get_run_logger, task
from prefect.cache_policies import INPUTS, NONE, TASK_SOURCE

from desched.errors import DeschedError

TASK_TYPES = ("extract", "classify", "embed", "ocr_clean")
"""What the enrichment workers do; a workload's task types are mapped onto these."""
SUBMIT_BATCH = 50


@dataclass(frozen=True)
class ReplayJob:
    """One task of the replayed workload: what its tenant submits and what a replay worker
    reports when it completes it (the workload's duration and memory)."""

    tenant: str
    task_type: str
    document_ref: str
    doc_bytes: int
    pages: int
    duration_s: float
    mem_mb: float


@dataclass
class Replayed:
    """What a replay did: tasks submitted and completed per tenant, and what it left queued."""

    submitted: dict[str, int] = field(default_factory=dict)
    completed: dict[str, int] = field(default_factory=dict)
    left_queued: int = 0
    seconds: float = 0.0


@task(name="replay-jobs", cache_policy=INPUTS + TASK_SOURCE)
def replay_jobs(scenario: str, tasks: int, tenants: int, seed: int,
                receipts: list[str]) -> list[ReplayJob]:
    """The scenario's tasks in submission order, each on a bundled receipt (``sroie:NNN``,
    in turn), its task type mapped onto the enrichment types."""
    from desched.workloads import generate

    if not receipts:
        raise DeschedError("no receipts to replay onto (data/samples/sroie is empty)")
    frame = generate(scenario, tasks=tasks, tenants=tenants, seed=seed)
    types = sorted(frame["task_type"].unique().to_list())
    mapped = {t: TASK_TYPES[k % len(TASK_TYPES)] for k, t in enumerate(types)}
    return [
        ReplayJob(
            tenant=f"replay-{row['tenant']}",
            task_type=mapped[row["task_type"]],
            document_ref=receipts[j % len(receipts)],
            doc_bytes=int(row["doc_bytes"]),
            pages=int(row["pages"]),
            duration_s=float(row["duration_s"]),
            mem_mb=float(row["mem_mb"]),
        )
        for j, row in enumerate(frame.iter_rows(named=True))
    ]


@task(name="bundled-receipts", cache_policy=NONE)
def bundled_receipts() -> list[str]:
    """The ``document_ref`` of every bundled SROIE receipt."""
    from desched.enrich.documents import DEFAULT_SROIE, load_sroie

    return [r.ref for r in load_sroie(DEFAULT_SROIE)]


@task(name="register-tenants", cache_policy=NONE, persist_result=False)
def register_tenants(store: str, names: list[str]) -> dict[str, str]:
    """A fresh token for each tenant, in the service's state database (what ``desched
    tenants add`` does; a tenant added before gets a new token, the old one stays valid)."""
    from desched.service.records import Role
    from desched.service.store import Store

    db = Store(store)
    try:
        db.migrate()
        known = set(db.principals(Role.TENANT))
        tokens = {}
        for name in names:
            if name in known:
                db.execute("DELETE FROM principals WHERE role = ? AND name = ?",
                           (Role.TENANT.value, name))
            tokens[name] = db.add_principal(Role.TENANT, name)
        return tokens
    finally:
        db.close()


@task(name="worker-token", cache_policy=NONE, persist_result=False)
def worker_token(block: str | None, env: str = "DESCHED_WORKER_TOKEN") -> str:
    """The worker token: the Prefect ``Secret`` block ``block`` (``desched deploy`` saves it),
    else the environment variable ``env``; an error naming both when neither holds one."""
    import os

    if block:
        from prefect.blocks.system import Secret

        try:
            secret = cast(Secret[str], Secret.load(block))  # sync in a sync task
            return str(secret.get())
        except ValueError:
            get_run_logger().warning("no Secret block %r: reading $%s", block, env)
    token = os.environ.get(env, "")
    if not token:
        raise DeschedError(f"no worker token: no Secret block {block!r} and ${env} is empty "
                           "(desched workers add NAME, then desched deploy)")
    return token


@task(name="submit-replay", cache_policy=NONE, persist_result=False, retries=2,
      retry_delay_seconds=2)
def submit_replay(service_url: str, tokens: dict[str, str], jobs: list[ReplayJob],
                  run_key: str) -> dict[str, tuple[float, float]]:
    """Submit ``jobs`` in order, in batches of consecutive tasks of one tenant, each with an
    idempotency key (``run_key`` and its position: a retry creates nothing twice); the
    service's task id -> (duration, memory) to report at completion."""
    log = get_run_logger()
    out: dict[str, tuple[float, float]] = {}
    with httpx.Client(base_url=service_url, timeout=30) as http:
        j = 0
        while j < len(jobs):
            k = j
            while k < len(jobs) and k - j < SUBMIT_BATCH and jobs[k].tenant == jobs[j].tenant:
                k += 1
            batch = jobs[j:k]
            body = [{"task_type": b.task_type, "document_ref": b.document_ref,
                     "doc_bytes": b.doc_bytes, "pages": b.pages, "mem_mb": b.mem_mb}
                    for b in batch]
            r = http.post("/v1/tasks", json=body, headers={
                "Authorization": f"Bearer {tokens[batch[0].tenant]}",
                "Idempotency-Key": f"{run_key}-{j}"})
            if r.status_code not in (200, 201):
                raise DeschedError(f"{service_url}: submit refused: {r.status_code} {r.text[:200]}")
            for task_id, b in zip(r.json()["task_ids"], batch, strict=True):
                out[task_id] = (b.duration_s, b.mem_mb)
            j = k
    log.info("submitted %d tasks of %d tenants to %s", len(out),
             len({b.tenant for b in jobs}), service_url)
    return out


@task(name="complete-replay", cache_policy=NONE, persist_result=False)
def complete_replay(service_url: str, token: str, planned: dict[str, tuple[float, float]],
                    leave_queued: int, worker_id: str = "replay") -> dict[str, int]:
    """Poll and complete as a worker, reporting each task's planned duration and memory,
    until ``leave_queued`` tasks are left queued (for the enrichment workers) or the queue
    is empty; tasks of earlier runs that it gets are completed as 1 s, 64 MiB. Completed
    tasks per tenant."""
    done: dict[str, int] = {}
    target = max(0, len(planned) - leave_queued)
    with httpx.Client(base_url=service_url, timeout=30,
                      headers={"Authorization": f"Bearer {token}"}) as http:
        while sum(done.values()) < target:
            r = http.post("/v1/poll", json={"worker_id": worker_id})
            if r.status_code == 204:
                break
            if r.status_code != 200:
                raise DeschedError(f"{service_url}: poll refused: {r.status_code} {r.text[:200]}")
            lease = r.json()
            duration_s, mem_mb = planned.get(lease["task_id"], (1.0, 64.0))
            c = http.post(f"/v1/tasks/{lease['task_id']}/complete", json={
                "lease_id": lease["lease_id"], "duration_s": duration_s,
                "peak_mem_mb": mem_mb, "result_ref": "replay"})
            if c.status_code != 204:
                raise DeschedError(f"{service_url}: complete refused: {c.status_code}")
            done[lease["tenant"]] = done.get(lease["tenant"], 0) + 1
    get_run_logger().info("completed %d tasks as worker %s; %d left queued for the "
                          "enrichment workers", sum(done.values()), worker_id,
                          len(planned) - sum(done.values()))
    return done


@task(name="publish-replay", cache_policy=NONE)
def publish_replay(replayed: Replayed, scenario: str, service_url: str) -> None:
    """A table artifact (per tenant: submitted, completed) and a one-line markdown one."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    rows: list[dict[str, Any]] = [
        {"tenant": t, "submitted": n, "completed": replayed.completed.get(t, 0)}
        for t, n in sorted(replayed.submitted.items(), key=lambda kv: -kv[1])
    ]
    create_table_artifact(key="replay-log", table=rows,
                          description=f"{scenario} replayed into {service_url}")
    total = sum(replayed.submitted.values())
    create_markdown_artifact(
        key="replay-log-summary",
        markdown=(f"**{scenario}** replayed into {service_url}: {total} tasks of "
                  f"{len(rows)} tenants submitted, {sum(replayed.completed.values())} completed "
                  f"by the replay worker, {replayed.left_queued} left queued for the "
                  f"enrichment workers, in {replayed.seconds:.1f} s. The service's decision "
                  "log (its --logs folder, data/logs by default) now holds them for "
                  "ingest-logs."),
        description="replay-log")
