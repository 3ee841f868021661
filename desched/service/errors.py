"""Refusals of the live service: each ``ServiceError`` carries the HTTP status it answers with.

Raised by the scheduler and its rooms, and turned into ``{"detail": ...}`` responses by both
request paths (``answers.refusal``). A refusal leaves the scheduler's state unchanged; a
``StaleWrite`` (from the writer) is the one that reports memory and database disagreeing,
after which memory is rebuilt from the database.
"""

from __future__ import annotations

from typing import Any

from desched.errors import DeschedError
from desched.service.records import TaskState


class ServiceError(DeschedError):
    """A refused request; ``status`` is its HTTP status."""

    status = 400


class Unauthorized(ServiceError):
    """No bearer token, or one nobody holds."""

    status = 401


class Forbidden(ServiceError):
    """A token of the wrong role, or another worker's lease."""

    status = 403


class NotFound(ServiceError):
    status = 404


class Conflict(ServiceError):
    """A lease that ended or was superseded, or an idempotency key reused for other tasks."""

    status = 409


class Gone(ServiceError):
    """The task was cancelled by its tenant: a worker holding its lease stops and does not
    complete it."""

    status = 410


class TooManyRequests(ServiceError):
    """A submit over its tenant's rate limit (``admission``): 429, with ``Retry-After``."""

    status = 429

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s: int | None = retry_after_s


class TooLarge(ServiceError):
    """A submit of more tasks than its tenant's burst: no wait lets it pass, so it is 413,
    not 429; the client splits it."""

    status = 413


class Unavailable(ServiceError):
    """The database cannot take the write now (shutting down, unreachable, too slow, a
    failed commit). Nothing the request asked for is acknowledged: a retry after
    ``retry_after_s`` (with the same ``Idempotency-Key`` for a submit) is safe and converges
    to exactly one result."""

    status = 503
    retry_after_s: int | None = 1
    """Seconds a client should wait before retrying (the ``Retry-After`` header)."""


class Standby(Unavailable):
    """This process stands by: another ``desched serve`` holds the database's writer lock.
    A client retries, here or at another address."""

    retry_after_s = 1


class LostLeadership(Unavailable):
    """The writer's database session was lost and another service took the writer lock
    meanwhile: this process stands by from now on."""

    retry_after_s = 1


class StaleWrite(Unavailable):
    """A conditional write matched fewer rows than it must: memory and database disagree
    (a bug, or a row changed behind the service's back). ``evidence`` says which write and
    which row; memory is rebuilt from the database before the batch's callers hear of it."""

    evidence: Any = None
    """The first write that matched no row, with its row as committed
    (``disagreements.StaleRow``), once the writer has found it."""


class NotLive(Exception):
    """Internal, never answered as such: the task a lease call names is no longer live, so
    the answer depends on its state in the database, which the caller reads off the event
    loop and outside the scheduler's lock (``Scheduler.refusal_for``)."""

    def __init__(self, task_id: str) -> None:
        super().__init__(task_id)
        self.task_id = task_id


def ended_refusal(task_id: str, state: str | None) -> ServiceError:
    """What a heartbeat, completion or failure for task ``task_id`` gets when the task has
    no current lease: it is in ``state`` (None: no such task)."""
    if state is None:
        return NotFound(f"no task {task_id!r}")
    if state == TaskState.CANCELLED.value:
        return Gone(f"task {task_id!r} was cancelled by its tenant: stop working on it")
    return Conflict(f"task {task_id!r} has no current lease (state {state})")
