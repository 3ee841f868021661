"""`desched simulate` as a user runs it: whole-process time beside the inner loop and SimPy.

Two workloads (traces written once under ``benchmarks/out/cli/``):

- ``long``: 1,000,000 tasks, 50 tenants (Zipf shares), Poisson arrivals at load 0.9 of 16
  workers, exponential durations (``benchmarks.common.poisson_trace``), run on 16 workers;
- ``burst``: 100,000 tasks from 1,000 tenants (Zipf shares), all submitted within 1 s
  (uniform), exponential durations of mean 1 s, run on 4 workers.

For each policy, ``desched simulate --trace T --policy P --workers W --out DIR`` runs in a
fresh process (``--repeats`` times, after one untimed run that writes the bytecode and caches
the compiled kernel; ``PYTHONDONTWRITEBYTECODE`` is dropped from its environment, as the
Makefile does), and with ``--both-outputs`` also with
``--no-decision-log`` (tasks, decisions and summary only); the engine it used (the compiled
kernel or the Python loop) is read from ``summary.json``. The figures: process wall time (from start-up, reading
and validating the trace, to the run folder and ``summary.json`` written), the process's CPU
time (user + system of the child: less disturbed by other load on a shared machine), both per
decision, and the inner loop (``simulate()`` alone, from ``decisions_per_s`` in the summary).
On ``long`` the anchor is the SimPy model of the same semantics (``tests/simpy_model.py``,
the fast policy object, in this process, CPU time), checked to give identical start times;
the speedup is SimPy CPU seconds over ``desched simulate`` CPU seconds (median).

    .venv/bin/python benchmarks/bench_cli.py                       # both, every policy
    .venv/bin/python benchmarks/bench_cli.py --workload burst --policies fifo ifs-memoryless
    .venv/bin/python benchmarks/bench_cli.py --quick               # 100k long, 10k burst
    .venv/bin/python benchmarks/bench_cli.py --both-outputs        # also --no-decision-log
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.common import OUT, machine, markdown_table, poisson_trace, write_json
from desched.policies import REGISTRY, make_policy
from desched.trace import TaskTable, read_trace, write_trace
from tests.simpy_model import simulate_simpy

WORKLOADS = {
    # name: (tasks, tenants, workers)
    "long": (1_000_000, 50, 16),
    "burst": (100_000, 1_000, 4),
}
BURST_TARGET_US = 10.0
SPEEDUP_TARGET = 10.0


def burst_trace(n: int, tenants: int, seed: int) -> pl.DataFrame:
    """``n`` tasks, Zipf tenant shares, submissions uniform in [0, 1) s, durations Exp(1 s)."""
    rng = np.random.default_rng(seed)
    share = 1 / np.arange(1, tenants + 1)
    tenant = rng.choice(tenants, size=n, p=share / share.sum())
    duration = rng.exponential(1.0, n)
    return pl.DataFrame({
        "task_id": [f"t{i}" for i in range(n)],
        "tenant": [f"tenant{k:04d}" for k in tenant.tolist()],
        "task_type": "extract",
        "submit_s": np.sort(rng.uniform(0.0, 1.0, n)),
        "duration_s": duration,
        "predicted_s": duration * rng.uniform(0.5, 1.5, n),
    })


def trace_path(workload: str, tasks: int, seed: int) -> Path:
    """The workload's trace file, written on first use."""
    _, tenants, workers = WORKLOADS[workload]
    path = OUT / "cli" / f"{workload}-{tasks}-{tenants}-{seed}.parquet"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        if workload == "long":
            frame = poisson_trace(tasks, tenants, workers, 0.9, seed)
        else:
            frame = burst_trace(tasks, tenants, seed)
        write_trace(frame, path)
    return path


def desched_command() -> list[str]:
    """The installed ``desched`` script beside this interpreter, else the module."""
    script = Path(sys.executable).with_name("desched")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from desched.cli import main; main()"]


