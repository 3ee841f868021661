"""The HTTP API (FastAPI): ``create_app(settings)`` builds it around one ``Scheduler``.

Tenants submit, read and cancel their tasks; workers poll, heartbeat, complete and fail.
Every route names its role's bearer token in OpenAPI. Refusals are JSON ``{"detail": ...}``
with a 4xx status: 401 without a known, unrevoked, unexpired token, 403 for the wrong role
or another worker's lease, 404 for a task the tenant does not own, 409 for a late or stale
lease, a reused idempotency key or a cancel of a task that ended, 410 for a lease of a task
its tenant cancelled, 413 for a body over ``max_body_bytes`` or a submit of more tasks than
its tenant's burst, 422 for a malformed body (a value of the wrong JSON type included:
request bodies are strict). A database that cannot be reached or did not commit gives 503,
as does every route of a service that is stopping or stands by (another one holds the
database's writer lock); every 503 says when to retry (``Retry-After``, and ``retry`` and
``retry_after_s`` in the body) and acknowledges nothing. ``/healthz`` is the readiness check (503 while
standing by), ``/livez`` the liveness check.

The routes here are the reference request path. Well-formed polls and completions of known
workers are answered by ``hot_path.HotPath``, an ASGI layer in front of FastAPI that
validates with the same schemas, calls the same scheduler methods and answers through the
same ``answers`` (``hot_path=False`` turns it off); ``asgi.BodyLimit`` bounds every body first.
Both sit in front of the whole FastAPI application (``ServiceApp``), not inside its
middleware stack, so a hot request pays for none of FastAPI's and Starlette's outer layers
(error middleware, telemetry check); what the hot path leaves goes through all of them.

Endpoints are coroutines that call the scheduler directly on the event loop (a state
change holds its lock well under a millisecond: the decision in memory plus queueing the
write) and then await the writer thread's commit of that write without blocking the loop,
so requests that arrive while one transaction commits share the next one (group commit).
Reads of the database (a task's record, an unknown token) block the loop for one short
query. The housekeeper is a thread.
"""

import logging
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Query, Request, Response
from fastapi import Path as PathParam
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from desched.errors import DeschedError
from desched.models.interfaces import DurationPredictor, MemoryPredictor
from desched.models.loading import load_duration_predictor, load_memory_predictor
from desched.service import predictions
from desched.service import schemas as m
from desched.service.answers import (
    committed,
    lease_call,
    lease_response,
    refusal,
    storage_error,
    storage_errors,
    unlocked,
)
from desched.service.asgi import ASGIApp, BodyLimit, Receive, Scope, Send
from desched.service.clock import Clock
from desched.service.decision_log import DecisionLog
from desched.service.errors import Forbidden, ServiceError, Unauthorized, Unavailable
from desched.service.hot_path import HotPath
from desched.service.overview import PAGE, OverviewCache
from desched.service.records import NewTask, Principal, Role
from desched.service.scheduler import Scheduler
from desched.service.settings import ServiceSettings
from desched.service.store import Store, db_errors
from desched.service.telemetry import CONTENT_TYPE
from desched.service.writer import Outage

logger = logging.getLogger("desched.service")


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
    """Expires leases, picks up policy switches, token revocations and tenant controls, and
    saves the policy's state (at most every ``state_save_s``) every ``period_s``. A database
    it cannot reach (a driver error: a server restarted, its sessions terminated) is an
    outage, one warning when it starts and one when a round gets through (``Outage``), not a
    traceback per round; any other failure is logged with its traceback."""

    def __init__(self, scheduler: Scheduler, period_s: float) -> None:
        super().__init__(name="desched-housekeeper", daemon=True)
        self.scheduler = scheduler
        self.period_s = period_s
        self.stopped = threading.Event()
        self.outage = Outage("the housekeeper's database session", period_s)

    def run(self) -> None:
        unreachable = db_errors()
        while not self.stopped.wait(self.period_s):
            try:
                self.scheduler.sweep()
                self.scheduler.refresh_tokens()
                self.scheduler.refresh_controls()
                self.scheduler.refresh_policy()
                self.scheduler.save_policy_state()
            except Unavailable:  # the writer takes no more writes: the service is stopping
                continue
            except unreachable as exc:  # the store reconnects on the next round's statement
                self.outage.lost(exc)
                continue
            except Exception:  # keep sweeping; the next round retries
                logger.exception("housekeeping failed")
                continue
            self.outage.over()


