"""Prefect tasks of the enrichment worker: thin I/O around ``desched.enrich``.

Objects that hold a model or a connection (the enricher, the service client) are passed
between tasks in memory: these tasks have no cache and persist no result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
from prefect import task
from prefect.cache_policies import NO_CACHE

from desched.enrich.client import Lease, LeaseKeeper, ServiceClient
from desched.enrich.documents import BadDocumentRef, read_document
from desched.enrich.embedding import ModelChoice, load_embedder
from desched.enrich.pipeline import TASK_TYPES, Enricher, EnrichResult, EnrichTask
from desched.enrich.results import result_ref, store_results
from desched.models.cards import MemoryCard
from desched.records import Record

RETRY_DELAYS_S = [1.0, 5.0, 15.0]


def _transient(task: Any, task_run: Any, state: Any) -> bool:
    exc = getattr(state.data, "result", state.data)
    return isinstance(exc, (OSError, duckdb.IOException))


@dataclass
class Batch:
    """Leases polled together, and what became of them."""

    leases: list[Lease]
    results: list[tuple[Lease, EnrichResult]] = field(default_factory=list)
    failures: list[tuple[Lease, str, bool]] = field(default_factory=list)
    """(lease, error, retryable)."""


@task(name="load-enricher", cache_policy=NO_CACHE)
def load_enricher(model: ModelChoice, device: str | None) -> Enricher:
    """The embedding model (pinned, offline) and the classifier built on it."""
    return Enricher(load_embedder(model, device))


@task(name="enrich-batch", cache_policy=NO_CACHE)
def enrich_batch(enricher: Enricher, leases: list[Lease], docs_root: str, batch_size: int) -> Batch:
    """Read each lease's document and enrich the readable ones in one batch. A bad reference
    or task type fails that task for good; other errors fail the batch's tasks for a retry."""
    batch = Batch(leases)
    good: list[tuple[Lease, EnrichTask]] = []
    for lease in leases:
        try:
            text = read_document(lease.document_ref, Path(docs_root))
        except BadDocumentRef as exc:
            batch.failures.append((lease, str(exc), False))
            continue
        except OSError as exc:
            batch.failures.append((lease, f"cannot read the document: {exc}", True))
            continue
        if lease.task_type not in TASK_TYPES:
            batch.failures.append((lease, f"unknown task type {lease.task_type!r}", False))
            continue
        good.append((lease, EnrichTask(lease.task_id, lease.task_type, text)))
    if not good:
        return batch
    try:
        results = enricher.run([t for _, t in good], batch_size)
    except Exception as exc:  # noqa: BLE001 - reported to the service, which retries
        batch.failures += [(lease, f"{type(exc).__name__}: {exc}", True) for lease, _ in good]
        return batch
    batch.results = [(lease, r) for (lease, _), r in zip(good, results)]
    return batch


_WAREHOUSE_IO: dict[str, Any] = {
    "retries": len(RETRY_DELAYS_S),
    "retry_delay_seconds": RETRY_DELAYS_S,
    "retry_condition_fn": _transient,
    "cache_policy": NO_CACHE,
}
"""Options of the tasks that write the DuckDB warehouse: retried when it is busy."""


@task(name="store-results", **_WAREHOUSE_IO)
def store_batch(db_path: str, batch: Batch, worker: str) -> int:
    """Write the batch's results to the warehouse (``enrichment_results``)."""
    return store_results(
        db_path, [(r, lease.tenant, lease.document_ref, worker) for lease, r in batch.results]
    )


@task(name="report-batch", cache_policy=NO_CACHE)
def report_batch(
    client: ServiceClient, keeper: LeaseKeeper, batch: Batch, db_path: str
) -> dict[str, int]:
    """Complete each result (real duration, peak memory, result reference) and fail each
    failure; release every lease from the heartbeat thread. A task whose tenant cancelled it
    (a heartbeat got 410) is neither completed nor failed."""
    counts = {"completed": 0, "late": 0, "failed": 0, "cancelled": 0}
    for lease, r in batch.results:
        if keeper.is_cancelled(lease):
            counts["cancelled"] += 1
            continue
        ok = client.complete(lease, r.duration_s, r.peak_mem_mb, result_ref(db_path, r.task_id))
        counts["completed" if ok else "late"] += 1
        keeper.release(lease)
    for lease, error, retryable in batch.failures:
        if keeper.is_cancelled(lease):
            counts["cancelled"] += 1
            continue
        client.fail(lease, error, retryable)
        counts["failed"] += 1
        keeper.release(lease)
    return counts


class NothingToTrain(Record):
    """Why a retrain trained nothing (no warehouse yet, or too few completions): a run that
    completes, not a failure."""

    nothing_to_train: str


@task(name="train-memory-model", **_WAREHOUSE_IO)
def train_memory(db_path: str, out: str) -> MemoryCard | NothingToTrain:
    """Completion records of the warehouse -> a new version of the peak-memory model registry
    ``out``, promoted to champion; its card. With no warehouse yet, or fewer completions with
    a peak memory than the model needs, why nothing was trained."""
    from desched.models.memory_training import MIN_ROWS, train_memory_model, training_rows
    from desched.models.promotion import register

    if not Path(db_path).is_file():
        return NothingToTrain(nothing_to_train=f"no warehouse at {db_path} yet")
    con = duckdb.connect(db_path, read_only=True)
    try:
        frame = con.sql("SELECT * FROM completions").pl()
    finally:
        con.close()
    n = training_rows(frame).height if frame.height else 0
    if n < MIN_ROWS:
        return NothingToTrain(
            nothing_to_train=f"{db_path}: {n} completions with peak memory (need {MIN_ROWS})"
        )
    result = train_memory_model(frame, source=f"{db_path}:completions")
    return register(out, result)