def run_cli(trace: Path, policy: str, workers: int, out: Path,
            extra: tuple[str, ...] = (), tree: Path = ROOT) -> dict[str, Any]:
    """One ``desched simulate`` in a fresh process: wall and CPU seconds, inner-loop seconds.
    ``tree``: the checkout whose ``desched`` runs (``PYTHONPATH``; this one by default)."""
    if out.exists():
        shutil.rmtree(out)
    cmd = [*desched_command(), "simulate", "--trace", str(trace), "--policy", policy,
           "--workers", str(workers), "--out", str(out), *extra]
    # as the Makefile does: a process that may not write bytecode compiles every module it
    # imports, every time (about 0.7 CPU-s of a 1M-task run on the 2-vCPU box)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(tree)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    summary = json.loads((out / "summary.json").read_text())
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "command": " ".join(["desched", *cmd[len(desched_command()):]]),
        "wall_s": wall,
        "cpu_s": cpu,
        "inner_s": summary["tasks"] / summary["decisions_per_s"],
        "tasks": summary["tasks"],
        "windows_count": summary.get("windows_count"),
        "engine": summary.get("engine"),
    }


def simpy_anchor(trace: Path, policy: str, workers: int, run_dir: Path) -> dict[str, Any]:
    """The SimPy model on the same trace with the same (fast) policy; start times checked."""
    tasks = TaskTable.from_frame(read_trace(trace))
    gc.collect()
    c0, w0 = time.process_time(), time.perf_counter()
    ref = simulate_simpy(tasks, make_policy(policy, tasks), workers)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    ours = pl.read_parquet(run_dir / "tasks.parquet", columns=["start_s"])["start_s"].to_list()
    identical = ours == ref.start_s
    del ref, tasks
    gc.collect()
    return {"simpy_cpu_s": cpu, "simpy_wall_s": wall, "identical_start_s": identical}


