"""A deadline on a request's headers, which uvicorn does not set.

uvicorn times out an idle keep-alive connection once a response has been sent, and
``desched.service.asgi.BodyLimit`` a body that stalls after its headers; nothing times out a
client that opens a connection and sends nothing, or stops in the middle of its headers: the
connection, its socket and its file descriptor are held for ever, and enough such clients
(slowloris) exhaust the process's descriptors. ``header_deadline_protocol`` is uvicorn's
httptools protocol with one timer per connection: armed when the connection opens and when a
chunk ends in the middle of a request's headers (so from about its first byte), disarmed
when that request's headers are complete; a request whose headers come whole in one chunk,
the usual case, sets no timer. At the deadline a connection in the middle of a request's
headers gets a JSON 408 with ``connection: close``, an idle one (nothing of a request
received) is closed; neither reached the app, so nothing was read or changed. A request
whose headers completed is not touched, nor is the answer to an earlier request on the same
connection that is still being written (the deadline starts again until that answer is out).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any


def _408(timeout_s: float) -> bytes:
    body = json.dumps(
        {"detail": f"request headers not received within {timeout_s:g} s"}
    ).encode()
    return b"".join((
        b"HTTP/1.1 408 Request Timeout\r\n",
        b"content-type: application/json\r\n",
        b"content-length: ", str(len(body)).encode(), b"\r\n",
        b"connection: close\r\n\r\n",
        body,
    ))


def header_deadline_protocol(timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's httptools HTTP protocol with a deadline of ``timeout_s`` (module docstring;
    ``ServiceSettings.header_timeout_s``); pass it as ``uvicorn.Config(http=...)``. Needs
    httptools (the service extra installs it)."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class HeaderDeadlineProtocol(HttpToolsProtocol):
        header_timeout_s = timeout_s
        _deadline: asyncio.TimerHandle | None = None
        _in_headers = False

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(self.header_timeout_s, self._expire)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            # a request whose headers did not all come in this chunk: its deadline runs from
            # now (no timer at all for the usual request, whole in one chunk: none on the
            # poll path)
            if self._in_headers and self._deadline is None and not self.transport.is_closing():
                self._arm()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._in_headers = True

        def on_headers_complete(self) -> None:
            self._in_headers = False
            self._disarm()
            super().on_headers_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self._in_headers:  # idle: uvicorn's keep-alive timer takes over
                self._disarm()

        def _expire(self) -> None:
            self._deadline = None
            if self.transport.is_closing():
                return
            if self.cycle is not None and not self.cycle.response_complete:
                # an earlier request on this connection is still being answered: it is not
                # cut off; the stalled one behind it is looked at again a deadline later
                self._arm()
                return
            if self._in_headers:
                self.transport.write(_408(self.header_timeout_s))
            self.transport.close()

    return HeaderDeadlineProtocol
