"""ASGI plumbing shared by the middlewares: the body reader, its replay, and ``BodyLimit``.

``BodyLimit`` is the outermost middleware: every request body is read (at most
``max_bytes + 1`` bytes) before anything parses it, so no route and no fast path ever sees a
body over the limit.
"""

from __future__ import annotations

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
