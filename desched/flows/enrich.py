"""Flows of the enrichment workers: ``enrichment-worker`` and ``retrain-memory-model``.

``enrichment_worker`` is the entrypoint of the ``enrichment-worker-cpu`` and
``enrichment-worker-gpu`` deployments (prefect.yaml): it polls the desched service with a
worker token, enriches what it is given (torch; CUDA when present), stores the results in the
warehouse and completes each task with its real duration and peak memory. It stops after
``max_tasks`` tasks or ``idle_exit_s`` seconds without work (None: never).

The token is read from the Prefect Secret block named ``token_block`` (prefect.yaml names
``desched-worker-token``, which ``desched deploy`` saves from $DESCHED_WORKER_TOKEN), else
from the environment variable named ``token_env``; it is never a parameter (parameters are
shown in the Prefect UI).
"""

from __future__ import annotations

import os
import socket
import time
from typing import cast

from prefect import flow, get_run_logger
from prefect.artifacts import create_table_artifact

from desched.enrich.client import LeaseKeeper, ServiceClient, ServiceError, poll_while_fits
from desched.enrich.documents import DEFAULT_SROIE
from desched.enrich.embedding import ModelChoice
from desched.enrich.memory import available_mb
from desched.errors import DeschedError
from desched.models.cards import MemoryCard
from desched.records import Record
from desched.tasks.enrich import (
    NothingToTrain,
    enrich_batch,
    load_enricher,
    report_batch,
    store_batch,
)
from desched.tasks.replay import worker_token

DEFAULT_DB = "data/warehouse.duckdb"
MAX_IDLE_SLEEP_S = 2.0


class WorkerSummary(Record):
    """What an enrichment worker's run did (tasks by outcome, batches) and how it ran; its
    fields in order are the rows of the ``enrichment-worker`` artifact."""

    completed: int
    late: int
    failed: int
    cancelled: int
    batches: int
    worker_id: str
    model: str
    device: str
    max_batch: int
    mem_budget_mb: float


