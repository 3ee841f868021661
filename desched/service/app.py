"""The HTTP API (FastAPI): ``create_app(settings)`` builds it around one ``Scheduler``.

Tenants submit and read their tasks; workers poll, heartbeat, complete and fail. Every
route names its role's bearer token in OpenAPI. Refusals are JSON ``{"detail": ...}`` with a
4xx status: 401 without a known token, 403 for the wrong role or another worker's lease, 404
for a task the tenant does not own, 409 for a late or stale lease or a reused idempotency
key, 413 for a body over ``max_body_bytes``, 422 for a malformed body. A database that cannot
be reached gives 503.

Well-formed polls and completions of known workers are answered by ``HotPath``, an ASGI
middleware in front of FastAPI that validates with the same models and calls the same
scheduler methods; every other request goes through the FastAPI routes, which are also the
reference the hot path is tested against (``hot_path=False`` turns it off).

Endpoints are coroutines that call the scheduler directly on the event loop (a state
change holds its lock well under a millisecond: the decision in memory plus queueing the
write) and then await the writer thread's commit of that write without blocking the loop,
so requests that arrive while one transaction commits share the next one (group commit).
Reads of the database (a task's record, an unknown token) block the loop for one short
query. The housekeeper is a thread.
"""

import asyncio
import json
import logging
import math
import re
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Request, Response
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param

from desched.errors import DeschedError
from desched.models.interfaces import DurationPredictor, MemoryPredictor
from desched.models.loading import load_duration_predictor, load_memory_predictor
from desched.service import models as m
from desched.service.decision_log import DecisionLog
from desched.service.scheduler import (
    Clock,
    Forbidden,
    Grant,
    NewTask,
    Pending,
    Scheduler,
    ServiceError,
    Unavailable,
)
from desched.service.settings import ServiceSettings
from desched.service.store import Role, Store

