"""Every policy's decision sequence on fixed workloads, pinned by digest.

Recorded before the architecture and speed work of issues 10 and 11 (which must change no
behaviour): a refactor or a fast path that changes one decision, one score or one score part
of any registered policy fails here. A deliberate change of behaviour re-records with
``DESCHED_RECORD_GOLDEN=1 pytest tests/test_golden_decisions.py`` and says so in its commit.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from desched.policies import REGISTRY, make_policy
from desched.simulator import simulate
from desched.trace import TaskTable
from desched.workloads import generate

GOLDEN = Path(__file__).parent / "golden" / "decisions.json"
WORKLOADS = {
    "steady": {"tasks": 3000, "tenants": 20, "workers": 8, "seed": 11},
    "flood": {"tasks": 3000, "tenants": 20, "workers": 8, "seed": 12},
    "heavy-tail": {"tasks": 2000, "tenants": 12, "workers": 4, "seed": 13},
    "many-tenants": {"tasks": 4000, "tenants": 400, "workers": 16, "seed": 14},
}


def _tasks(name: str) -> tuple[TaskTable, int]:
    """The workload with predictions and p50/p90 quantile predictions around them (fixed
    multipliers, some crossed), for the policies that read the quantiles."""
    spec = dict(WORKLOADS[name])
    workers = int(spec.pop("workers"))
    frame = generate(name, workers=workers, predicted_noise=0.5, **spec)
    rng = np.random.default_rng(int(spec["seed"]))
    p = frame["predicted_s"].to_numpy()
    frame = frame.with_columns(
        pl.Series("predicted_p50_s", p * rng.uniform(0.7, 1.1, p.size)),
        pl.Series("predicted_p90_s", p * rng.uniform(0.9, 4.0, p.size)),
    )
    return TaskTable.from_frame(frame), workers


def _digest(tasks: TaskTable, policy: str, workers: int) -> str:
    d = simulate(tasks, make_policy(policy, tasks), workers).decisions
    h = hashlib.sha256()
    for row in zip(d.t, d.worker, d.task, d.score, *d.parts):
        h.update(struct.pack(f"<dqq{1 + len(d.parts)}d", row[0], row[1], row[2], *row[3:]))
    return h.hexdigest()


def _recorded() -> dict[str, dict[str, str]]:
    return json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}


@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_every_policy_decides_exactly_as_recorded(workload: str) -> None:
    tasks, workers = _tasks(workload)
    got = {name: _digest(tasks, name, workers) for name in sorted(REGISTRY)}
    recorded = _recorded()
    if os.environ.get("DESCHED_RECORD_GOLDEN") == "1":
        recorded.setdefault(workload, {}).update(got)
        GOLDEN.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
        return
    want = recorded[workload]
    unrecorded = sorted(set(got) - set(want))
    assert not unrecorded, (
        f"no golden decisions recorded on {workload!r} for registered {unrecorded}: record "
        "them with DESCHED_RECORD_GOLDEN=1 pytest tests/test_golden_decisions.py "
        "(CONTRIBUTING.md) and commit tests/golden/decisions.json")
    changed = sorted(name for name in want if got.get(name) != want[name])
    assert not changed, f"decisions changed on {workload!r} for {changed}"
    assert set(want) <= set(got), "a recorded policy left the registry"
