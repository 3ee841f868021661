"""What tenant controls cost and buy in the simulator (README, tenant controls).

The ``flood`` scenario (one tenant floods the service) under ``vtc`` and ``fifo`` on 8
workers, with no
controls and with each control on the flooding tenant (``desched.controls``, the rules the
live service applies): weight 0.5, a cap of 2 workers, a submit rate limit of 0.8x its mean
arrival rate (burst 10), random priority levels 0..2 on every task, and all of them at once.
For each: mean wait over all tasks, of the flooder and of the other tenants (waits count
from the trace's submit time, so a rate-limited task's throttling is in them), Jain's index
over per-tenant mean slowdown, and the simulation's CPU time (median of ``--repeats``,
``time.process_time``) with tasks per CPU second.

    .venv/bin/python benchmarks/bench_controls.py            # 20k tasks
    .venv/bin/python benchmarks/bench_controls.py --quick    # 4k tasks, smoke run
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.common import machine, markdown_table, write_json
from desched.bench.evaluate import simulate_summary
from desched.controls import Controls, TenantControl
from desched.workloads import generate

FLOODER = "flood"


def configs(frame: pl.DataFrame) -> dict[str, tuple[Controls | None, bool]]:
    """``name -> (controls, with priorities)``."""
    mine = frame.filter(pl.col("tenant") == FLOODER)["submit_s"]
    rate = 0.8 * mine.len() / float(mine.max() - mine.min())  # type: ignore[operator]
    return {
        "none": (None, False),
        "weight 0.5": (Controls({FLOODER: TenantControl(weight=0.5)}), False),
        "cap 2": (Controls({FLOODER: TenantControl(cap=2)}), False),
        f"rate {rate:.3g}/s burst 10": (
            Controls({FLOODER: TenantControl(rate=rate, burst=10.0)}), False),
        "priorities 0..2": (None, True),
        "all": (Controls({FLOODER: TenantControl(weight=0.5, cap=2, rate=rate, burst=10.0)}),
                True),
    }


def run(frame: pl.DataFrame, policy: str, controls: Controls | None,
        repeats: int) -> dict[str, Any]:
    cpu = []
    for _ in range(repeats):
        t0 = time.process_time()
        s = simulate_summary(frame, policy, {}, 8, controls=controls)
        cpu.append(time.process_time() - t0)
    per = s.tenants()
    others = [m for name, m in per.items() if name != FLOODER]
    n_others = sum(m.tasks for m in others)
    return {
        "mean_wait_s": s.mean_wait_s,
        "flooder_mean_wait_s": per[FLOODER].mean_wait_s,
        "others_mean_wait_s": sum(m.mean_wait_s * m.tasks for m in others) / n_others,
        "jain_slowdown": s.jain_slowdown,
        "cpu_s": statistics.median(cpu),
        "tasks_per_cpu_s": frame.height / statistics.median(cpu),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--policies", default="vtc,fifo", help="comma-separated policies")
    ap.add_argument("--quick", action="store_true", help="4k tasks, one repeat")
    args = ap.parse_args()
    tasks, repeats = (4_000, 1) if args.quick else (args.tasks, args.repeats)
    frame = generate("flood", tasks=tasks, seed=0, workers=8)
    rng = np.random.default_rng(0)
    prioritised = frame.with_columns(pl.Series("priority", rng.integers(0, 3, frame.height)))
    results: dict[str, dict[str, Any]] = {}
    for policy in args.policies.split(","):
        for name, (controls, with_priority) in configs(frame).items():
            r = run(prioritised if with_priority else frame, policy, controls, repeats)
            results[f"{policy} | {name}"] = r
            print(policy, name, {k: round(v, 3) for k, v in r.items()}, flush=True)
    rows = [[*key.split(" | "), f"{r['mean_wait_s']:.1f}", f"{r['flooder_mean_wait_s']:.1f}",
             f"{r['others_mean_wait_s']:.1f}", f"{r['jain_slowdown']:.3f}",
             f"{r['cpu_s']:.2f}", f"{r['tasks_per_cpu_s']:,.0f}"] for key, r in results.items()]
    print(markdown_table(["policy", "controls on the flooder", "mean wait s", "flooder wait s",
                          "others wait s", "Jain", "CPU s", "tasks/CPU-s"], rows))
    path = write_json("bench_controls.json", {"machine": machine(), "tasks": tasks,
                                              "repeats": repeats, "workers": 8,
                                              "results": results})
    print(path)


if __name__ == "__main__":
    main()
