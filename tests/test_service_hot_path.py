"""The hot path (``desched.service.hot_path.HotPath``) answers exactly as the FastAPI routes do.

Two services, in-process, each on its own SQLite database with the same tokens and the same
injected clock: one with the hot path, one without (every request through FastAPI, the
reference). Hypothesis drives both with the same random sequence of submits, polls,
completions and clock ticks, including malformed bodies, wrong content types, wrong or
missing tokens, unknown and malformed task ids and stale leases; every answer must match in
status, content type and body, once the random task and lease ids are replaced by the order
in which they first appeared.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from desched.service.app import create_app
from desched.service.clock import Clock
from desched.service.decision_log import DecisionLog
from desched.service.scheduler import Scheduler
from desched.service.settings import ServiceSettings
from desched.service.store import Store, hash_token

TOKENS = {"tenant": "tenant-token-a", "worker": "worker-token-1", "worker2": "worker-token-2"}


class FakeTime:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


@contextmanager
def service(folder: Path, hot_path: bool, now: FakeTime) -> Iterator[TestClient]:
    folder.mkdir(parents=True)
    db = str(folder / "state.db")
    store = Store(db)
    store.migrate()
    for key, (role, name) in {
        "tenant": ("tenant", "acme"),
        "worker": ("worker", "gpu-box"),
        "worker2": ("worker", "cpu-box"),
    }.items():
        store.execute(
            "INSERT INTO principals (token_sha256, role, name, created_at) VALUES (?, ?, ?, 0)",
            (hash_token(TOKENS[key]), role, name),
        )
    store.close()
    settings = ServiceSettings(
        db=db,
        log_dir=folder / "logs",
        hot_path=hot_path,
        predictor_registry=None,
        lease_s=10.0,
        max_retries=1,
        sweep_s=60,
    )
    sched = Scheduler(
        Store(db),
        lease_s=10.0,
        max_retries=1,
        clock=Clock(source=now),
        log=DecisionLog(folder / "logs"),
    )
    with TestClient(create_app(settings, sched)) as client:
        yield client


# Each list repeats the well-formed choice so that most requests get past authentication and
# validation and reach the scheduler (leases granted, completed, refused as stale).
WORKER = f"Bearer {TOKENS['worker']}"
auths = st.sampled_from(
    [WORKER] * 8
    + [
        f"Bearer {TOKENS['worker2']}",
        f"bearer   {TOKENS['worker']}  ",
        f"Bearer {TOKENS['tenant']}",
        "Bearer not-a-token",
        f"Basic {TOKENS['worker']}",
        "Bearer",
        None,
    ]
)
content_types = st.sampled_from(
    ["application/json"] * 8
    + [None, "text/plain", "application/json; charset=utf-8", "application/merge-patch+json"]
)
numbers = st.sampled_from([None, None, 0.0, 1.5, 512.0, 1e12, -1.0, "64", "lots"])
poll_bodies = st.one_of(
    st.fixed_dictionaries({"worker_id": st.sampled_from(["slot-0", "slot-1"])}),
    st.fixed_dictionaries({"worker_id": st.sampled_from(["slot-0", "slot-1"])}),
    st.fixed_dictionaries(
        {
            "worker_id": st.sampled_from(["slot-0", "slot-0", "", "bad id", 7]),
            "free_mem_mb": numbers,
        }
    ),
    st.fixed_dictionaries({"worker_id": st.just("slot-0"), "extra": st.just(1)}),
    st.sampled_from(["", "not json", "[1]", '{"worker_id": "slot-0", "free_mem_mb": NaN}']),
)
complete_bodies = st.fixed_dictionaries(
    {"duration_s": st.sampled_from([1.0, 1.0, 2.5, 0.0, -3.0, "4", "soon"])},
    optional={
        "peak_mem_mb": numbers,
        "result_ref": st.sampled_from(["s3://out/1", "\x00", None]),
        "surprise": st.just(True),
    },
)
submit = st.tuples(
    st.just("submit"), st.integers(1, 5), st.sampled_from([None, None, 100.0, 4096.0])
)
poll = st.tuples(st.just("poll"), auths, content_types, poll_bodies)
complete = st.tuples(
    st.just("complete"),
    auths,
    content_types,
    complete_bodies,
    st.sampled_from([0, 1, 2, 3, 0, 1, 5, 6]),  # lease by order granted; 5, 6: unknown, malformed
    st.sampled_from(["own"] * 5 + ["other", "unknown", "missing"]),  # the lease id presented
)
good_poll = st.tuples(
    st.just("poll"),
    st.just(WORKER),
    st.just("application/json"),
    st.fixed_dictionaries(
        {"worker_id": st.just("slot-0"), "free_mem_mb": st.sampled_from([None, 512.0, 50.0])}
    ),
)
good_complete = st.tuples(
    st.just("complete"),
    st.just(WORKER),
    st.just("application/json"),
    st.fixed_dictionaries({"duration_s": st.just(1.0), "peak_mem_mb": st.just(64.0)}),
    st.just(-1),  # the latest lease granted
    st.just("own"),
)
tick = st.tuples(st.just("tick"), st.sampled_from([1.0, 11.0]))
requests = st.lists(
    st.one_of(
        submit, submit, good_poll, good_poll, good_complete, good_complete, poll, complete, tick
    ),
    max_size=40,
)


class Ids:
    """Maps one service's random task and lease ids to the order they first appeared."""

    def __init__(self) -> None:
        self.symbol: dict[str, str] = {}
        self.leases: list[tuple[str, str]] = []  # (task id, lease id) by order granted

    def learn(self, value: str, prefix: str) -> None:
        if value not in self.symbol:
            self.symbol[value] = f"<{prefix}{sum(s[1] == prefix for s in self.symbol.values())}>"

    def mask(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: self.mask(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.mask(v) for v in value]
        if isinstance(value, str):
            for real, sym in self.symbol.items():
                value = value.replace(real, sym)
        return value


def send(client: TestClient, ids: Ids, step: tuple[Any, ...], now: FakeTime) -> Any:
    kind = step[0]
    if kind == "tick":
        return None
    if kind == "submit":
        _, n, mem = step
        body = [
            {"task_type": "extract", "document_ref": f"doc{j}", "mem_mb": mem} for j in range(n)
        ]
        r = client.post(
            "/v1/tasks", json=body, headers={"Authorization": f"Bearer {TOKENS['tenant']}"}
        )
        for task_id in r.json().get("task_ids", []):
            ids.learn(task_id, "T")
        return r.status_code, ids.mask(r.json())
    headers = {}
    if step[1] is not None:
        headers["Authorization"] = step[1]
    if step[2] is not None:
        headers["Content-Type"] = step[2]
    if kind == "complete" and step[4] == -1 and not ids.leases:
        kind, step = "poll", (*step[:3], {"worker_id": "slot-0"})  # nothing to complete yet
    if kind == "poll":
        body = step[3]
        path = "/v1/poll"
    else:
        _, _, _, fields, which, lease = step
        if -len(ids.leases) <= which < len(ids.leases):
            task_id, own = ids.leases[which]
        else:
            task_id, own = ("0123456789abcdef", "x") if which == 5 else ("bad id!", "x")
        others = [lid for _, lid in ids.leases if lid != own]
        body = dict(fields)
        if lease != "missing":
            body["lease_id"] = {
                "own": own,
                "other": others[0] if others else "other-lease",
                "unknown": "no-such-lease",
            }[lease]
        path = f"/v1/tasks/{task_id}/complete"
    content = body if isinstance(body, str) else json.dumps(body)
    r = client.post(path, content=content.encode("utf-8", "surrogatepass"), headers=headers)
    if kind == "poll" and r.status_code == 200:
        granted = r.json()
        ids.learn(granted["lease_id"], "L")
        ids.leases.append((granted["task_id"], granted["lease_id"]))
    try:
        payload = ids.mask(r.json()) if r.content else None
    except ValueError:
        payload = r.text
    return r.status_code, r.headers.get("content-type"), payload


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=requests)
def test_the_hot_path_answers_every_request_as_the_fastapi_routes_do(
    tmp_path_factory: Any, steps: list[tuple[Any, ...]]
) -> None:
    root = tmp_path_factory.mktemp("hot")
    now = FakeTime()
    with ExitStack() as stack:
        fast = stack.enter_context(service(root / "fast", True, now))
        reference = stack.enter_context(service(root / "reference", False, now))
        fast_ids, reference_ids = Ids(), Ids()
        for step in steps:
            if step[0] == "tick":
                now.t += step[1]
                continue
            assert send(fast, fast_ids, step, now) == send(reference, reference_ids, step, now), (
                step
            )
        # ... and leave the same records behind (durations, peak memory, results, attempts).
        assert stored(fast, fast_ids) == stored(reference, reference_ids)


