"""Request bodies are strict: every field of every route refuses a value of the wrong JSON type
with 422, on the FastAPI routes and on the hot path alike.

The fields come from the service's own OpenAPI document, so a new field is covered without
touching this test; a new route with a body needs a valid example here (the test says so).
For each field, each JSON value whose type the schema does not allow (a string or a boolean
for a number, a number or a string for a boolean, a float for an integer, a number for a
string, a list or an object for a scalar) replaces the field in a valid body, and the answer
must be 422 naming that field: never a 5xx, never acceptance. The valid body itself must not
get 422 (schema and behaviour agree both ways).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.test_service_hot_path import TOKENS, FakeTime, service

VALID: dict[tuple[str, str], dict[str, Any]] = {
    ("post", "/v1/tasks"): {
        "task_type": "extract", "document_ref": "s3://d/1", "doc_bytes": 10, "pages": 1,
        "mem_mb": 64.0,
    },
    ("post", "/v1/poll"): {"worker_id": "slot-0", "free_mem_mb": 512.0},
    ("post", "/v1/tasks/{task_id}/heartbeat"): {"lease_id": "lease1"},
    ("post", "/v1/tasks/{task_id}/complete"): {
        "lease_id": "lease1", "duration_s": 1.5, "peak_mem_mb": 10.0, "result_ref": "s3://r/1",
    },
    ("post", "/v1/tasks/{task_id}/fail"): {"lease_id": "lease1", "error": "x", "retryable": True},
}
"""A valid body for every route that takes one (a submit is also sent as a list of one)."""

CANDIDATES: list[Any] = ["1", "true", 1, 1.5, True, False, [], {}, [1], {"a": 1}]


def json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def allowed_types(schema: dict[str, Any], spec: dict[str, Any]) -> set[str]:
    """The JSON types a property schema admits (``integer`` is also a ``number``)."""
    schema = resolve(schema, spec)
    if "anyOf" in schema:
        return set().union(*(allowed_types(s, spec) for s in schema["anyOf"]))
    kind = schema.get("type")
    types = {kind} if isinstance(kind, str) else set(kind or ())
    if "number" in types:
        types.add("integer")
    return types


def resolve(schema: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        schema = spec["components"]["schemas"][name]
    return schema


def body_objects(schema: dict[str, Any], spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The object schemas a request body may be (a list's items included)."""
    schema = resolve(schema, spec)
    if "anyOf" in schema:
        return [o for s in schema["anyOf"] for o in body_objects(s, spec)]
    if schema.get("type") == "array":
        return body_objects(schema["items"], spec)
    return [schema] if schema.get("type") == "object" else []


def wrong_cases(spec: dict[str, Any]) -> list[tuple[str, str, str, Any]]:
    """``(method, path, field, wrong value)`` for every field of every route's body."""
    cases = []
    for path, operations in spec["paths"].items():
        for method, op in operations.items():
            body = op.get("requestBody")
            if body is None:
                continue
            assert (method, path) in VALID, f"add a valid body for {method} {path} to VALID"
            schema = body["content"]["application/json"]["schema"]
            for obj in body_objects(schema, spec):
                for field, prop in obj["properties"].items():
                    ok = allowed_types(prop, spec)
                    assert ok, f"{method} {path} {field}: no JSON type in the schema"
                    for value in CANDIDATES:
                        if json_type(value) not in ok:
                            cases.append((method, path, field, value))
    return cases


@pytest.fixture(scope="module", params=[True, False], ids=["hot-path", "fastapi-only"])
def client(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
    TestClient
]:
    folder: Path = tmp_path_factory.mktemp("strict") / "svc"
    with service(folder, request.param, FakeTime()) as c:
        yield c


def token_for(path: str) -> str:
    return TOKENS["tenant"] if path == "/v1/tasks" else TOKENS["worker"]


def test_every_field_of_every_route_refuses_a_value_of_the_wrong_json_type(
    client: TestClient,
) -> None:
    spec = client.get("/openapi.json").json()
    cases = wrong_cases(spec)
    fields = {(m, p, f) for m, p, f, _ in cases}
    assert len(fields) >= 13 and len(cases) > 60  # every body field of the five routes
    for method, path, field, value in cases:
        body = {**VALID[method, path], field: value}
        url = path.replace("{task_id}", "t1")
        headers = {"Authorization": f"Bearer {token_for(path)}"}
        for sent in ([body, [body]] if path == "/v1/tasks" else [body]):
            r = client.request(method.upper(), url, json=sent, headers=headers)
            assert r.status_code == 422, (method, path, field, value, r.status_code, r.text)
            assert any(field in e["loc"] for e in r.json()["detail"]), (field, r.text)
    assert client.get("/healthz").json()["queued"] == 0


def test_the_valid_bodies_are_accepted_by_the_schema_and_the_routes(client: TestClient) -> None:
    for (method, path), body in VALID.items():
        url = path.replace("{task_id}", "t1")
        headers = {"Authorization": f"Bearer {token_for(path)}"}
        r = client.request(method.upper(), url, json=body, headers=headers)
        assert r.status_code != 422 and r.status_code < 500, (path, r.text)


def test_a_body_json_cannot_read_is_a_422_naming_the_body(client: TestClient) -> None:
    """An integer of more than 4,300 digits, or bytes that are not UTF-8, had a bare 400
    ('There was an error parsing the body') where every other malformed body gets a 422
    (a QA pass); nothing is written."""
    headers = {"Authorization": f"Bearer {TOKENS['tenant']}",
               "Content-Type": "application/json"}
    huge = b'{"task_type": "extract", "document_ref": "s3://d/1", "pages": ' + b"9" * 5000 + b"}"
    not_utf8 = b'{"task_type": "extract\xff\xfe", "document_ref": "s3://d/1"}'
    for body in (huge, not_utf8):
        r = client.post("/v1/tasks", content=body, headers=headers)
        assert r.status_code == 422, r.text
        [error] = r.json()["detail"]
        assert error["loc"] == ["body"] and error["type"] == "json_invalid"
        worker = {**headers, "Authorization": f"Bearer {TOKENS['worker']}"}
        r = client.post("/v1/poll", content=body.replace(b"pages", b"free_mem_mb"),
                        headers=worker)
        assert r.status_code == 422, r.text
    assert client.get("/healthz").json()["queued"] == 0
    assert client.get("/v1/nosuch").status_code == 404  # other HTTP errors as before
