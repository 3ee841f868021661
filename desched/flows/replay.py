"""Flow ``replay-log``: a bundled workload replayed into a running ``desched serve``.

The first step of the README's "Run it on a Prefect server": tenants of the ``flood``
scenario (``desched.workloads``) submit its tasks, each on a bundled SROIE receipt, and a
replay worker completes all but ``leave_queued`` of them, reporting the scenario's durations
and peak memory. The service writes every decision and completion to its decision log, so
the next ``ingest-logs`` run loads rows, the retrains have completions to train on, and the
enrichment workers find receipts queued. Composition only: every step is a task of
``desched/tasks/replay.py``.
"""

from __future__ import annotations

import time
import uuid

from prefect import flow, get_run_logger

from desched.tasks import replay as t


@flow(name="replay-log")
def replay_log(
    service_url: str = "http://127.0.0.1:8000",
    store: str = "data/desched.db",
    token_block: str | None = "desched-worker-token",
    scenario: str = "flood",
    tasks: int = 600,
    tenants: int = 6,
    seed: int = 0,
    leave_queued: int = 24,
) -> t.Replayed:
    """Replay ``tasks`` tasks of ``scenario`` (``tenants`` tenants, ``seed``) into the service
    at ``service_url``; leave ``leave_queued`` of them queued for the enrichment workers.

    ``store``: the service's state database (a SQLite path or a postgresql:// URL), where
    the replay registers its tenants (``replay-<tenant>``) as ``desched tenants add`` does.
    ``token_block``: the Prefect Secret block holding a worker token (``desched deploy``
    saves $DESCHED_WORKER_TOKEN there); without it, $DESCHED_WORKER_TOKEN.
    """
    log = get_run_logger()
    started = time.perf_counter()
    jobs = t.replay_jobs(scenario, tasks, tenants, seed, t.bundled_receipts())
    names = sorted({j.tenant for j in jobs})
    log.info("%s: %d tasks of %d tenants to replay into %s", scenario, len(jobs),
             len(names), service_url)
    tokens = t.register_tenants(store, names)
    planned = t.submit_replay(service_url, tokens, jobs, f"replay-{uuid.uuid4().hex[:12]}")
    completed = t.complete_replay(service_url, t.worker_token(token_block), planned,
                                  leave_queued)
    submitted: dict[str, int] = {}
    for j in jobs:
        submitted[j.tenant] = submitted.get(j.tenant, 0) + 1
    replayed = t.Replayed(submitted, completed, len(planned) - sum(completed.values()),
                          time.perf_counter() - started)
    t.publish_replay(replayed, scenario, service_url)
    log.info("replayed %d tasks: %d completed, %d left queued, in %.1f s", len(planned),
             sum(completed.values()), replayed.left_queued, replayed.seconds)
    return replayed
