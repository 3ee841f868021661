"""Property-based fuzzing of the service's OpenAPI schema (schemathesis), over real HTTP.

Schemathesis generates requests that fit the schema and requests that break it (wrong
types, missing fields, out-of-range numbers, odd strings); every one must get a 2xx or a 4xx
with a ``detail`` message, never a 5xx. Each operation runs with the token of the role it
needs, so the fuzzing reaches the handlers instead of stopping at 401. The number of examples
is bounded to keep the suite fast.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.generation import GenerationMode

from tests import test_service
from tests.test_service import Backend, Running, Service, add_principals, auth

backend = test_service.backend  # the backend-parametrised fixture, reused here

MAX_EXAMPLES = 30
SENT: Counter[int] = Counter()
"""Fuzzed requests sent in this session, by status class (printed with -s; README figures)."""


@pytest.fixture(scope="module")
def fuzzed(
    backend: Backend,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Running]:
    db = backend.fresh()
    tokens = add_principals(db)
    service = Service(db=db, log_dir=tmp_path_factory.mktemp("fuzz") / "logs").start()
    try:
        with httpx.Client(base_url=service.url, timeout=10.0) as client:
            yield Running(service, tokens, client)
    finally:
        service.stop()


OPERATIONS = [
    ("POST", "/v1/tasks"),
    ("GET", "/v1/tasks/{task_id}"),
    ("POST", "/v1/poll"),
    ("POST", "/v1/tasks/{task_id}/heartbeat"),
    ("POST", "/v1/tasks/{task_id}/complete"),
    ("POST", "/v1/tasks/{task_id}/fail"),
    ("POST", "/v1/tasks/{task_id}/cancel"),
    ("GET", "/healthz"),
    ("GET", "/livez"),
    ("GET", "/metrics"),
]


@pytest.fixture(scope="module")
def api_schema(fuzzed: Running) -> Any:
    return schemathesis.openapi.from_url(f"{fuzzed.service.url}/openapi.json")


def token_for(path: str, method: str, running: Running) -> str:
    if (
        path == "/v1/tasks"
        or path.endswith("/cancel")
        or (method == "GET" and path.startswith("/v1/tasks/"))
    ):
        return running.tokens.tenant_a
    return running.tokens.worker


NO_INPUT = {"/healthz", "/livez", "/metrics"}  # nothing to break: negative generation is impossible


@pytest.mark.parametrize(
    ("method", "path", "mode"),
    [
        (method, path, mode)
        for method, path in OPERATIONS
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
        if not (path in NO_INPUT and mode is GenerationMode.NEGATIVE)
    ],
)
def test_no_generated_request_gets_a_server_error(
    api_schema: Any, fuzzed: Running, method: str, path: str, mode: GenerationMode
) -> None:
    operation = api_schema[path][method]
    token = auth(token_for(path, method, fuzzed))

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def check(case: Any) -> None:
        headers = dict(case.headers or {})
        headers.setdefault("Authorization", token["Authorization"])
        response = case.call(headers=headers)
        SENT[response.status_code // 100] += 1
        assert response.status_code < 500, (
            f"{case.method} {case.formatted_path} body={case.body!r} -> "
            f"{response.status_code}: {response.text[:500]}"
        )
        if 400 <= response.status_code < 500:
            assert response.json().get("detail"), response.text[:500]

    check()


def test_the_fuzzing_sent_requests_to_every_operation(fuzzed: Running) -> None:
    print(f"fuzzed requests by status class: {dict(sorted(SENT.items()))}")
    assert sum(SENT.values()) >= 10 * len(OPERATIONS) and SENT[5] == 0


def test_the_schema_documents_every_route(fuzzed: Running) -> None:
    paths = fuzzed.client.get("/openapi.json").json()["paths"]
    assert set(paths) >= {
        "/v1/tasks",
        "/v1/tasks/{task_id}",
        "/v1/poll",
        "/v1/tasks/{task_id}/heartbeat",
        "/v1/tasks/{task_id}/complete",
        "/v1/tasks/{task_id}/fail",
        "/v1/tasks/{task_id}/cancel",
        "/healthz",
        "/livez",
        "/metrics",
    }
    assert (
        "HTTPBearer" in fuzzed.client.get("/openapi.json").json()["components"]["securitySchemes"]
    )


def test_the_body_limit_applies_to_chunked_bodies(fuzzed: Running) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(40):
            yield b" " * 65536

    r = fuzzed.client.post(
        "/v1/tasks",
        content=chunks(),
        headers={**auth(fuzzed.tokens.tenant_a), "content-type": "application/json"},
    )
    assert r.status_code == 413 and "larger than" in r.json()["detail"]
