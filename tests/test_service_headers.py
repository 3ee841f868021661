"""The service's deadline on request headers (``desched.service.header_deadline``), over real
sockets against a real ``desched serve``: a client that stops in the middle of its headers
gets a JSON 408 and the connection closes; one that opens a connection and sends nothing is
closed; meanwhile, and afterwards, other clients are served, and a request whose headers
arrive in pieces within the deadline is answered as usual. (The body's own deadline is
tests/test_service_body.py's.)"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlparse

import httpx
import pytest

from tests.test_service import Service

DEADLINE_S = 1.0


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    tmp = tmp_path_factory.mktemp("headers")
    svc = Service(db=str(tmp / "desched.db"), log_dir=tmp / "logs",
                  env={"DESCHED_HEADER_TIMEOUT_S": str(DEADLINE_S)}).start()
    try:
        yield svc
    finally:
        svc.stop()


def _connect(svc: Service) -> socket.socket:
    url = urlparse(svc.url)
    sock = socket.create_connection((url.hostname, url.port), timeout=10 * DEADLINE_S)
    return sock


def _read_until_closed(sock: socket.socket) -> tuple[bytes, float]:
    """Everything the server sends until it closes, and how long that took."""
    began = time.monotonic()
    chunks = []
    while True:
        data = sock.recv(65536)
        if not data:
            return b"".join(chunks), time.monotonic() - began
        chunks.append(data)


def _healthy(svc: Service) -> bool:
    return httpx.get(f"{svc.url}/healthz", timeout=5.0).status_code == 200


def test_a_client_stalled_in_its_headers_gets_a_json_408_and_is_closed(service: Service) -> None:
    with _connect(service) as sock:
        sock.sendall(b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: appl")
        assert _healthy(service)  # others are served while it stalls
        answer, waited = _read_until_closed(sock)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), answer
    assert b"connection: close" in head.lower()
    assert json.loads(body) == {
        "detail": f"request headers not received within {DEADLINE_S:g} s"}
    assert waited < 8 * DEADLINE_S


def test_an_idle_connection_that_sends_nothing_is_closed(service: Service) -> None:
    with _connect(service) as sock:
        answer, _ = _read_until_closed(sock)
    assert answer == b""
    assert _healthy(service)


def test_headers_arriving_in_pieces_within_the_deadline_are_answered(service: Service) -> None:
    with _connect(service) as sock:
        for piece in (b"GET /healthz HTTP/1.1\r\n", b"Host: x\r\n", b"\r\n"):
            sock.sendall(piece)
            time.sleep(DEADLINE_S / 4)
        # the deadline runs from the request's first byte; its headers completed in time
        time.sleep(DEADLINE_S)  # an answered request is not cut off after the deadline
        sock.settimeout(5.0)
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200 "), answer


def test_a_second_request_stalled_on_a_kept_alive_connection_gets_408(service: Service) -> None:
    with _connect(service) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHo")
        answer, _ = _read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert b"HTTP/1.1 408 " in answer


def test_the_deadline_never_cuts_off_an_answer_still_being_made_on_the_connection() -> None:
    """The protocol alone, in this process, over an app that takes longer than the deadline
    to answer: a second request stalled behind it (pipelined) waits for that answer, which
    arrives whole, and only then gets its 408."""
    import asyncio
    import threading

    import uvicorn

    from desched.service.header_deadline import header_deadline_protocol

    async def slow(scope: dict, receive: object, send: object) -> None:
        if scope["type"] != "http":
            return
        await asyncio.sleep(3 * DEADLINE_S)
        await send({"type": "http.response.start", "status": 200,  # type: ignore[operator]
                    "headers": [(b"content-length", b"4")]})
        await send({"type": "http.response.body", "body": b"done"})  # type: ignore[operator]

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(slow, log_level="warning", lifespan="off",
                                           http=header_deadline_protocol(DEADLINE_S)))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.01)
        with socket.create_connection(("127.0.0.1", port), timeout=10 * DEADLINE_S) as client:
            client.sendall(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHo")
            answer, waited = _read_until_closed(client)
    finally:
        server.should_exit = True
        thread.join(10)
    first, _, rest = answer.partition(b"done")
    assert first.startswith(b"HTTP/1.1 200 ") and rest.startswith(b"HTTP/1.1 408 "), answer
    assert waited >= 3 * DEADLINE_S
