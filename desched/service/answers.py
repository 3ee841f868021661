"""What both request paths answer with: the FastAPI routes (``app``) and the hot path
(``hot_path``) build a lease, a refusal and a storage failure through these, so that they
answer byte for byte alike (``tests/test_service_hot_path.py`` checks it).

A state change is answered only after its write commits (``committed``): the event loop
awaits the writer thread's ``Pending`` without blocking, so requests that arrive while one
transaction commits share the next one.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from desched.errors import DeschedError
from desched.service.errors import NotLive, ServiceError, TooManyRequests, Unavailable
from desched.service.records import Grant
from desched.service.store import db_errors
from desched.service.writer import Pending

logger = logging.getLogger("desched.service")

COMMIT_TIMEOUT_S = 30.0

T = TypeVar("T")


async def committed(pending: Pending | None) -> None:
    """Wait, without blocking the event loop, until the writer has committed ``pending``.

    After ``COMMIT_TIMEOUT_S`` the request gets 503; the write may still commit later, which
    the protocol tolerates: an unheard lease expires, a submit is retried with its key.
    A cancelled request (the client went away) stops waiting; ``pending`` is never
    cancelled. One loop future and one timer per wait: the writer thread's callback hands
    the outcome over with ``call_soon_threadsafe`` (what ``wait_for(shield(wrap_future))``
    does with three futures, a task-free chain of callbacks and a timeout future).
    """
    if pending is None:
        return
    loop = asyncio.get_running_loop()
    heard: asyncio.Future[None] = loop.create_future()
    pending.add_done_callback(lambda done: loop.call_soon_threadsafe(_hear, heard, done))
    timer = loop.call_later(COMMIT_TIMEOUT_S, _give_up, heard)
    try:
        await heard
    finally:
        timer.cancel()


async def unlocked(lock: threading.Lock, call: Callable[[], T]) -> T:
    """``call()``, which takes the scheduler's ``lock``: on the loop while the lock is free, in
    a worker thread while another thread holds it (a rebuild after a failed commit reads the
    database under it), so the loop never waits on it and ``/livez`` answers through a
    database stall. A lock taken between the look and the call costs a short wait, as ever."""
    if lock.locked():
        return await run_in_threadpool(call)
    return call()


async def lease_call(call: Callable[[], T], refusal_for: Callable[[str], Exception],
                     lock: threading.Lock) -> T:
    """``call()`` (``unlocked``): a heartbeat, completion or failure. For a task that ended
    before (``NotLive``) it raises the refusal its stored state calls for, read by
    ``refusal_for`` in a worker thread: a late retry during a database stall holds up that
    request alone."""
    try:
        return await unlocked(lock, call)
    except NotLive as ended:
        raise await run_in_threadpool(refusal_for, ended.task_id) from None


def _hear(heard: asyncio.Future[None], done: Pending) -> None:
    """On the loop: pass the outcome of the commit on, unless the wait ended already."""
    if heard.done():
        return
    exc = done.exception()
    if exc is None:
        heard.set_result(None)
    else:
        heard.set_exception(exc)


def _give_up(heard: asyncio.Future[None]) -> None:
    if not heard.done():
        heard.set_exception(Unavailable("the database did not commit in time; retry"))


def lease_json(grant: Grant) -> dict[str, Any]:
    """The body of a poll answered with a task: the fields of ``LeaseOut``."""
    t = grant.task
    return {
        "task_id": t.task_id,
        "lease_id": grant.lease_id,
        "lease_expires_at": grant.lease_expires_at,
        "attempt": grant.attempt,
        "tenant": t.tenant,
        "task_type": t.task_type,
        "document_ref": t.document_ref,
        "doc_bytes": t.doc_bytes,
        "pages": t.pages,
        "mem_mb": t.mem_mb,
        "predicted_s": None if math.isnan(t.predicted_s) else t.predicted_s,
        "predicted_mem_mb": t.predicted_mem_mb,
    }


class LeaseResponse(JSONResponse):
    """``JSONResponse`` rendered by one encoder built once, with the very options
    ``JSONResponse.render`` passes to ``json.dumps`` (which builds an encoder per call):
    the same bytes."""

    render_json = json.JSONEncoder(
        ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")
    ).encode

    def render(self, content: Any) -> bytes:
        return self.render_json(content).encode("utf-8")


def lease_response(grant: Grant) -> JSONResponse:
    """The answer to a poll that got a task (``LeaseOut``)."""
    return LeaseResponse(lease_json(grant))


STORAGE_RETRY_S = 2
"""``Retry-After`` of a 503 for a database error (unreachable, read-only, full)."""


def refusal(exc: ServiceError | DeschedError) -> JSONResponse:
    """A refused request: ``{"detail": ...}`` with the error's status (400 for a plain
    ``DeschedError``). A 503 or 429 also says when to retry: the ``Retry-After`` header and
    the same in the body, ``{"detail", "retry": true, "retry_after_s"}`` (nothing was
    acknowledged; a submit retries with the same ``Idempotency-Key``)."""
    status = exc.status if isinstance(exc, ServiceError) else 400
    after = exc.retry_after_s if isinstance(exc, Unavailable | TooManyRequests) else None
    if after is None:
        return JSONResponse({"detail": str(exc)}, status_code=status)
    return retry_later(str(exc), status, after)


def retry_later(detail: str, status: int, after_s: int) -> JSONResponse:
    """A 503 or 429 a client retries after ``after_s`` seconds (header and body)."""
    return JSONResponse(
        {"detail": detail, "retry": True, "retry_after_s": after_s},
        status_code=status,
        headers={"Retry-After": str(after_s)},
    )


def storage_error(exc: Exception) -> JSONResponse:
    """A database error: 503 naming only the error's class, retry in ``STORAGE_RETRY_S``."""
    logger.error("storage error: %s", exc)
    return retry_later(f"storage unavailable ({type(exc).__name__})", 503, STORAGE_RETRY_S)


def storage_errors() -> tuple[type[Exception], ...]:
    """The database drivers' error classes: a 503, never a 500."""
    return db_errors()