logger = logging.getLogger("desched.service")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` (declared or streamed) gets 413.

    The body is read here, at most ``max_bytes + 1`` bytes of it, and replayed to the app.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def _refuse(self, send: Send) -> None:
        body = json.dumps(
            {"detail": f"request body is larger than {self.max_bytes} bytes"}
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length" and (not value.isdigit() or int(value) > self.max_bytes):
                await self._refuse(send)
                return
        body = await read_body(receive, self.max_bytes)
        if body is None:
            await self._refuse(send)
            return
        await self.app(scope, replay(body, receive), send)


COMMIT_TIMEOUT_S = 30.0


async def committed(pending: Pending | None) -> None:
    """Wait, without blocking the event loop, until the writer has committed ``pending``.

    After ``COMMIT_TIMEOUT_S`` the request gets 503; the write may still commit later, which
    the protocol tolerates: an unheard lease expires, a submit is retried with its key.
    """
    if pending is None:
        return
    try:
        await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(pending)), COMMIT_TIMEOUT_S)
    except TimeoutError:
        raise Unavailable("the database did not commit in time; retry") from None


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


def refusal(exc: ServiceError | DeschedError) -> JSONResponse:
    """A refused request: ``{"detail": ...}`` with the error's status (400 for a plain
    ``DeschedError``)."""
    status = exc.status if isinstance(exc, ServiceError) else 400
    return JSONResponse({"detail": str(exc)}, status_code=status)


def storage_error(exc: Exception) -> JSONResponse:
    logger.error("storage error: %s", exc)
    return JSONResponse({"detail": f"storage unavailable ({type(exc).__name__})"}, status_code=503)


def storage_errors() -> tuple[type[Exception], ...]:
    """The database drivers' error classes: a 503, never a 500."""
    import sqlite3

    found: list[type[Exception]] = [sqlite3.Error]
    try:
        import psycopg

        found.append(psycopg.Error)
    except ImportError:
        pass
    return tuple(found)


COMPLETE_PATH = re.compile(r"/v1/tasks/([A-Za-z0-9_-]{1,64})/complete")


class HotPath:
    """ASGI middleware: answers the two requests a worker fleet sends most, a well-formed
    ``POST /v1/poll`` and ``POST /v1/tasks/{id}/complete``, without FastAPI's routing,
    dependency injection and middleware stack (half of the service's CPU per request).

    A request is taken here only when it is one of those two routes, its content type is
    ``application/json``, its bearer token is a known worker's and its body is
    JSON that the route's own pydantic model (``PollIn``, ``CompleteIn``) accepts; it then
    calls the same scheduler method and gets the same response (``lease_json``,
    ``refusal``, ``storage_error``) as the FastAPI route. Anything else (a malformed or
    unauthenticated request, any other route) is replayed to the FastAPI app, the
    reference, which answers it. ``tests/test_service_hot_path.py`` sends random request
    sequences to a service with and one without this path and compares every answer.
    """

    def __init__(self, app: ASGIApp, sched: Scheduler) -> None:
        self.app = app
        self.sched = sched
        self.storage_errors = storage_errors()

    def _worker(self, authorization: bytes | None) -> str | None:
        """The worker holding the bearer token, as ``HTTPBearer`` + ``role_of`` read it."""
        if not authorization:
            return None
        scheme, credentials = get_authorization_scheme_param(authorization.decode("latin-1"))
        if not (scheme and credentials) or scheme.lower() != "bearer":
            return None
        found = self.sched.principal(credentials)
        return found.name if found is not None and found.role is Role.WORKER else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        task_id = None
        if path != "/v1/poll":
            match = COMPLETE_PATH.fullmatch(path)
            if match is None:
                await self.app(scope, receive, send)
                return
            task_id = match[1]
        authorization = content_type = None
        for name, value in scope["headers"]:
            if name == b"authorization" and authorization is None:
                authorization = value
            elif name == b"content-type" and content_type is None:
                content_type = value
        body = await read_body(receive) or b""  # unbounded: BodyLimit has bounded it
        response = None
        if content_type == b"application/json":  # FastAPI refuses a body without one
            worker = self._worker(authorization)
            if worker is not None:
                response = await self._answer(worker, task_id, body)
        if response is None:
            await self.app(scope, replay(body, receive), send)
            return
        await response(scope, receive, send)

    async def _answer(self, worker: str, task_id: str | None, body: bytes) -> Response | None:
        """The response, or None to leave the request to the FastAPI route."""
        try:
            if task_id is None:
                poll = m.PollIn.model_validate(json.loads(body))
            else:
                done = m.CompleteIn.model_validate(json.loads(body))
        except (ValueError, RecursionError):  # not JSON (or nested too deep), not the model
            return None
        try:
            if task_id is None:
                grant, pending = self.sched.poll(worker, poll.worker_id, poll.free_mem_mb)
                if grant is None:
                    return Response(status_code=204)
                await committed(pending)
                return JSONResponse(lease_json(grant))
            await committed(
                self.sched.complete(
                    worker,
                    task_id,
                    done.lease_id,
                    done.duration_s,
                    done.peak_mem_mb,
                    done.result_ref,
                )
            )
            return Response(status_code=204)
        except (ServiceError, DeschedError) as exc:
            return refusal(exc)
        except self.storage_errors as exc:
            return storage_error(exc)


async def read_body(receive: Receive, max_bytes: int | None = None) -> bytes | None:
    """The whole request body, or None as soon as it grows past ``max_bytes``."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if max_bytes is not None and size > max_bytes:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands ``body`` over once, then defers to ``receive``."""
    sent = False

    async def again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again


def load_memory_model(registry: Path | None) -> MemoryPredictor | None:
    """The champion of the peak-memory model registry, or None (no registry, no champion, a
    corrupt model, or no LightGBM); the reason is logged when a registry exists."""
    if registry is None or not Path(registry).exists():
        return None
    try:
        model, reason = load_memory_predictor(registry)
    except (ImportError, OSError) as exc:
        model, reason = None, f"{type(exc).__name__}: {exc}"
    if model is None:
        logger.warning("no memory model: %s", reason)
    return model


def load_predictor(registry: Path | None) -> DurationPredictor | None:
    """The champion of the duration model registry, or None (no registry, no champion, a
    corrupt model, or no lleaves); the reason is logged when a registry exists."""
    if registry is None or not Path(registry).exists():
        return None
    try:
        predictor, reason = load_duration_predictor(registry)
    except ImportError as exc:
        predictor, reason = None, f"{type(exc).__name__}: {exc}"
    if predictor is None:
        logger.warning("no duration predictor: %s", reason)
    return predictor


class Housekeeper(threading.Thread):
    """Expires leases, picks up policy switches and saves the policy's state (at most every
    ``state_save_s``) every ``period_s``."""

    def __init__(self, scheduler: Scheduler, period_s: float) -> None:
        super().__init__(name="desched-housekeeper", daemon=True)
        self.scheduler = scheduler
        self.period_s = period_s
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.period_s):
            try:
                self.scheduler.sweep()
                self.scheduler.refresh_policy()
                self.scheduler.save_policy_state()
            except Exception:  # keep sweeping; the next round retries
                logger.exception("housekeeping failed")


def build_scheduler(settings: ServiceSettings) -> Scheduler:
    """A scheduler over the settings' database, predictor and decision-log folder."""
    store = Store(settings.db, durability=settings.durability)
    return Scheduler(
        store,
        write_store=Store(settings.db, durability=settings.durability),
        lease_s=settings.lease_s,
        max_retries=settings.max_retries,
        clock=Clock(),
        log=DecisionLog(settings.log_dir),
        predictor=load_predictor(settings.predictor_registry),
        policy=settings.policy,
        policy_params=settings.policy_params,
        memory_model=load_memory_model(settings.memory_model),
        max_fit_skips=settings.max_fit_skips,
        state_save_s=settings.state_save_s,
    )


def create_app(settings: ServiceSettings, scheduler: Scheduler | None = None) -> FastAPI:
    """The API over ``scheduler`` (built from ``settings`` when not given); the scheduler is
    started, and its housekeeper run, for the lifetime of the app."""
    sched = scheduler if scheduler is not None else build_scheduler(settings)
    bearer = HTTPBearer(auto_error=False, description="a tenant or worker token")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        sched.start()
        keeper = Housekeeper(sched, settings.sweep_s)
        keeper.start()
        try:
            yield
        finally:
            keeper.stopped.set()
            keeper.join(timeout=5)
            sched.stop()

    app = FastAPI(
        title="desched",
        version="1",
        summary="Task orchestrator of the multi-tenant Document Enrichment Service",
        lifespan=lifespan,
        responses={
            401: {"model": m.Problem, "description": "missing or unknown token"},
            403: {"model": m.Problem, "description": "token of the wrong role"},
            413: {"model": m.Problem, "description": "body too large"},
            422: {"model": m.Problem, "description": "malformed request"},
            503: {"model": m.Problem, "description": "database unreachable"},
        },
    )
    if settings.hot_path:
        app.add_middleware(HotPath, sched=sched)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)  # outermost

    @app.exception_handler(ServiceError)
    async def refused(request: Request, exc: ServiceError) -> JSONResponse:
        return refusal(exc)

    @app.exception_handler(RequestValidationError)
    async def malformed(request: Request, exc: RequestValidationError) -> JSONResponse:
        # The offending input is not echoed: it may be huge, or not JSON (NaN, bytes).
        errors = [
            {
                "loc": [str(p) for p in e.get("loc", ())],
                "msg": str(e.get("msg", "")),
                "type": str(e.get("type", "")),
            }
            for e in exc.errors()[:20]
        ]
        return JSONResponse({"detail": errors}, status_code=422)

    @app.exception_handler(DeschedError)
    async def bad(request: Request, exc: DeschedError) -> JSONResponse:
        return refusal(exc)

    for error in storage_errors():
        app.add_exception_handler(error, lambda r, e: storage_error(e))

    def role_of(creds: HTTPAuthorizationCredentials | None, role: Role) -> str:
        if creds is None:
            raise _Unauthorized("missing bearer token (Authorization: Bearer <token>)")
        found = sched.principal(creds.credentials)
        if found is None:
            raise _Unauthorized("unknown token")
        if found.role is not role:
            raise Forbidden(f"this route needs a {role.value} token")
        return found.name

    Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]

    async def tenant(creds: Credentials) -> str:
        return role_of(creds, Role.TENANT)

    async def worker(creds: Credentials) -> str:
        return role_of(creds, Role.WORKER)

    Tenant = Annotated[str, Depends(tenant)]
    Worker = Annotated[str, Depends(worker)]
    TaskId = Annotated[str, PathParam(pattern=m.TASK_ID_PATTERN, description="task id")]

    @app.exception_handler(_Unauthorized)
    async def unauthorized(request: Request, exc: _Unauthorized) -> JSONResponse:
        return JSONResponse(
            {"detail": str(exc)}, status_code=401, headers={"WWW-Authenticate": "Bearer"}
        )

    @app.post(
        "/v1/tasks",
        response_model=m.Submitted,
        status_code=201,
        tags=["tenants"],
        responses={
            200: {"model": m.Submitted, "description": "replay of an earlier submit"},
            409: {"model": m.Problem, "description": "key reused for other tasks"},
        },
    )
    async def submit(
        body: m.TaskList | m.TaskIn,
        tenant: Tenant,
        response: Response,
        idempotency_key: Annotated[
            str | None,
            Header(
                pattern=m.NAME_PATTERN,
                description="a retry with the same key and tasks creates nothing new",
            ),
        ] = None,
    ) -> m.Submitted:
        """Submit one task or a list; the predicted duration is computed here, once."""
        items = body if isinstance(body, list) else [body]
        ids, created, pending = sched.submit(
            tenant, [NewTask(**t.model_dump()) for t in items], idempotency_key
        )
        await committed(pending)
        if not created:
            response.status_code = 200
        return m.Submitted(task_ids=ids, created=created)

    @app.get(
        "/v1/tasks/{task_id}",
        response_model=m.TaskView,
        tags=["tenants"],
        responses={404: {"model": m.Problem, "description": "no such task of this tenant"}},
    )
    async def get_task(task_id: TaskId, tenant: Tenant) -> m.TaskView:
        """State, times and result reference of one of the tenant's tasks."""
        return m.TaskView(**sched.task_view(tenant, task_id))

    @app.post(
        "/v1/poll",
        response_model=m.LeaseOut,
        tags=["workers"],
        responses={204: {"description": "no queued task"}},
    )
    async def poll(body: m.PollIn, worker: Worker) -> Any:
        """The policy's choice among the tasks that fit ``free_mem_mb``, with a lease; 204
        when there is none."""
        grant, pending = sched.poll(worker, body.worker_id, body.free_mem_mb)
        if grant is None:
            return Response(status_code=204)
        await committed(pending)
        return JSONResponse(lease_json(grant))

    lease_errors: dict[int | str, dict[str, Any]] = {
        404: {"model": m.Problem, "description": "no such task"},
        409: {"model": m.Problem, "description": "the lease ended or was superseded"},
    }

    @app.post(
        "/v1/tasks/{task_id}/heartbeat",
        response_model=m.HeartbeatOut,
        tags=["workers"],
        responses=lease_errors,
    )
    async def heartbeat(task_id: TaskId, body: m.LeaseIn, worker: Worker) -> m.HeartbeatOut:
        """Extend the lease by the lease period."""
        expires, pending = sched.heartbeat(worker, task_id, body.lease_id)
        await committed(pending)
        return m.HeartbeatOut(lease_expires_at=expires)

    @app.post(
        "/v1/tasks/{task_id}/complete", status_code=204, tags=["workers"], responses=lease_errors
    )
    async def complete(task_id: TaskId, body: m.CompleteIn, worker: Worker) -> Response:
        """Report success with the real duration, peak memory and result reference."""
        await committed(
            sched.complete(
                worker, task_id, body.lease_id, body.duration_s, body.peak_mem_mb, body.result_ref
            )
        )
        return Response(status_code=204)

    @app.post(
        "/v1/tasks/{task_id}/fail",
        response_model=m.FailOut,
        tags=["workers"],
        responses=lease_errors,
    )
    async def fail(task_id: TaskId, body: m.FailIn, worker: Worker) -> m.FailOut:
        """Report failure: the task retries up to the limit, then is dead-lettered."""
        state, pending = sched.fail(worker, task_id, body.lease_id, body.error, body.retryable)
        await committed(pending)
        return m.FailOut(state=state.value)

    @app.get("/healthz", response_model=m.Health, tags=["operations"])
    async def healthz() -> m.Health:
        """Liveness, the live policy and queue sizes."""
        return m.Health(**sched.health())

    @app.get("/metrics", response_class=PlainTextResponse, tags=["operations"])
    async def metrics() -> PlainTextResponse:
        """Prometheus text: queue length per tenant, decisions, lease expiries, latency."""
        return PlainTextResponse(
            sched.metrics(), media_type="text/plain; version=0.0.4; charset=utf-8"
        )

    app.state.scheduler = sched
    return app


class _Unauthorized(ServiceError):
    status = 401
