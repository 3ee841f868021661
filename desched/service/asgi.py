"""ASGI plumbing shared by the middlewares: the body reader, its replay, and ``BodyLimit``.

``BodyLimit`` is the outermost middleware: every request body is read (at most
``max_bytes + 1`` bytes) before anything parses it, so no route and no fast path ever sees a
body over the limit.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


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


BODY_TIMEOUT_S = 30.0
"""A request whose body has not all arrived this long after its headers gets 408."""


class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` (declared or streamed) gets 413.

    The body is read here, at most ``max_bytes + 1`` bytes of it, and replayed to the app. A
    body that has not all arrived within ``timeout_s`` gets 408 (a stalled client holds no
    connection for ever); a body still arriving when the server stops and cancels the
    request ends the request quietly: a 503 with ``Retry-After`` where the connection still
    takes it, else just the connection closed (nothing of it was read, so nothing is lost),
    never the server's plain-text 500 and a traceback in the log.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float = BODY_TIMEOUT_S) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    async def _refuse(self, send: Send, status: int = 413, detail: str | None = None) -> None:
        body = json.dumps(
            {"detail": detail or f"request body is larger than {self.max_bytes} bytes"}
        ).encode()
        headers = [(b"content-type", b"application/json"),
                   (b"content-length", str(len(body)).encode())]
        if status == 503:
            headers.append((b"retry-after", b"1"))
        elif status == 408:
            headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length" and (not value.isdigit() or int(value) > self.max_bytes):
                await self._refuse(send)
                return
        try:
            body = await asyncio.wait_for(read_body(receive, self.max_bytes), self.timeout_s)
        except TimeoutError:
            await self._refuse(send, 408, "request body not received within "
                                          f"{self.timeout_s:g} s of its headers")
            return
        except asyncio.CancelledError:  # the server stops: answer, and end the request
            await self._refuse(send, 503, "the service is stopping; retry")
            return
        if body is None:
            await self._refuse(send)
            return
        await self.app(scope, replay(body, receive), send)
