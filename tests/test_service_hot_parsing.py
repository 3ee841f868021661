"""The hot path's parser and encoder against the FastAPI route's: whatever
``model_validate_json`` accepts, ``json.loads`` + ``model_validate`` (the route) reads as the
same model (what it refuses goes to the route); ``LeaseResponse`` renders the same bytes and
headers as ``JSONResponse``."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from starlette.responses import JSONResponse

from desched.service import schemas as m
from desched.service.answers import LeaseResponse

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["w1", "gpu-0", "a" * 200, "x\x00", "\ud800", "lease-abc_DEF"]),
)
keys = st.sampled_from(
    ["worker_id", "free_mem_mb", "lease_id", "duration_s", "peak_mem_mb", "result_ref", "x"]
)
objects = st.dictionaries(keys, scalars, max_size=6)


def body_text(obj: dict[str, Any], dup: bool, pad: str) -> bytes:
    text = json.dumps(obj, allow_nan=True)  # NaN and Infinity tokens too
    if dup and obj:  # a repeated key: the last one counts, for json.loads
        key = next(iter(obj))
        text = text[:-1] + f', "{key}": null}}'
    return (pad + text + pad).encode("utf-8")


def route_reads(model: type[BaseModel], body: bytes) -> BaseModel | None:
    try:
        return model.model_validate(json.loads(body))
    except (ValueError, RecursionError):
        return None


@settings(max_examples=400, deadline=None)
@given(objects, st.booleans(), st.sampled_from(["", " ", "\n", "\ufeff"]))
def test_what_the_hot_parser_accepts_the_route_reads_alike(
    obj: dict[str, Any], dup: bool, pad: str
) -> None:
    body = body_text(obj, dup, pad)
    for model in (m.PollIn, m.CompleteIn):
        try:
            hot = model.model_validate_json(body)
        except ValueError:
            continue  # the route answers it
        assert route_reads(model, body) == hot


def test_the_hot_parser_accepts_the_ordinary_bodies() -> None:
    assert m.PollIn.model_validate_json(b'{"worker_id":"w1","free_mem_mb":4096}') == (
        m.PollIn(worker_id="w1", free_mem_mb=4096.0)
    )
    done = m.CompleteIn.model_validate_json(b'{"lease_id":"abc","duration_s":0.5}')
    assert done.duration_s == 0.5 and done.lease_id == "abc"


leases = st.fixed_dictionaries(
    {
        "task_id": st.text(max_size=40),
        "lease_id": st.text(max_size=30),
        "lease_expires_at": st.floats(allow_nan=False, allow_infinity=False),
        "attempt": st.integers(0, 10**6),
        "tenant": st.text(max_size=20),
        "doc_bytes": st.none() | st.integers(0, 2**50),
        "predicted_s": st.none() | st.floats(allow_nan=False, allow_infinity=False),
    }
)


@settings(max_examples=300, deadline=None)
@given(leases)
def test_lease_response_renders_as_json_response(lease: dict[str, Any]) -> None:
    ours, theirs = LeaseResponse(lease), JSONResponse(lease)
    assert ours.body == theirs.body
    assert ours.raw_headers == theirs.raw_headers