def bench(args: argparse.Namespace, workload: str) -> list[dict[str, Any]]:
    tasks, tenants, workers = WORKLOADS[workload]
    if args.tasks:
        tasks = args.tasks
    elif args.quick:
        tasks //= 10
    trace = trace_path(workload, tasks, args.seed)
    rows = []
    for policy in args.policies:
        out = OUT / "cli" / f"run-{workload}-{tasks}-{policy}"
        # untimed: the first process writes the bytecode and caches the compiled kernel
        run_cli(trace, policy, workers, out)
        runs = [run_cli(trace, policy, workers, out) for _ in range(args.repeats)]
        row: dict[str, Any] = {
            "workload": workload, "policy": policy, "tasks": tasks, "tenants": tenants,
            "workers": workers, "command": runs[0]["command"], "engine": runs[0]["engine"],
            "windows_count": runs[0]["windows_count"],
            "wall_s": [r["wall_s"] for r in runs], "cpu_s": [r["cpu_s"] for r in runs],
            "inner_s": [r["inner_s"] for r in runs],
        }
        if args.both_outputs:
            lean = [run_cli(trace, policy, workers, out.with_name(out.name + "-nolog"),
                            ("--no-decision-log",)) for _ in range(args.repeats)]
            row["nolog_wall_s"] = [r["wall_s"] for r in lean]
            row["nolog_cpu_s"] = [r["cpu_s"] for r in lean]
            row["median_nolog_wall_s"] = statistics.median(row["nolog_wall_s"])
            row["median_nolog_cpu_s"] = statistics.median(row["nolog_cpu_s"])
            row["nolog_wall_us_per_decision"] = 1e6 * row["median_nolog_wall_s"] / tasks
            row["nolog_cpu_us_per_decision"] = 1e6 * row["median_nolog_cpu_s"] / tasks
        row["median_wall_s"] = statistics.median(row["wall_s"])
        row["median_cpu_s"] = statistics.median(row["cpu_s"])
        row["median_inner_s"] = statistics.median(row["inner_s"])
        row["wall_us_per_decision"] = 1e6 * row["median_wall_s"] / tasks
        row["cpu_us_per_decision"] = 1e6 * row["median_cpu_s"] / tasks
        msg = (f"  {workload} {policy}: process {row['median_wall_s']:.2f} s wall, "
               f"{row['median_cpu_s']:.2f} s CPU, inner loop {row['median_inner_s']:.2f} s")
        if workload == "long" and not args.no_simpy:
            row.update(simpy_anchor(trace, policy, workers, out))
            row["speedup_cpu"] = row["simpy_cpu_s"] / row["median_cpu_s"]
            msg += (f"; SimPy {row['simpy_cpu_s']:.2f} s CPU -> {row['speedup_cpu']:.1f}x"
                    f"{'' if row['identical_start_s'] else ' (START TIMES DIFFER)'}")
            if args.both_outputs:
                row["nolog_speedup_cpu"] = row["simpy_cpu_s"] / row["median_nolog_cpu_s"]
                msg += f", {row['nolog_speedup_cpu']:.1f}x without the decision log"
        msg += f" [{row['engine']}]"
        print(msg, flush=True)
        rows.append(row)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    out = []
    for r in rows:
        speed = f"{r['speedup_cpu']:.1f}x" if "speedup_cpu" in r else "–"
        lean_speed = f"{r['nolog_speedup_cpu']:.1f}x" if "nolog_speedup_cpu" in r else "–"
        simpy = f"{r['simpy_cpu_s']:.1f}" if "simpy_cpu_s" in r else "–"
        same = {True: "yes", False: "NO"}.get(r.get("identical_start_s"), "–")  # type: ignore[arg-type]
        lean = (f"{r['median_nolog_cpu_s']:.2f} / {r['nolog_wall_us_per_decision']:.1f}"
                if "median_nolog_cpu_s" in r else "–")
        out.append([
            r["workload"], r["policy"], r["engine"], f"{r['tasks']:,}",
            f"{r['median_wall_s']:.2f}", f"{r['median_cpu_s']:.2f}", f"{r['median_inner_s']:.2f}",
            f"{r['wall_us_per_decision']:.1f}", f"{r['cpu_us_per_decision']:.1f}", lean, simpy,
            speed, lean_speed, same,
        ])
    return markdown_table(
        ["workload", "policy", "engine", "tasks", "process wall s", "process CPU s",
         "inner loop s", "wall µs/decision", "CPU µs/decision",
         "no log: CPU s / wall µs/decision", "SimPy CPU s", "speedup (CPU)",
         "speedup, no log", "identical starts"],
        out,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=[*WORKLOADS, "both"], default="both")
    parser.add_argument("--policies", nargs="+", default=sorted(REGISTRY))
    parser.add_argument("--repeats", type=int, default=1, help="desched runs per policy")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--no-simpy", action="store_true", help="skip the SimPy anchor")
    parser.add_argument("--both-outputs", action="store_true",
                        help="also run each policy with --no-decision-log")
    parser.add_argument("--quick", action="store_true", help="a tenth of the tasks")
    parser.add_argument("--tasks", type=int, default=0, help="tasks of the trace (0: the "
                        "workload's own; the tenants and workers stay)")
    parser.add_argument("--out", help="file name under benchmarks/out/ (default: cli.json)")
    args = parser.parse_args()
    unknown = [p for p in args.policies if p not in REGISTRY]
    if unknown:
        parser.error(f"unknown policies {unknown}; known: {sorted(REGISTRY)}")
    info = machine()
    workloads = list(WORKLOADS) if args.workload == "both" else [args.workload]
    rows = [row for w in workloads for row in bench(args, w)]
    info["load_avg_1m_end"] = os.getloadavg()[0]
    path = write_json(args.out or "cli.json", {"machine": info, "params": vars(args),
                                               "runs": rows})
    print()
    print(table(rows))
    print(f"\nwritten: {path}; load average {info['load_avg_1m']:.2f} at start, "
          f"{info['load_avg_1m_end']:.2f} at end")


if __name__ == "__main__":
    main()
