"""``desched live-demo --quick`` end to end: service, Prefect server, workers, pipeline.

Runs the command as a user would (a subprocess; it starts ``desched serve``, a Prefect
server on loopback and two enrichment workers with the tiny model), then checks what it
left behind: every receipt enriched once, the results in the warehouse, the decision log
ingested, and both models retrained from it. About 40 s.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[1]


def test_live_demo_drains_every_tenant_and_retrains_on_its_logs(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    env.pop("PREFECT_API_URL", None)  # live-demo starts its own server (with its UI)
    run = subprocess.run(
        [sys.executable, "-m", "desched.cli", "live-demo", "--quick", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    state = sqlite3.connect(out / "desched.db")
    by_tenant = dict(
        state.execute(
            "SELECT tenant, COUNT(*) FROM tasks WHERE state = 'done' GROUP BY tenant"
        ).fetchall()
    )
    assert by_tenant == {"flood": 24, "acme": 8, "globex": 8, "initech": 8}
    assert state.execute("SELECT COUNT(*) FROM tasks WHERE state != 'done'").fetchone() == (0,)
    state.close()

    (log,) = (out / "logs").glob("*.jsonl")
    kinds = [json.loads(line)["kind"] for line in log.read_text().splitlines()]
    assert kinds.count("decision") == 48 and kinds.count("completion") == 48

    warehouse = duckdb.connect(str(out / "warehouse.duckdb"), read_only=True)
    try:
        counts = {
            t: warehouse.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
            for t in ("decisions", "completions", "quarantine")
        }
        results = warehouse.execute(
            "SELECT COUNT(DISTINCT task_id), COUNT(*) FROM enrichment_results"
        ).fetchone()
    finally:
        warehouse.close()
    assert counts == {"decisions": 48, "completions": 48, "quarantine": 0}
    assert results == (48, 48)  # every receipt enriched and stored exactly once

    # one model per workload: the service's log folder is the demo's only one
    (duration,) = (out / "models" / "duration").iterdir()
    champion = (duration / "CHAMPION").read_text().strip()
    assert (duration / champion / "card.json").exists()
    memory = out / "models" / "memory"
    assert (memory / (memory / "CHAMPION").read_text().strip() / "model.txt").exists()
    assert "per tenant: tasks done / submitted" in run.stdout
    # The demo checks its own answers: every acknowledged task done, none lost.
    ledger = {
        m[0]: (int(m[1]), int(m[2]), int(m[3]))
        for m in re.findall(r"^  (\w+) +(\d+) +(\d+) +(\d+)   \S", run.stdout, re.MULTILINE)
    }
    assert "per tenant: acknowledged, done, lost" in run.stdout
    assert ledger == {"flood": (24, 24, 0), "acme": (8, 8, 0), "globex": (8, 8, 0),
                      "initech": (8, 8, 0)}
    assert "the flood in numbers: 'flood' sent 24 tasks at once" in run.stdout, run.stdout
    assert re.search(r"operator page: http://127\.0\.0\.1:\d+/ui#token=\S+", run.stdout)
    assert re.search(r"prefect server: http://127\.0\.0\.1:\d+/api, UI http", run.stdout)
