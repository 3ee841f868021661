"""Simulation throughput: desched's simulator against a SimPy model of the same run.

Beside the inner loop, each policy's ``desched simulate`` runs as a user runs it, in a fresh
process on the same trace written as Parquet (``benchmarks/bench_cli.py``'s ``run_cli``):
its CPU and wall seconds from start-up to the run folder written (``--no-process`` skips it).

For each policy (``fifo``, ``ifs-memoryless``) the same Poisson trace runs through
``desched.simulator.simulate`` (median of ``--repeats``) and through the SimPy models of
``tests/simpy_model.py`` (once, on the first ``--simpy-tasks`` tasks of the trace: the whole
trace by default); start times must be identical. Both use the same fast policy object, so
the difference is the mechanism. For ``fifo`` there is also the fastest SimPy formulation (a
``Store`` and one process per worker). Throughput is tasks per CPU second of this process
(``time.process_time``), which a busy shared machine disturbs far less than wall time; the
JSON keeps the wall times too. Then the peak memory of a whole desched run (building
the trace from a frame and simulating it) is measured in a fresh process under
``/usr/bin/time -v`` (``ru_maxrss`` of the child where that is missing).

    .venv/bin/python benchmarks/bench_simulator.py            # 1M tasks
    .venv/bin/python benchmarks/bench_simulator.py --quick    # 50k tasks, smoke run
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_cli import run_cli
from benchmarks.common import OUT, machine, markdown_table, poisson_trace, shown, write_json
from desched.policies import make_policy
from desched.simulator import simulate
from desched.trace import TaskTable, validate_trace, write_trace
from tests.simpy_model import simulate_simpy, simulate_simpy_fifo

POLICIES = ("fifo", "ifs-memoryless")


def build_tasks(args: argparse.Namespace) -> TaskTable:
    frame = poisson_trace(args.tasks, args.tenants, args.workers, args.load, args.seed)
    return TaskTable.from_frame(validate_trace(frame, "synthetic"))


def trace_file(args: argparse.Namespace) -> Path:
    """The same trace as a Parquet file, for the whole-process runs of ``desched simulate``."""
    path = OUT / f"simulator-trace-{args.tasks}-{args.tenants}-{args.workers}-{args.seed}.parquet"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_trace(poisson_trace(args.tasks, args.tenants, args.workers, args.load, args.seed),
                    path)
    return path


def head(tasks: TaskTable, n: int) -> TaskTable:
    """The first ``n`` tasks (the trace is in submission order)."""
    if n >= len(tasks):
        return tasks
    return TaskTable(
        task_id=tasks.task_id[:n],
        tenant=tasks.tenant[:n],
        tenant_names=tasks.tenant_names,
        submit_s=tasks.submit_s[:n],
        duration_s=tasks.duration_s[:n],
        predicted_s=tasks.predicted_s[:n],
    )


@dataclass(frozen=True, slots=True)
class Timing:
    """CPU seconds of this process (the figure reported: robust to a shared machine) and wall."""

    cpu_s: float
    wall_s: float


def timed(fn: Any, *args: Any) -> tuple[Timing, Any]:
    gc.collect()
    c0, w0 = time.process_time(), time.perf_counter()
    value = fn(*args)
    return Timing(time.process_time() - c0, time.perf_counter() - w0), value


def peak_memory(args: argparse.Namespace, policy: str) -> dict[str, Any]:
    """Peak RSS of a fresh process that builds the trace and simulates it under ``policy``."""
    cmd = [
        sys.executable, __file__, "--child", policy, "--tasks", str(args.tasks),
        "--tenants", str(args.tenants), "--workers", str(args.workers),
        "--load", str(args.load), "--seed", str(args.seed),
    ]
    gnu_time = shutil.which("time")
    if gnu_time:
        cmd = [gnu_time, "-v", *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"peak-memory run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    child: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    found = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    if found:
        child["peak_rss_mb"] = int(found.group(1)) / 1024
        child["peak_rss_by"] = "/usr/bin/time -v"
    else:
        child["peak_rss_mb"] = child["ru_maxrss_after_mb"]
        child["peak_rss_by"] = "ru_maxrss of the child"
    return child


def child(args: argparse.Namespace) -> None:
    """One whole run in this process; prints a JSON line with its own memory figures."""
    tasks = build_tasks(args)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result = simulate(tasks, make_policy(args.child, tasks), args.workers)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({
        "policy": args.child, "tasks": len(tasks), "simulate_s": result.wall_s,
        "ru_maxrss_before_simulate_mb": before, "ru_maxrss_after_mb": after,
    }))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--tenants", type=int, default=50)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--load", type=float, default=0.9, help="utilisation of the workers")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--repeats", type=int, default=3, help="desched runs per policy")
    parser.add_argument("--simpy-tasks", type=int, default=0, help="SimPy on this prefix (0: all)")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory runs")
    parser.add_argument("--no-process", action="store_true",
                        help="skip the whole-process runs of `desched simulate`")
    parser.add_argument("--quick", action="store_true", help="50k tasks, one repeat")
    parser.add_argument("--out", help="file name under benchmarks/out/ (default: simulator.json, "
                        "simulator-quick.json with --quick)")
    parser.add_argument("--child", choices=POLICIES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.tasks, args.repeats = min(args.tasks, 50_000), 1
    if args.child:
        child(args)
        return

    info = machine()
    print(f"building a {args.tasks:,}-task trace ({args.tenants} tenants, {args.workers} "
          f"workers, load {args.load})", flush=True)
    tasks = build_tasks(args)
    simpy_n = args.simpy_tasks or len(tasks)
    simpy_tasks = head(tasks, simpy_n)
    runs: list[dict[str, Any]] = []
    for name in POLICIES:
        ours_t: list[Timing] = []
        for _ in range(args.repeats):
            t, result = timed(simulate, tasks, make_policy(name, tasks), args.workers)
            ours_t.append(t)
            print(f"  desched {name}: {t.cpu_s:.2f} s CPU, {t.wall_s:.2f} s wall", flush=True)
        ours = list(result.start_s[:simpy_n])
        simpy_t, ref = timed(
            simulate_simpy, simpy_tasks, make_policy(name, simpy_tasks), args.workers
        )
        print(f"  simpy   {name}: {simpy_t.cpu_s:.2f} s CPU, {simpy_t.wall_s:.2f} s wall",
              flush=True)
        assert ref.start_s == ours, f"{name}: the SimPy model disagrees with the simulator"
        assert ref.worker == list(result.worker[:simpy_n])
        cpu = statistics.median(t.cpu_s for t in ours_t)
        row: dict[str, Any] = {
            "policy": name,
            "tasks": len(tasks),
            "desched_cpu_s": [t.cpu_s for t in ours_t],
            "desched_wall_s": [t.wall_s for t in ours_t],
            "desched_tasks_per_s": len(tasks) / cpu,
            "simpy_tasks": simpy_n,
            "simpy_cpu_s": simpy_t.cpu_s,
            "simpy_wall_s": simpy_t.wall_s,
            "simpy_tasks_per_s": simpy_n / simpy_t.cpu_s,
            "identical_start_s": True,
        }
        if name == "fifo":
            store_t, store = timed(
                simulate_simpy_fifo, simpy_tasks.submit_s, simpy_tasks.duration_s, args.workers
            )
            print(f"  simpy   fifo (Store): {store_t.cpu_s:.2f} s CPU, {store_t.wall_s:.2f} s "
                  "wall", flush=True)
            assert store == ours, "the SimPy Store model disagrees with the simulator"
            row["simpy_store_cpu_s"] = store_t.cpu_s
            row["simpy_store_wall_s"] = store_t.wall_s
            row["simpy_store_tasks_per_s"] = simpy_n / store_t.cpu_s
        fastest_simpy = max(row["simpy_tasks_per_s"], row.get("simpy_store_tasks_per_s", 0.0))
        row["speedup_vs_fastest_simpy"] = row["desched_tasks_per_s"] / fastest_simpy
        if not args.no_process:
            # the command a user runs: reading the trace to writing the run folder
            whole = run_cli(trace_file(args), name, args.workers,
                            OUT / f"simulator-run-{args.tasks}-{name}")
            row["process_command"] = whole["command"]
            row["process_wall_s"] = whole["wall_s"]
            row["process_cpu_s"] = whole["cpu_s"]
            row["process_tasks_per_cpu_s"] = len(tasks) / whole["cpu_s"]
            row["process_speedup_vs_simpy_model"] = row["simpy_cpu_s"] * len(tasks) / (
                simpy_n * whole["cpu_s"])
            print(f"  desched simulate (whole process) {name}: {whole['cpu_s']:.2f} s CPU, "
                  f"{whole['wall_s']:.2f} s wall", flush=True)
        runs.append(row)
    del tasks, simpy_tasks, result, ref

    memory = [] if args.no_memory else [peak_memory(args, name) for name in POLICIES]
    for m in memory:
        print(f"  peak memory {m['policy']}: {m['peak_rss_mb']:.0f} MB ({m['peak_rss_by']})")
    params = {k: getattr(args, k) for k in ("tasks", "tenants", "workers", "load", "seed",
                                            "repeats", "quick")}
    payload = {"machine": info, "params": params, "runs": runs, "peak_memory": memory}
    out = args.out or ("simulator-quick.json" if args.quick else "simulator.json")
    path = write_json(out, payload)

    rows = []
    for r in runs:
        store = f"{r['simpy_store_tasks_per_s']:,.0f}" if "simpy_store_tasks_per_s" in r else "–"
        process = (f"{r['process_tasks_per_cpu_s']:,.0f} "
                   f"({r['process_speedup_vs_simpy_model']:.1f}x)"
                   if "process_tasks_per_cpu_s" in r else "–")
        rows.append([
            r["policy"], f"{r['tasks']:,}", f"{r['desched_tasks_per_s']:,.0f}", process,
            f"{r['simpy_tasks_per_s']:,.0f}", store, f"{r['speedup_vs_fastest_simpy']:.1f}x",
            "yes" if r["identical_start_s"] else "NO",
        ])
    print()
    print(markdown_table(
        ["policy", "tasks", f"desched inner loop tasks/CPU-s (median of {args.repeats})",
         "`desched simulate` whole process tasks/CPU-s (x SimPy model)",
         f"SimPy model tasks/CPU-s ({simpy_n:,} tasks, 1 run)", "SimPy Store fifo tasks/CPU-s",
         "inner loop speedup vs fastest SimPy", "identical starts"],
        rows,
    ))
    if memory:
        print()
        print(markdown_table(
            ["policy", "tasks", "peak RSS (MB)", "RSS before simulate (MB)", "measured by"],
            [[m["policy"], f"{m['tasks']:,}", f"{m['peak_rss_mb']:.0f}",
              f"{m['ru_maxrss_before_simulate_mb']:.0f}", m["peak_rss_by"]] for m in memory],
        ))
    print(f"\nwritten: {shown(path)}; machine load average {info['load_avg_1m']:.2f}")


if __name__ == "__main__":
    main()
