"""The operator page's data (desched.service.overview): the fairness windows against a naive
reference written from DESIGN.md's definitions, the wait percentiles, and /ui/state's token
rule, in this process (TestClient)."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs
from starlette.testclient import TestClient

from desched.service.app import create_app
from desched.service.overview import _percentiles, fairness_windows
from desched.service.records import Role
from desched.service.settings import ServiceSettings
from desched.service.store import Store


def naive_windows(tasks: list[tuple[str, float, float, float, float, bool]],
                  edges: list[float]) -> list[tuple[float | None, float, int]]:
    """Per window: Jain over per-tenant mean slowdown of the tasks done in it, the service
    lag among the tenants backlogged throughout it (merged queued intervals covering it),
    and how many those were; task by task, window by window."""
    tenants = sorted({t[0] for t in tasks})
    out = []
    for lo, hi in itertools.pairwise(edges):
        served, slow = {}, {}
        for k in tenants:
            intervals = sorted((s, st) for t, s, st, _, _, _ in tasks if t == k and s < st)
            merged: list[list[float]] = []
            for s, st in intervals:
                if merged and s <= merged[-1][1]:
                    merged[-1][1] = max(merged[-1][1], st)
                else:
                    merged.append([s, st])
            if any(p <= lo and hi <= q for p, q in merged):
                served[k] = sum(max(0.0, min(e, hi) - max(st, lo))
                                for t, _, st, e, _, _ in tasks if t == k)
            done = [(e - s) / d for t, s, _, e, d, ok in tasks
                    if t == k and ok and d > 0 and lo <= e < hi]
            if done:
                slow[k] = sum(done) / len(done)
        lag = max(served.values()) - min(served.values()) if len(served) >= 2 else 0.0
        x = list(slow.values())
        jain = (sum(x) ** 2 / (len(x) * sum(v * v for v in x))) if x else None
        out.append((jain, lag, len(served)))
    return out


task_rows = hs.lists(
    hs.tuples(
        hs.sampled_from("abc"),
        hs.integers(0, 40),  # submit
        hs.integers(0, 20),  # wait
        hs.integers(1, 20),  # run
        hs.booleans(),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(rows=task_rows, width=hs.integers(1, 15))
def test_the_fairness_windows_equal_a_naive_window_by_window_reference(
    rows: list[tuple[str, int, int, int, bool]], width: int
) -> None:
    tasks = [(k, float(s), float(s + w), float(s + w + r), float(r), ok)
             for k, s, w, r, ok in rows]
    now = 80.0
    edges = [now - width * j for j in range(min(8, int(now // width)), -1, -1)]
    cols = list(zip(*tasks))
    got = fairness_windows(
        np.array(cols[0], dtype=object), np.array(cols[1]), np.array(cols[2]),
        np.minimum(np.array(cols[3]), now), np.array(cols[4]), np.array(cols[5]),
        np.array(edges),
    )
    capped = [(k, s, st, min(e, now), d, ok) for k, s, st, e, d, ok in tasks]
    for window, (jain, lag, n) in zip(got, naive_windows(capped, edges)):
        assert window["backlogged_tenants"] == n
        assert window["max_service_lag_s"] == pytest.approx(lag, abs=1e-6)
        if jain is None:
            assert window["jain_slowdown"] is None
        else:
            assert window["jain_slowdown"] == pytest.approx(jain, rel=1e-9)


def test_the_wait_percentiles_are_numpys_per_tenant() -> None:
    rng = np.random.default_rng(1)
    tenants = rng.choice(np.array(["a", "b", "c"], dtype=object), 200)
    waits = rng.exponential(3.0, 200)
    got = _percentiles(tenants, waits)
    for k in "abc":
        p50, p95 = np.percentile(waits[tenants == k], [50, 95])
        assert got[k] == pytest.approx((p50, p95))
    assert _percentiles(tenants[:0], waits[:0]) == {}


def test_the_state_route_needs_an_operator_token_and_shows_what_was_submitted(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "state.db")
    store = Store(db)
    store.migrate()
    operator = store.add_principal(Role.OPERATOR, "ops")
    tenant = store.add_principal(Role.TENANT, "acme")
    store.close()
    settings = ServiceSettings(db=db, log_dir=tmp_path / "logs", predictor_registry=None)
    with TestClient(create_app(settings)) as client:
        assert client.get("/ui").status_code == 200
        assert "desched · operator" in client.get("/ui").text
        assert client.get("/ui/state").status_code == 401
        as_tenant = {"Authorization": f"Bearer {tenant}"}
        assert client.get("/ui/state", headers=as_tenant).status_code == 403
        r = client.post("/v1/tasks", headers=as_tenant,
                        json=[{"task_type": "extract", "document_ref": "x"}] * 3)
        assert r.status_code == 201
        state = client.get("/ui/state?window_s=5",
                           headers={"Authorization": f"Bearer {operator}"}).json()
    assert state["role"] == "active"
    assert state["policy"] == "ifs-memoryless"
    assert "no policy recorded" in state["policy_reason"]
    assert [(t["tenant"], t["queued"], t["running"], t["done"]) for t in state["tenants"]] == [
        ("acme", 3, 0, 0)
    ]
    assert state["windows"] and all(math.isfinite(w["end_s"]) for w in state["windows"])


def test_a_standby_shows_its_role_and_takes_the_queues_from_the_database() -> None:
    from desched.service.overview import Live, Stored, combine

    live = Live(active=False, policy="vtc", params={}, recorded=True, default_reason="",
                policy_error=None, duration_model=False, memory_model=False, decisions=0,
                completed=0, queued={}, controls=[], leases=[])
    stored = Stored(counts={"acme": {"queued": 7, "leased": 2, "done": 40}},
                    tenant_waits={}, windows=[], workers=[], sampled=False, at=0.0)
    view = combine(live, stored, 10.0, 60.0).as_json()
    assert view["role"] == "standby"
    assert [(t["tenant"], t["queued"], t["running"], t["done"]) for t in view["tenants"]] == [
        ("acme", 7, 2, 40)
    ]
