"""The outermost middleware, ``BodyLimit``, on bodies that never finish arriving: a stalled
body gets a JSON 408 and the connection closes; a body still arriving when the server stops
and cancels the request gets a JSON 503 with ``Retry-After`` instead of the server's
plain-text 500; a whole body within the limit reaches the app unchanged."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from desched.service.asgi import BodyLimit

SCOPE = {"type": "http", "method": "POST", "path": "/v1/tasks",
         "headers": [(b"content-type", b"application/json"), (b"content-length", b"100")]}


def _trickle(first: bytes) -> Any:
    """A ``receive`` that hands over ``first`` (more to come) and then waits for ever."""
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": first, "more_body": True}
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    return receive


def _collect() -> tuple[list[dict[str, Any]], Any]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    return sent, send


async def _app_never_called(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError("the app must not see a partial body")


def _status_headers_detail(sent: list[dict[str, Any]]) -> tuple[int, dict[bytes, bytes], str]:
    start, body = sent
    return (start["status"], dict(start["headers"]), json.loads(body["body"])["detail"])


def test_a_body_that_stalls_gets_a_json_408_and_closes_the_connection() -> None:
    sent, send = _collect()
    limit = BodyLimit(_app_never_called, max_bytes=1000, timeout_s=0.05)
    asyncio.run(limit(SCOPE, _trickle(b'{"task_type"'), send))
    status, headers, detail = _status_headers_detail(sent)
    assert status == 408 and headers[b"connection"] == b"close"
    assert headers[b"content-type"] == b"application/json"
    assert detail == "request body not received within 0.05 s of its headers"


def test_a_body_still_arriving_when_the_server_stops_gets_a_json_503_with_retry_after() -> None:
    sent, send = _collect()
    limit = BodyLimit(_app_never_called, max_bytes=1000)

    async def stop_while_reading() -> None:
        request = asyncio.ensure_future(limit(SCOPE, _trickle(b'{"task_type"'), send))
        await asyncio.sleep(0.05)
        request.cancel()  # what uvicorn does when its graceful-shutdown time is up
        await request  # answered and ended, not raised

    asyncio.run(stop_while_reading())
    status, headers, detail = _status_headers_detail(sent)
    assert status == 503 and headers[b"retry-after"] == b"1"
    assert detail == "the service is stopping; retry"


def test_a_whole_body_within_the_limit_reaches_the_app_unchanged() -> None:
    seen: list[bytes] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append((await receive())["body"])

    parts = iter([{"type": "http.request", "body": b'{"a":', "more_body": True},
                  {"type": "http.request", "body": b" 1}", "more_body": False}])

    async def receive() -> dict[str, Any]:
        return next(parts)

    sent, send = _collect()
    asyncio.run(BodyLimit(app, max_bytes=1000)(SCOPE, receive, send))
    assert seen == [b'{"a": 1}'] and sent == []
