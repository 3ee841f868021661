"""A worker's side of the service's HTTP API (httpx), and the thread that keeps leases alive.

``ServiceClient`` wraps poll, heartbeat, complete and fail; transport errors and 5xx are
retried a few times with backoff (the service's writes are idempotent under a lease: a
repeated complete of a task already done gets 409, which ``complete`` reports as False).
``LeaseKeeper`` heartbeats every lease it holds every ``period_s`` (the worker flow's
``heartbeat_s``), which must stay well under the service's lease period.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Self

from desched.errors import DeschedError

RETRIES = 4
logger = logging.getLogger("desched.enrich")


@dataclass(frozen=True)
class Lease:
    task_id: str
    lease_id: str
    lease_expires_at: float
    tenant: str
    task_type: str
    document_ref: str
    doc_bytes: int | None
    pages: int | None
    predicted_mem_mb: float | None

    @classmethod
    def of(cls, body: dict[str, Any]) -> Lease:
        return cls(
            task_id=body["task_id"],
            lease_id=body["lease_id"],
            lease_expires_at=float(body["lease_expires_at"]),
            tenant=body["tenant"],
            task_type=body["task_type"],
            document_ref=body.get("document_ref", ""),
            doc_bytes=body.get("doc_bytes"),
            pages=body.get("pages"),
            predicted_mem_mb=body.get("predicted_mem_mb"),
        )


class ServiceError(DeschedError):
    pass


class ServiceClient:
    def __init__(self, url: str, token: str, worker_id: str, timeout_s: float = 10.0) -> None:
        import httpx

        if not token:
            raise DeschedError("no worker token (set the environment variable named by token_env)")
        self.worker_id = worker_id
        self.http = httpx.Client(
            base_url=url, timeout=timeout_s, headers={"Authorization": f"Bearer {token}"}
        )

    def close(self) -> None:
        self.http.close()

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        import httpx

        delay = 0.1
        for attempt in range(RETRIES + 1):
            try:
                r = self.http.post(path, json=body)
            except httpx.TransportError as exc:
                if attempt == RETRIES:
                    raise ServiceError(f"POST {path}: {exc}") from None
            else:
                if r.status_code < 500 or attempt == RETRIES:
                    return r
            time.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")

    def poll(self, free_mem_mb: float | None) -> Lease | None:
        r = self._post("/v1/poll", {"worker_id": self.worker_id, "free_mem_mb": free_mem_mb})
        if r.status_code == 204:
            return None
        if r.status_code != 200:
            raise ServiceError(f"poll: {r.status_code} {r.text[:300]}")
        return Lease.of(r.json())

    def heartbeat(self, lease: Lease) -> bool:
        r = self._post(f"/v1/tasks/{lease.task_id}/heartbeat", {"lease_id": lease.lease_id})
        return bool(r.status_code == 200)

    def complete(
        self, lease: Lease, duration_s: float, peak_mem_mb: float | None, result_ref: str | None
    ) -> bool:
        """Whether the completion was recorded (False: the lease had ended, 409)."""
        r = self._post(
            f"/v1/tasks/{lease.task_id}/complete",
            {
                "lease_id": lease.lease_id,
                "duration_s": duration_s,
                "peak_mem_mb": peak_mem_mb,
                "result_ref": result_ref,
            },
        )
        if r.status_code == 204:
            return True
        if r.status_code in (404, 409):
            return False
        raise ServiceError(f"complete {lease.task_id}: {r.status_code} {r.text[:300]}")

    def fail(self, lease: Lease, error: str, retryable: bool) -> str | None:
        r = self._post(
            f"/v1/tasks/{lease.task_id}/fail",
            {"lease_id": lease.lease_id, "error": error[:2000], "retryable": retryable},
        )
        return r.json().get("state") if r.status_code == 200 else None


def poll_while_fits(
    client: ServiceClient, max_batch: int, free_mem_mb: float | None, default_task_mem_mb: float
) -> list[Lease]:
    """Poll until ``max_batch`` leases are held, the memory is used up or nothing fits. Each
    poll states ``free_mem_mb`` less the predicted memory of the leases taken so far
    (``default_task_mem_mb`` for a task without a prediction)."""
    leases: list[Lease] = []
    free = free_mem_mb
    while len(leases) < max_batch and (free is None or free > 0):
        lease = client.poll(free)
        if lease is None:
            break
        leases.append(lease)
        if free is not None:
            need = lease.predicted_mem_mb
            free -= need if need is not None else default_task_mem_mb
    return leases


class LeaseKeeper:
    """Heartbeats the leases in ``held`` every ``period_s`` from a daemon thread."""

    def __init__(self, client: ServiceClient, period_s: float) -> None:
        self.client = client
        self.period_s = period_s
        self.held: dict[str, Lease] = {}
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)

    def hold(self, lease: Lease) -> None:
        with self.lock:
            self.held[lease.task_id] = lease

    def release(self, lease: Lease) -> None:
        with self.lock:
            self.held.pop(lease.task_id, None)

    def _run(self) -> None:
        while not self.stopped.wait(self.period_s):
            with self.lock:
                leases = list(self.held.values())
            for lease in leases:
                try:
                    self.client.heartbeat(lease)
                except Exception as exc:  # noqa: BLE001 - the next round tries again
                    logger.warning("heartbeat of %s failed: %s", lease.task_id, exc)
