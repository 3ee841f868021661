"""The longest single decisions of the policy objects the live service runs, with a deep queue.

A mean per decision (``bench_decisions.py``) hides a decision that does O(queue) work once in
a while: the poll that lands on it waits. Method: ``bench_decisions.py``'s steady state (the
queue filled with N tasks, then ``pop`` + ``push`` of the next arrival + ``complete`` of the
task started 16 decisions earlier, so the queue stays at N), every decision timed on its own
(``time.perf_counter``, wall) over ``--decisions`` decisions; reported: the longest, the
99.9th percentile, the mean, and how many decisions took over 10 ms. Policies are named as
the judge names them (``boost-now?rekey_spread=0``: that setting).

    .venv/bin/python benchmarks/bench_stalls.py                  # N = 100k, 20,000 decisions
    .venv/bin/python benchmarks/bench_stalls.py --queued 10000 --decisions 5000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_decisions import RUNNING, task_table
from benchmarks.common import machine, markdown_table, shown, write_json
from desched.policies import make_policy
from desched.trace import TaskTable

LONG_MS = 10.0


def parse(spec: str) -> tuple[str, dict[str, str]]:
    """``name?k=v&k=v`` -> the name and its settings."""
    name, _, query = spec.partition("?")
    pairs = [p.split("=", 1) for p in query.split("&") if p]
    bad = [p[0] for p in pairs if len(p) != 2]
    if bad:
        raise SystemExit(f"bench_stalls: {spec!r}: a setting without a value: {bad[0]!r}")
    return name, dict(pairs)  # type: ignore[arg-type]


def stalls(spec: str, tasks: TaskTable, queued: int, decisions: int) -> dict[str, Any]:
    name, params = parse(spec)
    policy = make_policy(name, tasks, params)
    submit, duration = tasks.submit_s, tasks.duration_s
    for i in range(queued):
        policy.push(i, submit[i])
    running: deque[int] = deque()
    clock = time.perf_counter
    took = np.zeros(decisions)
    for k in range(decisions):
        j = queued + k
        now = submit[j]
        t0 = clock()
        running.append(policy.pop(now))
        policy.push(j, now)
        if len(running) > RUNNING:
            done = running.popleft()
            policy.complete(done, now, duration[done])
        took[k] = clock() - t0
    assert len(policy) == queued
    ms = took * 1e3
    return {"policy": spec, "queued": queued, "decisions": decisions,
            "max_ms": float(ms.max()), "p999_ms": float(np.quantile(ms, 0.999)),
            "mean_us": float(ms.mean() * 1e3), "median_us": float(statistics.median(ms) * 1e3),
            "over_10ms": int((ms > LONG_MS).sum())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queued", type=int, nargs="+", default=[100_000])
    parser.add_argument("--decisions", type=int, default=20_000)
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--policies", nargs="+",
                        default=["boost-predicted", "boost-now", "boost-now?rekey_spread=0"])
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--out", default="stalls.json", help="file name under benchmarks/out/")
    args = parser.parse_args()
    if args.decisions < 1:
        parser.error("--decisions must be at least 1")
    info = machine()
    results = []
    for queued in args.queued:
        tasks = task_table(queued + args.decisions, args.tenants, args.seed)
        for spec in args.policies:
            r = stalls(spec, tasks, queued, args.decisions)
            results.append(r)
            print(f"  {spec:<28} queued={queued:<7} longest {r['max_ms']:7.1f} ms, p99.9 "
                  f"{r['p999_ms']:6.2f} ms, mean {r['mean_us']:7.1f} µs", flush=True)
    path = write_json(args.out, {"machine": info, "params": vars(args),
                                 "method": __doc__.split("\n\n")[1], "results": results})
    print()
    print(markdown_table(
        ["policy", "queued", "decisions", "longest ms", "p99.9 ms", "mean µs",
         f"over {LONG_MS:.0f} ms"],
        [[r["policy"], f"{r['queued']:,}", f"{r['decisions']:,}", f"{r['max_ms']:.1f}",
          f"{r['p999_ms']:.2f}", f"{r['mean_us']:.1f}", str(r["over_10ms"])] for r in results]))
    print(f"\nwritten: {shown(path)}; machine load average {info['load_avg_1m']:.2f}")


if __name__ == "__main__":
    main()