def stored(client: TestClient, ids: Ids) -> list[Any]:
    sched = client.app.state.scheduler  # type: ignore[attr-defined]
    sched.flush()
    with sched.read_lock:
        rows = sched.store.execute("SELECT * FROM tasks ORDER BY seq").fetchall()
    return [ids.mask([v for v in row if v is not None]) for row in rows]


def test_the_hot_path_takes_the_well_formed_requests(tmp_path: Path) -> None:
    # Guard against a hot path that silently defers everything (the agreement test above
    # would still pass): count the requests that reach FastAPI's poll route.
    now = FakeTime()
    with service(tmp_path / "svc", True, now) as client:
        routed = [0]
        app = client.app
        for route in app.routes:  # type: ignore[attr-defined]
            if getattr(route, "path", "") == "/v1/poll":
                inner = route.app

                async def counting(scope: Any, receive: Any, send: Any, inner: Any = inner) -> None:
                    routed[0] += 1
                    await inner(scope, receive, send)

                route.app = counting
        worker = {"Authorization": f"Bearer {TOKENS['worker']}"}
        client.post(
            "/v1/tasks",
            json={"task_type": "extract"},
            headers={"Authorization": f"Bearer {TOKENS['tenant']}"},
        )
        # A token's first use goes to the route, which looks it up off the event loop.
        assert client.post("/v1/poll", json={"worker_id": "s"}, headers=worker).status_code == 200
        assert routed == [1]
        assert client.post("/v1/poll", json={"worker_id": "s"}, headers=worker).status_code == 204
        assert client.post("/v1/poll", json={"worker_id": "s"}, headers=worker).status_code == 204
        assert routed == [1]
        assert client.post("/v1/poll", json={"worker_id": ""}, headers=worker).status_code == 422
        assert routed == [2]
