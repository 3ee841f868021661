"""A worker's side of the service's HTTP API (httpx), and the thread that keeps leases alive.

``ServiceClient`` wraps poll, heartbeat, complete and fail against one or more addresses of
the service (an active one and standbys, high availability on PostgreSQL). A request that
meets a connection error or a 5xx (a standby answers 503) goes to the next address at once;
when every address failed, it is retried with exponential backoff, full jitter (``tenacity``)
for up to ``retry_for_s``; the address that answered last is tried first next time. The
service's writes are safe to repeat under a lease: a repeated complete of a task already
done gets 409, which ``complete`` reports as False.

``LeaseKeeper`` heartbeats every lease it holds every ``period_s`` (the worker flow's
``heartbeat_s``, well under the service's lease period). A heartbeat answered 410 means the
tenant cancelled the task: the keeper drops the lease and remembers it as cancelled, and the
worker neither completes nor fails it (``is_cancelled``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Self

from desched.errors import DeschedError

RETRY_FOR_S = 30.0
"""How long a request keeps being retried (every address, with backoff) by default."""
BACKOFF_S = (0.05, 2.0)
"""Scale and cap of the wait between rounds over the addresses: uniform in [0, min(cap,
scale * 2**round)] ("full jitter")."""
logger = logging.getLogger("desched.enrich")


def addresses(urls: str | Sequence[str]) -> list[str]:
    """Service base URLs from a list or one comma-separated string, without trailing ``/``."""
    items = urls.split(",") if isinstance(urls, str) else list(urls)
    found = [u.strip().rstrip("/") for u in items if u.strip()]
    if not found:
        raise DeschedError("no service address given")
    return found


class HeartbeatAnswer(StrEnum):
    """What a heartbeat learned: the lease was extended, the task was cancelled (410: stop,
    do not complete), or the lease ended (expired and re-leased, or the task finished)."""

    EXTENDED = "extended"
    CANCELLED = "cancelled"
    ENDED = "ended"


class _Retryable(Exception):
    """Every address failed with a connection error or a 5xx."""


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
    """A worker's client; ``urls``: one address, a list, or a comma-separated string of the
    service's addresses (module docstring)."""

    def __init__(
        self,
        urls: str | Sequence[str],
        token: str,
        worker_id: str,
        timeout_s: float = 10.0,
        retry_for_s: float = RETRY_FOR_S,
        transport: Any = None,
    ) -> None:
        """``transport``: an ``httpx`` transport to use instead of the network (tests)."""
        import httpx

        if not token:
            raise DeschedError("no worker token (set the environment variable named by token_env)")
        self.urls = addresses(urls)
        self.current = 0
        self.worker_id = worker_id
        self.retry_for_s = retry_for_s
        self.http = httpx.Client(
            timeout=timeout_s, headers={"Authorization": f"Bearer {token}"}, transport=transport
        )

    def close(self) -> None:
        self.http.close()

    def _post_once(self, path: str, body: dict[str, Any]) -> Any:
        """One round over the addresses, from the one that answered last: the first answer
        below 500; ``_Retryable`` when every address failed."""
        import httpx

        failures = []
        n = len(self.urls)
        for k in range(n):
            j = (self.current + k) % n
            try:
                r = self.http.post(self.urls[j] + path, json=body)
            except httpx.TransportError as exc:
                failures.append(f"{self.urls[j]}: {type(exc).__name__}")
                continue
            if r.status_code >= 500:
                failures.append(f"{self.urls[j]}: {r.status_code}")
                continue
            self.current = j
            return r
        raise _Retryable("; ".join(failures))

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        """``_post_once``, retried with exponential backoff and jitter for ``retry_for_s``;
        ``ServiceError`` naming every address's failure when none answered in time."""
        import tenacity

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(_Retryable),
            wait=tenacity.wait_random_exponential(multiplier=BACKOFF_S[0], max=BACKOFF_S[1]),
            stop=tenacity.stop_after_delay(self.retry_for_s),
            reraise=True,
        )
        try:
            return retrying(self._post_once, path, body)
        except _Retryable as exc:
            raise ServiceError(f"POST {path}: no service answered ({exc})") from None

    def poll(self, free_mem_mb: float | None) -> Lease | None:
        r = self._post("/v1/poll", {"worker_id": self.worker_id, "free_mem_mb": free_mem_mb})
        if r.status_code == 204:
            return None
        if r.status_code != 200:
            raise ServiceError(f"poll: {r.status_code} {r.text[:300]}")
        return Lease.of(r.json())

    def heartbeat(self, lease: Lease) -> HeartbeatAnswer:
        r = self._post(f"/v1/tasks/{lease.task_id}/heartbeat", {"lease_id": lease.lease_id})
        if r.status_code == 200:
            return HeartbeatAnswer.EXTENDED
        if r.status_code == 410:
            return HeartbeatAnswer.CANCELLED
        return HeartbeatAnswer.ENDED

    def complete(
        self, lease: Lease, duration_s: float, peak_mem_mb: float | None, result_ref: str | None
    ) -> bool:
        """Whether the completion was recorded (False: the lease had ended, 409, or the task
        was cancelled, 410)."""
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
        if r.status_code in (404, 409, 410):
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
    """Heartbeats the leases in ``held`` every ``period_s`` from a daemon thread; a lease
    whose task was cancelled moves to ``cancelled``."""

    def __init__(self, client: ServiceClient, period_s: float) -> None:
        self.client = client
        self.period_s = period_s
        self.held: dict[str, Lease] = {}
        self.cancelled: set[str] = set()
        """Task ids whose heartbeat got 410: the worker stops and does not complete them."""
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

    def is_cancelled(self, lease: Lease) -> bool:
        """Whether a heartbeat learned that ``lease``'s task was cancelled by its tenant."""
        with self.lock:
            return lease.task_id in self.cancelled

    def beat(self) -> None:
        """Heartbeat every held lease once (the thread does this every ``period_s``)."""
        with self.lock:
            leases = list(self.held.values())
        for lease in leases:
            try:
                answer = self.client.heartbeat(lease)
            except Exception as exc:  # noqa: BLE001 - the next round tries again
                logger.warning("heartbeat of %s failed: %s", lease.task_id, exc)
                continue
            if answer is HeartbeatAnswer.CANCELLED:
                logger.info("task %s was cancelled by its tenant: stopping it", lease.task_id)
                with self.lock:
                    self.held.pop(lease.task_id, None)
                    self.cancelled.add(lease.task_id)

    def _run(self) -> None:
        while not self.stopped.wait(self.period_s):
            self.beat()
