"""Shared pieces of the benchmark scripts: synthetic traces, machine description, output."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out"


def poisson_trace(
    n: int, tenants: int, workers: int, load: float, seed: int, mean_duration_s: float = 1.0
) -> pl.DataFrame:
    """Poisson arrivals at ``load * workers / mean_duration_s``; exponential durations.

    Tenant shares follow Zipf (s = 1), so a few tenants dominate and most are small, as in
    the DES. Every task has a ``predicted_s`` within ±50% of its duration.
    """
    rng = np.random.default_rng(seed)
    rate = load * workers / mean_duration_s
    submit = np.cumsum(rng.exponential(1 / rate, n))
    duration = rng.exponential(mean_duration_s, n)
    share = 1 / np.arange(1, tenants + 1)
    tenant = rng.choice(tenants, size=n, p=share / share.sum())
    return pl.DataFrame(
        {
            "task_id": [f"t{i}" for i in range(n)],
            "tenant": [f"tenant{k:04d}" for k in tenant.tolist()],
            "task_type": "extract",
            "submit_s": submit,
            "duration_s": duration,
            "predicted_s": duration * rng.uniform(0.5, 1.5, n),
        }
    )


def machine() -> dict[str, Any]:
    """What the numbers were measured on; the load average says whether it was quiet."""
    cpu = ""
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        for line in lscpu.splitlines():
            if line.startswith("Model name:"):
                cpu = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return {
        "date_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "load_avg_1m": os.getloadavg()[0],
    }


def write_json(name: str, payload: dict[str, Any]) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / name
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def shown(path: Path) -> str:
    """``path`` relative to the repository where it lies inside it (``--out NAME``), else as
    given (``--out /abs/path.json``, which ``write_json`` writes there)."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)