class ModelWatcher(threading.Thread):
    """Follows the duration registry's champion (``Predictions.refresh``) on a thread of its
    own, so that loading a new model (a first load compiles it: seconds) delays no lease
    sweep; a model that loads where none served lets the prediction policies run."""

    def __init__(self, scheduler: Scheduler) -> None:
        super().__init__(name="desched-model-watcher", daemon=True)
        self.scheduler = scheduler
        self.stopped = threading.Event()

    def run(self) -> None:
        sched = self.scheduler
        while True:  # a first look at once: a champion that failed at the start is said
            try:
                if sched.predictions.refresh(sched.lock):
                    with sched.lock:
                        sched.host.model_loaded()
            except Exception:  # keep watching; the next check tries again
                logger.exception("following the duration registry failed")
            if self.stopped.wait(predictions.MODEL_CHECK_S):
                return


def build_scheduler(settings: ServiceSettings) -> Scheduler:
    """A scheduler over the settings' database, predictor and decision-log folder."""
    store = Store(settings.db, durability=settings.durability)
    sched = Scheduler(
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
        standby_poll_s=settings.standby_poll_s,
    )
    sched.predictions.registry = settings.predictor_registry  # follows its champion
    return sched


class ServiceApp(FastAPI):
    """FastAPI with a front door: every ASGI call goes through ``front`` (``BodyLimit``, then
    ``HotPath`` when on), which hands what it does not answer to FastAPI itself."""

    front: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        front = self.front
        if front is None:
            await super().__call__(scope, receive, send)
        else:
            await front(scope, receive, send)

    async def behind(self, scope: Scope, receive: Receive, send: Send) -> None:
        """FastAPI's own handling of a request (its middleware stack and routes)."""
        await super().__call__(scope, receive, send)


def body_errors(errors: list[dict[str, Any]], content_type: str | None) -> list[dict[str, Any]]:
    """A 422's errors without the noise of a body that may be one task or a list: the branch
    the body did not take ("Input should be a valid list" beside an object's real error) is
    dropped when the other branch has errors of its own; a body refused whole while the
    request does not say it is JSON is said to need ``Content-Type: application/json``."""
    shallow = {"list_type", "dict_type", "model_type", "model_attributes_type"}
    deep = [e for e in errors if e["loc"][:1] == ["body"] and len(e["loc"]) > 2]
    if deep:
        errors = [e for e in errors
                  if not (e["loc"][:1] == ["body"] and len(e["loc"]) == 2 and e["type"] in shallow)]
    whole = [e for e in errors if e["loc"][:1] == ["body"] and len(e["loc"]) <= 2]
    if whole and "json" not in (content_type or "").lower():
        errors = [{"loc": ["header", "content-type"], "msg": "the body must be JSON, sent "
                   "with Content-Type: application/json", "type": "content_type"}, *errors]
    return errors


