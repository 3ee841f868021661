"""The hot path: the two requests a worker fleet sends most, answered without FastAPI.

A well-formed ``POST /v1/poll`` or ``POST /v1/tasks/{id}/complete`` of a known worker skips
FastAPI's routing, dependency injection and middleware stack (half of the service's CPU per
request). Everything else, and anything this path is not sure of, goes to the FastAPI routes
in ``app``, which are the reference: the same schemas validate, the same scheduler methods
run, the same answers (``answers``) go out. ``tests/test_service_hot_path.py`` sends random
request sequences to a service with and one without this path and compares every answer.
"""

from __future__ import annotations

import re

from fastapi import Response
from fastapi.security.utils import get_authorization_scheme_param

from desched.errors import DeschedError
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
from desched.service.asgi import ASGIApp, Receive, Scope, Send, read_body, replay
from desched.service.errors import ServiceError
from desched.service.records import Role
from desched.service.scheduler import Scheduler

COMPLETE_PATH = re.compile(r"/v1/tasks/([A-Za-z0-9_-]{1,64})/complete")


class HotPath:
    """ASGI layer in front of the FastAPI app (inside ``BodyLimit``, which has bounded the
    body); see the module docstring.

    A request is taken here only when it is one of those two routes, its content type is
    ``application/json``, its bearer token is a worker's already cached (``TokenBook.cached``:
    no database read on the event loop) and its body is JSON that the route's own pydantic
    model (``PollIn``, ``CompleteIn``) accepts; it then calls the same scheduler method and
    gets the same response as the FastAPI route. Anything else (a token's first use, a
    malformed or unauthenticated request, any other route) is replayed to the FastAPI app.
    """

    def __init__(self, app: ASGIApp, sched: Scheduler) -> None:
        self.app = app
        self.sched = sched
        self.storage_errors = storage_errors()

    def _worker(self, authorization: bytes | None) -> str | None:
        """The worker holding the bearer token, as ``HTTPBearer`` + ``role_of`` read it, if the
        token is cached."""
        if not authorization:
            return None
        scheme, credentials = get_authorization_scheme_param(authorization.decode("latin-1"))
        if not (scheme and credentials) or scheme.lower() != "bearer":
            return None
        try:
            found = self.sched.tokens.cached(credentials)
        except ServiceError:  # expired: the route answers
            return None
        # Not cached (unknown, revoked, not seen since the start or a revocation): the route
        # looks it up off the event loop and answers.
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
            # pydantic's own JSON parser: what it accepts, ``json.loads`` (the route's
            # parser) reads the same; what it refuses (a byte-order mark, say) goes to the
            # route, which answers
            if task_id is None:
                poll = m.PollIn.model_validate_json(body)
            else:
                done = m.CompleteIn.model_validate_json(body)
        except (ValueError, RecursionError):  # not JSON (or nested too deep), not the model
            return None
        try:
            if task_id is None:
                grant, pending = await unlocked(self.sched.lock, lambda: self.sched.poll(
                    worker, poll.worker_id, poll.free_mem_mb))
                if grant is None:
                    return Response(status_code=204)
                await committed(pending)
                return lease_response(grant)
            pending = await lease_call(
                lambda: self.sched.complete(
                    worker,
                    task_id,
                    done.lease_id,
                    done.duration_s,
                    done.peak_mem_mb,
                    done.result_ref,
                ),
                self.sched.refusal_for,
                self.sched.lock,
            )
            await committed(pending)
            return Response(status_code=204)
        except (ServiceError, DeschedError) as exc:
            return refusal(exc)
        except self.storage_errors as exc:
            return storage_error(exc)