@flow(name="enrichment-worker")
def enrichment_worker(
    service_url: str = "http://127.0.0.1:8000",
    worker_id: str | None = None,
    token_env: str = "DESCHED_WORKER_TOKEN",
    token_block: str | None = None,
    docs_root: str = str(DEFAULT_SROIE),
    db_path: str = DEFAULT_DB,
    model: str = "auto",
    device: str | None = None,
    max_batch: int | None = None,
    mem_budget_mb: float | None = None,
    default_task_mem_mb: float = 64.0,
    max_tasks: int | None = None,
    idle_exit_s: float | None = 30.0,
    poll_interval_s: float = 0.2,
    heartbeat_s: float = 5.0,
) -> WorkerSummary:
    """Poll, enrich, store, complete, until ``max_tasks`` or ``idle_exit_s``.

    ``service_url``: the service's address, or several separated by commas (an active
    service and its standbys): requests fail over between them and are retried with backoff.
    A task its tenant cancels while it runs (a heartbeat gets 410) is neither completed nor
    failed.

    Each round polls while tasks fit (several leases at once up to ``max_batch``), then runs
    three Prefect tasks: enrich-batch, store-results, report-batch. An idle worker polls
    with a backoff from ``poll_interval_s`` up to 2 s. A failed poll is retried after the
    backoff; results that cannot be stored fail their tasks for a retry; a failed report
    leaves the leases to expire, so the service requeues those tasks.

    ``model``: auto (all-MiniLM-L6-v2 when installed, else the tiny built-in model), minilm
    or tiny. ``device``: cuda or cpu (default: cuda when torch sees one). ``max_batch``:
    leases held and enriched together (default 16 on CUDA, 1 on the CPU). ``mem_budget_mb``:
    memory this worker may fill (default: what the device has free at start, x 0.8); each
    poll states what the held leases leave of it.
    """
    logger = get_run_logger()
    if model not in ("auto", "minilm", "tiny"):
        raise DeschedError(f"model {model!r}: expected auto, minilm or tiny")
    enricher = load_enricher(cast(ModelChoice, model), device)
    where = enricher.embedder.device
    batch_cap = max_batch if max_batch is not None else (16 if where.startswith("cuda") else 1)
    budget = mem_budget_mb if mem_budget_mb is not None else 0.8 * available_mb(where)
    ident = worker_id or f"{socket.gethostname()}-{os.getpid()}"
    token = worker_token(token_block, token_env) if token_block else os.environ.get(token_env, "")
    client = ServiceClient(service_url, token, ident)
    totals = {"completed": 0, "late": 0, "failed": 0, "cancelled": 0, "batches": 0}
    logger.info(
        "worker %s: model %s on %s, batches of %d, budget %.0f MiB",
        ident,
        enricher.embedder.name,
        where,
        batch_cap,
        budget,
    )
    idle_since = time.monotonic()
    idle_sleep_s = poll_interval_s
    try:
        with LeaseKeeper(client, heartbeat_s) as keeper:
            while max_tasks is None or totals["completed"] + totals["failed"] < max_tasks:
                room = batch_cap
                if max_tasks is not None:
                    room = min(room, max_tasks - totals["completed"] - totals["failed"])
                # Polling is not a Prefect task: an idle worker would log a task run per poll.
                try:
                    leases = poll_while_fits(client, room, budget, default_task_mem_mb)
                except ServiceError as exc:  # the service restarts: back off and poll again
                    logger.warning("poll failed: %s", exc)
                    leases = []
                if not leases:
                    if idle_exit_s is not None and time.monotonic() - idle_since > idle_exit_s:
                        break
                    time.sleep(min(MAX_IDLE_SLEEP_S, idle_sleep_s))
                    # Doubled, not 2**n: an exponent that grows for as long as the worker
                    # idles overflows a float after about a thousand idle polls.
                    idle_sleep_s = min(MAX_IDLE_SLEEP_S, 2 * idle_sleep_s)
                    continue
                idle_sleep_s = poll_interval_s
                for lease in leases:
                    keeper.hold(lease)
                batch = enrich_batch(enricher, leases, docs_root, batch_cap)
                if batch.results:
                    stored = store_batch(db_path, batch, ident, return_state=True)
                    if not stored.is_completed():  # e.g. the warehouse stayed locked
                        error = f"storing the result failed: {stored.message}"
                        batch.failures += [(lease, error, True) for lease, _ in batch.results]
                        batch.results = []
                reported = report_batch(client, keeper, batch, db_path, return_state=True)
                if reported.is_completed():
                    for k, v in reported.result().items():
                        totals[k] += v
                else:  # the leases expire and the service requeues the tasks
                    logger.warning("reporting failed: %s", reported.message)
                    for lease in leases:
                        keeper.release(lease)
                totals["batches"] += 1
                idle_since = time.monotonic()
    finally:
        client.close()
    summary = WorkerSummary(
        **totals,
        worker_id=ident,
        model=enricher.embedder.name,
        device=where,
        max_batch=batch_cap,
        mem_budget_mb=budget,
    )
    create_table_artifact(
        key="enrichment-worker",
        table=[{"what": k, "value": v} for k, v in summary.model_dump().items()],
        description=f"enrichment worker {ident}: {totals['completed']} documents enriched",
    )
    logger.info(
        "%d documents enriched and completed (%d failed, %d cancelled, %d late) in %d batches",
        totals["completed"], totals["failed"], totals["cancelled"], totals["late"],
        totals["batches"],
    )
    return summary


@flow(name="retrain-memory-model")
def retrain_memory_model(
    db_path: str = DEFAULT_DB, out: str = "models/memory"
) -> MemoryCard | NothingToTrain:
    """Train the peak-memory model on the warehouse's completion records and register it as
    the champion of the registry ``out`` (read by ``desched serve`` through
    DESCHED_MEMORY_MODEL); returns its card, or why nothing was trained on a fresh set-up (no
    warehouse, or too few completions with a peak memory), a run that completes."""
    from desched.tasks.enrich import train_memory

    logger = get_run_logger()
    card = train_memory(db_path, out)
    if isinstance(card, NothingToTrain):
        logger.info("nothing to train: %s", card.nothing_to_train)
        return card
    logger.info(
        "memory model %s: %s rows, held-out MAE %.2f MiB",
        card.version, card.rows, card.metrics.mae_mb,
    )
    return card