def create_app(settings: ServiceSettings, scheduler: Scheduler | None = None) -> FastAPI:
    """The API over ``scheduler`` (built from ``settings`` when not given); the scheduler is
    started, and its housekeeper run, for the lifetime of the app."""
    sched = scheduler if scheduler is not None else build_scheduler(settings)
    overview = OverviewCache(settings.db, settings.operator_refresh_s)
    bearer = HTTPBearer(auto_error=False, description="a tenant or worker token")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        sched.start()
        keeper = Housekeeper(sched, settings.sweep_s)
        keeper.start()
        watcher = ModelWatcher(sched)
        watcher.start()
        try:
            yield
        finally:
            keeper.stopped.set()
            watcher.stopped.set()
            keeper.join(timeout=2)  # a daemon: one stuck on the database is left behind
            sched.stop(settings.shutdown_grace_s)
            overview.close()

    app = ServiceApp(
        title="desched",
        version="1",
        summary="Task orchestrator of the multi-tenant Document Enrichment Service",
        lifespan=lifespan,
        responses={
            401: {"model": m.Problem, "description": "missing or unknown token"},
            403: {"model": m.Problem, "description": "token of the wrong role, or a lease "
                  "held by another worker"},
            413: {
                "model": m.Problem,
                "description": "body too large, or a submit of more tasks than the tenant's "
                "burst (split it)",
            },
            422: {"model": m.Problem, "description": "malformed request"},
            503: {
                "model": m.Problem,
                "description": "nothing acknowledged: the database is unreachable or did not "
                "commit, the service is stopping, or it stands by; retry after Retry-After "
                "(also retry_after_s in the body), a submit with the same Idempotency-Key",
            },
        },
    )
    inner: ASGIApp = HotPath(app.behind, sched) if settings.hot_path else app.behind
    app.front = BodyLimit(inner, max_bytes=settings.max_body_bytes)  # outermost

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
            for e in exc.errors()
        ]
        errors = body_errors(errors, request.headers.get("content-type"))
        return JSONResponse({"detail": errors[:20]}, status_code=422)

    @app.exception_handler(DeschedError)
    async def bad(request: Request, exc: DeschedError) -> JSONResponse:
        return refusal(exc)

    @app.exception_handler(StarletteHTTPException)
    async def unreadable(request: Request, exc: StarletteHTTPException) -> Response:
        # FastAPI answers a body json.loads refuses with other than a JSONDecodeError (an
        # integer of more than 4,300 digits, bytes that are not UTF-8) with a bare 400;
        # every other malformed body is a 422 naming where: so is this one
        if exc.status_code == 400 and exc.detail == "There was an error parsing the body":
            return JSONResponse({"detail": [{
                "loc": ["body"], "type": "json_invalid",
                "msg": "the body is not JSON that can be read (a number of more than 4,300 "
                       "digits, or bytes that are not UTF-8)"}]}, status_code=422)
        return await http_exception_handler(request, exc)

    for error in storage_errors():
        app.add_exception_handler(error, lambda r, e: storage_error(e))

    async def role_of(
        creds: HTTPAuthorizationCredentials | None,
        role: Role,
        lookup: Callable[[str], Principal] = sched.principal,
    ) -> str:
        """The name of the bearer token's holder if it has ``role``. A token not cached is
        looked up by ``lookup`` (``sched.principal``: Standby on a standby, whose cache is
        empty) in a worker thread: a database read, never on the event loop."""
        if creds is None:
            raise Unauthorized("missing bearer token (Authorization: Bearer <token>)")
        found = sched.tokens.cached(creds.credentials)
        if found is None:
            found = await run_in_threadpool(lookup, creds.credentials)
        if found.role is not role:
            article = "an" if role.value[0] in "aeiou" else "a"
            raise Forbidden(f"this route needs {article} {role.value} token")
        return found.name

    Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]

    async def tenant(creds: Credentials) -> str:
        return await role_of(creds, Role.TENANT)

    async def worker(creds: Credentials) -> str:
        return await role_of(creds, Role.WORKER)

    Tenant = Annotated[str, Depends(tenant)]
    Worker = Annotated[str, Depends(worker)]
    TaskId = Annotated[str, PathParam(pattern=m.TASK_ID_PATTERN, description="task id")]

    @app.exception_handler(Unauthorized)
    async def unauthorized(request: Request, exc: Unauthorized) -> JSONResponse:
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
            429: {"model": m.Problem, "description": "over the tenant's rate limit (Retry-After)"},
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
        # In a worker thread: a keyed submit reads the database (``idempotency``), and a
        # database that stalls must not stop the event loop, /healthz and polls included.
        ids, created, pending = await run_in_threadpool(
            sched.submit, tenant, [NewTask(**t.model_dump()) for t in items], idempotency_key
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
        return await run_in_threadpool(sched.task_view, tenant, task_id)  # a database read

    @app.post(
        "/v1/poll",
        response_model=m.LeaseOut,
        tags=["workers"],
        responses={204: {"description": "no queued task"}},
    )
    async def poll(body: m.PollIn, worker: Worker) -> Any:
        """The policy's choice among the tasks that fit ``free_mem_mb``, with a lease; 204
        when there is none."""
        grant, pending = await unlocked(
            sched.lock, lambda: sched.poll(worker, body.worker_id, body.free_mem_mb))
        if grant is None:
            return Response(status_code=204)
        await committed(pending)
        return lease_response(grant)

    @app.post(
        "/v1/tasks/{task_id}/cancel",
        response_model=m.CancelOut,
        tags=["tenants"],
        responses={
            404: {"model": m.Problem, "description": "no such task of this tenant"},
            409: {"model": m.Problem, "description": "the task ended already (done, dead)"},
        },
    )
    async def cancel(task_id: TaskId, tenant: Tenant) -> m.CancelOut:
        """Cancel one of the tenant's tasks, queued or leased (idempotent): a queued task is
        never handed out; the worker holding a leased one hears 410 at its next heartbeat
        and does not complete it."""
        # a worker thread: a task not live here is looked up in the database
        was, pending = await run_in_threadpool(sched.cancel, tenant, task_id)
        await committed(pending)
        return m.CancelOut(task_id=task_id, state="cancelled", was=was)

    lease_errors: dict[int | str, dict[str, Any]] = {
        404: {"model": m.Problem, "description": "no such task"},
        403: {"model": m.Problem, "description": "the task is leased to another worker now "
              "(this worker's lease expired and it was handed out again): the lease is lost, "
              "as with 409; not a token problem"},
        409: {"model": m.Problem, "description": "the lease ended or was superseded"},
        410: {"model": m.Problem, "description": "the task was cancelled: stop, do not retry"},
    }

    @app.post(
        "/v1/tasks/{task_id}/heartbeat",
        response_model=m.HeartbeatOut,
        tags=["workers"],
        responses=lease_errors,
    )
    async def heartbeat(task_id: TaskId, body: m.LeaseIn, worker: Worker) -> m.HeartbeatOut:
        """Extend the lease by the lease period."""
        expires, pending = await lease_call(
            lambda: sched.heartbeat(worker, task_id, body.lease_id), sched.refusal_for,
            sched.lock)
        await committed(pending)
        return m.HeartbeatOut(lease_expires_at=expires)

    @app.post(
        "/v1/tasks/{task_id}/complete", status_code=204, tags=["workers"], responses=lease_errors
    )
    async def complete(task_id: TaskId, body: m.CompleteIn, worker: Worker) -> Response:
        """Report success with the real duration, peak memory and result reference."""
        pending = await lease_call(
            lambda: sched.complete(
                worker, task_id, body.lease_id, body.duration_s, body.peak_mem_mb, body.result_ref
            ),
            sched.refusal_for,
            sched.lock,
        )
        await committed(pending)
        return Response(status_code=204)

    @app.post(
        "/v1/tasks/{task_id}/fail",
        response_model=m.FailOut,
        tags=["workers"],
        responses=lease_errors,
    )
    async def fail(task_id: TaskId, body: m.FailIn, worker: Worker) -> m.FailOut:
        """Report failure: the task retries up to the limit, then is dead-lettered."""
        state, pending = await lease_call(
            lambda: sched.fail(worker, task_id, body.lease_id, body.error, body.retryable),
            sched.refusal_for,
            sched.lock,
        )
        await committed(pending)
        return m.FailOut(state=state.value)

    @app.get(
        "/healthz",
        response_model=m.Health,
        tags=["operations"],
        responses={503: {"model": m.Health, "description": "standing by (Retry-After)"}},
    )
    async def healthz() -> Any:
        """Readiness: the role (active or standby), the live policy and queue sizes; 503
        while this service stands by."""
        health = await unlocked(sched.lock, sched.health)
        health.model_version = sched.predictions.version
        health.model_error = sched.predictions.error
        if health.role == "active":
            return health
        return JSONResponse(
            health.model_dump(mode="json"), status_code=503, headers={"Retry-After": "1"}
        )

    @app.get("/livez", response_model=m.Live, tags=["operations"])
    async def livez() -> m.Live:
        """Liveness: the process answers (active or standing by)."""
        return m.Live(role="active" if sched.active else "standby")

    @app.get("/metrics", response_class=PlainTextResponse, tags=["operations"])
    async def metrics() -> PlainTextResponse:
        """Prometheus text: queue length per tenant, decisions, lease expiries, latency."""
        text = await unlocked(sched.lock, sched.metrics)
        return PlainTextResponse(text, media_type=CONTENT_TYPE)

    @app.get("/ui", response_class=HTMLResponse, tags=["operations"])
    async def operator_page() -> HTMLResponse:
        """The operator page: static HTML whose script reads ``/ui/state`` every few
        seconds with an operator token (given as ``/ui#token=...`` or typed in)."""
        return HTMLResponse(PAGE.read_text(encoding="utf-8"))

    @app.get("/ui/state", tags=["operations"])
    async def operator_state(
        creds: Credentials,
        window_s: Annotated[float, Query(ge=1, le=3600, allow_inf_nan=False,
                                           description="fairness window")] = 60.0,
    ) -> JSONResponse:
        """What the operator page shows (``desched.service.overview``): per tenant queued,
        running, done, waits, controls; the policy and why; fairness per window; workers,
        leases; active or standby. Needs an operator token; answers on a standby too."""
        await role_of(creds, Role.OPERATOR, sched.tokens.principal)  # a standby answers too
        view = await run_in_threadpool(overview.get, sched, window_s)
        return JSONResponse(view.as_json())

    app.state.scheduler = sched
    return app
