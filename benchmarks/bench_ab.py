"""Two checkouts' ``desched simulate``, whole process, runs interleaved: what a change did.

The same trace, policy and workers run alternately under this checkout and ``--base`` (a
checkout of the commit to compare with, e.g. ``git worktree add /tmp/base COMMIT``), each in
a fresh process (``bench_cli.run_cli``: bytecode written, ``PYTHONPATH`` set to the tree),
after one untimed run of each; the figures are the medians of wall and CPU seconds (user +
system of the child). Interleaving makes both sides see the same load.

    git worktree add /tmp/base HEAD~1
    .venv/bin/python benchmarks/bench_ab.py --base /tmp/base --trace benchmarks/out/cli/long-100000-50-2026.parquet
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_cli import run_cli, trace_path
from benchmarks.common import OUT, machine, markdown_table, write_json


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True,
                        help="checkout to compare with (its desched/ is imported)")
    parser.add_argument("--trace", type=Path, default=None,
                        help="trace Parquet file (default: bench_cli's long workload, 100k)")
    parser.add_argument("--policies", nargs="+", default=["fifo", "ifs-memoryless"])
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=9, help="timed runs per side")
    parser.add_argument("--no-decision-log", action="store_true")
    parser.add_argument("--out", default="ab.json", help="file name under benchmarks/out/")
    args = parser.parse_args()
    if not (args.base / "desched" / "__init__.py").is_file():
        parser.error(f"--base {args.base}: not a checkout of desched (no desched/__init__.py)")
    trace = args.trace or trace_path("long", 100_000, 2026)
    extra = ("--no-decision-log",) if args.no_decision_log else ()
    trees = {"base": args.base.resolve(), "this": ROOT}
    load = [os.getloadavg()[0]]
    rows = []
    for policy in args.policies:
        runs: dict[str, list[dict]] = {side: [] for side in trees}
        for repeat in range(args.repeats + 1):
            for side, tree in trees.items():
                run = run_cli(trace, policy, args.workers, OUT / "ab" / side, extra, tree)
                if repeat:  # the first of each side writes bytecode and kernel caches
                    runs[side].append(run)
        row = {"policy": policy, "trace": str(trace), "repeats": args.repeats}
        for side in trees:
            row[f"{side}_wall_s"] = statistics.median(r["wall_s"] for r in runs[side])
            row[f"{side}_cpu_s"] = statistics.median(r["cpu_s"] for r in runs[side])
        rows.append(row)
        print(f"{policy}: base {row['base_wall_s']:.3f} s wall, {row['base_cpu_s']:.3f} CPU-s; "
              f"this {row['this_wall_s']:.3f} s wall, {row['this_cpu_s']:.3f} CPU-s",
              flush=True)
    load.append(os.getloadavg()[0])
    print()
    print(markdown_table(
        ["policy", "base wall s", "this wall s", "base CPU s", "this CPU s", "CPU change"],
        [[r["policy"], f"{r['base_wall_s']:.3f}", f"{r['this_wall_s']:.3f}",
          f"{r['base_cpu_s']:.3f}", f"{r['this_cpu_s']:.3f}",
          f"{r['this_cpu_s'] / r['base_cpu_s'] - 1:+.1%}"] for r in rows]))
    path = write_json(args.out, {"machine": machine(), "load_average": load,
                                 "base": str(trees["base"]), "rows": rows})
    print(f"written: {path}; load average {load[0]:.2f} at start, {load[1]:.2f} at end")


if __name__ == "__main__":
    main()
