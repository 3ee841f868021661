"""What a poll costs when many of the policy's first candidates do not fit it.

A worker short of memory, or a tenant at its cap, makes a poll walk the policy's pop sequence
(``Policy.pop_fitting``) past every candidate it cannot take. Method: a queue of N tasks
(``bench_decisions.task_table``), the first ``--skip`` of them (by position) refused by the
poll and labelled short (``predicted_s`` 0.5 s, so that they come first under the policies
that rank on size as under first-come); 300 untimed polls, each dispatching a task that fits,
give the Boost policies an estimate; then ``--polls`` polls are timed one by one
(``time.perf_counter``, wall, in process), each dispatching the first fitting task.
Reported: the median and the longest, in ms. Policies are named as the judge names them
(``boost-now?rekey_spread=0``: that setting).

    .venv/bin/python benchmarks/bench_walks.py                       # N 6,300, 3,000 skipped
    .venv/bin/python benchmarks/bench_walks.py --queued 60000 --skip 4000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_decisions import task_table
from benchmarks.bench_stalls import parse
from benchmarks.common import machine, markdown_table, shown, write_json
from desched.policies import make_policy

WARM_UP = 300


def walk_ms(spec: str, queued: int, skip: int, polls: int, seed: int) -> dict[str, Any]:
    name, params = parse(spec)
    tasks = task_table(queued, 20, seed)
    for i in range(skip):
        tasks.predicted_s[i] = 0.5
    policy = make_policy(name, tasks, params)
    now = tasks.submit_s[-1] + 1.0
    for i in range(queued):
        policy.push(i, tasks.submit_s[i])

    def fits(i: int) -> bool:
        return i >= skip

    for _ in range(WARM_UP):
        policy.pop_fitting(now, fits, None)
    took = []
    for _ in range(polls):
        t0 = time.perf_counter()
        winner, skipped = policy.pop_fitting(now, fits, None)
        took.append((time.perf_counter() - t0) * 1e3)
        assert winner is not None and skipped == skip
    return {"policy": spec, "queued": queued, "skip": skip, "polls": polls,
            "median_ms": statistics.median(took), "max_ms": max(took)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queued", type=int, default=6300)
    parser.add_argument("--skip", type=int, default=3000)
    parser.add_argument("--polls", type=int, default=20)
    parser.add_argument("--policies", nargs="+", default=[
        "boost-now", "boost-now?rekey_spread=0", "boost-predicted", "fifo", "ifs-memoryless"])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default="walks.json", help="file name under benchmarks/out/")
    args = parser.parse_args()
    if not 0 <= args.skip < args.queued - WARM_UP - args.polls:
        parser.error(f"--skip must leave at least {WARM_UP + args.polls} tasks that fit")
    info = machine()
    results = []
    for spec in args.policies:
        r = walk_ms(spec, args.queued, args.skip, args.polls, args.seed)
        results.append(r)
        print(f"  {spec:<28} median {r['median_ms']:7.1f} ms, longest {r['max_ms']:7.1f} ms",
              flush=True)
    path = write_json(args.out, {"machine": info, "params": vars(args),
                                 "method": __doc__.split("\n\n")[1], "results": results})
    print()
    print(markdown_table(["policy", "queued", "skipped", "median ms", "longest ms"],
                         [[r["policy"], f"{r['queued']:,}", f"{r['skip']:,}",
                           f"{r['median_ms']:.1f}", f"{r['max_ms']:.1f}"] for r in results]))
    print(f"\nwritten: {shown(path)}; machine load average {info['load_avg_1m']:.2f}")


if __name__ == "__main__":
    main()
