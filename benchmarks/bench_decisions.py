"""Decision cost of every registered policy as the queue grows, fast against naive.

Method: a policy is filled with N queued tasks (tenants drawn from Zipf(1) over T tenants,
every task with ``predicted_s``), then timed over many decisions at increasing ``now`` that
keep the queue at N. One decision is ``pop`` + ``push`` of the next arrival + ``complete`` of
the task started 16 decisions earlier (a 16-worker steady state, so that policies which learn
from completion records pay for it). A calibration block of 20 decisions (not timed) sets the
block size to about ``--block-s`` seconds; the figure is the median over ``--repeats`` blocks
of the mean CPU µs per decision (``time.process_time``, robust to a shared machine). Naive
twins rescan the queue on every pop, so they run only up to ``--naive-max`` queued tasks (10k
by default; at 100k one naive decision takes 10-60 ms).

With ``--memory-polls`` every fast policy is also timed (impl ``fast+fit``) with its ``pop``
replaced by the memory-aware dispatch of the live service: polls alternate between a small
worker that refuses every 10th task (by position) and a big worker that takes anything, each
through ``pop_fitting`` with the service's default limit of 64 skips (a small worker's poll
that finds nothing is followed by a big worker's). The ``fast`` rows of the same run are
the anchor.

    .venv/bin/python benchmarks/bench_decisions.py            # N = 1k, 10k, 100k
    .venv/bin/python benchmarks/bench_decisions.py --quick    # N = 1k, 10k; short blocks
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.common import machine, markdown_table, shown, write_json
from desched.policies import REGISTRY, make_policy
from desched.policies.base import Policy
from desched.trace import TaskTable

RUNNING = 16
FIT_LIMIT = 64
CALIBRATION = 20
MAX_BLOCK = 20_000
TARGET_US = 50.0


def task_table(n: int, tenants: int, seed: int) -> TaskTable:
    """``n`` tasks in submission order, ~1 s apart, exponential durations and ±50% predictions."""
    rng = np.random.default_rng(seed)
    submit = np.cumsum(rng.exponential(1.0, n))
    duration = rng.exponential(10.0, n)
    share = 1 / np.arange(1, tenants + 1)
    tenant = rng.choice(tenants, size=n, p=share / share.sum())
    return TaskTable(
        task_id=[f"t{i}" for i in range(n)],
        tenant=tenant.tolist(),
        tenant_names=[f"tenant{k:04d}" for k in range(tenants)],
        submit_s=submit.tolist(),
        duration_s=duration.tolist(),
        predicted_s=(duration * rng.uniform(0.5, 1.5, n)).tolist(),
    )


def memory_polls(policy: Policy) -> Callable[[float], int]:
    """A ``pop`` made of ``pop_fitting`` calls: a small worker refusing every 10th task, then
    a big worker taking anything, in turn (module docstring)."""
    turn = [False]

    def small(i: int) -> bool:
        return i % 10 != 0

    def anything(i: int) -> bool:
        return True

    def pop(now: float) -> int:
        turn[0] = not turn[0]
        winner, _ = policy.pop_fitting(now, small if turn[0] else anything, FIT_LIMIT)
        if winner is None:
            winner, _ = policy.pop_fitting(now, anything, FIT_LIMIT)
        assert winner is not None
        return winner

    return pop


def decision_cost_us(
    name: str,
    tasks: TaskTable,
    queued: int,
    naive: bool,
    repeats: int,
    block_s: float,
    fit: bool = False,
) -> dict[str, Any]:
    """Median over ``repeats`` blocks of the mean µs per decision at a queue of ``queued``;
    with ``fit``, decisions go through ``memory_polls``."""
    policy = make_policy(name, tasks, naive=naive)
    submit, duration = tasks.submit_s, tasks.duration_s
    for i in range(queued):
        policy.push(i, submit[i])
    running: deque[int] = deque()
    nxt = queued

    def decide(count: int) -> float:
        nonlocal nxt
        pop = memory_polls(policy) if fit else policy.pop
        push, complete = policy.push, policy.complete
        t0 = time.process_time()
        for _ in range(count):
            now = submit[nxt]
            running.append(pop(now))
            push(nxt, now)
            nxt += 1
            if len(running) > RUNNING:
                done = running.popleft()
                complete(done, now, duration[done])
        return time.process_time() - t0

    per_decision = decide(CALIBRATION) / CALIBRATION
    block = max(5, min(MAX_BLOCK, int(block_s / max(per_decision, 1e-9))))
    block = min(block, (len(tasks) - nxt) // repeats)
    us = [decide(block) / block * 1e6 for _ in range(repeats)]
    assert len(policy) == queued
    return {"us_per_decision": statistics.median(us), "blocks_us": us, "block": block}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queued", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--tenants", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--policies", nargs="+", default=sorted(REGISTRY))
    parser.add_argument("--naive-max", type=int, default=10_000, help="largest queue for naive")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--block-s", type=float, default=0.2, help="seconds per timed block")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--quick", action="store_true", help="N = 1k, 10k; 3 short blocks")
    parser.add_argument(
        "--memory-polls",
        action="store_true",
        help="also time every fast policy under memory-aware polls (impl fast+fit)",
    )
    parser.add_argument("--out", help="file name under benchmarks/out/ (default: decisions.json, "
                        "decisions-quick.json with --quick)")
    args = parser.parse_args()
    if args.quick:
        args.queued = [q for q in args.queued if q <= 10_000]
        args.repeats, args.block_s = 3, 0.02

    info = machine()
    results: list[dict[str, Any]] = []
    spare = args.repeats * MAX_BLOCK + CALIBRATION
    for tenants in args.tenants:
        for queued in args.queued:
            tasks = task_table(queued + spare, tenants, args.seed)
            for name in args.policies:
                impls = [("fast", False, False), ("naive", True, False)]
                if args.memory_polls:
                    impls.append(("fast+fit", False, True))
                for impl, naive, fit in impls:
                    if naive and queued > args.naive_max:
                        continue
                    r = decision_cost_us(
                        name, tasks, queued, naive, args.repeats, args.block_s, fit
                    )
                    r.update(policy=name, impl=impl, queued=queued, tenants=tenants)
                    results.append(r)
                    print(f"  {name:<24} {r['impl']:<5} tenants={tenants:<5} queued={queued:<7}"
                          f" {r['us_per_decision']:10.1f} µs", flush=True)

    params = {k: getattr(args, k) for k in ("queued", "tenants", "naive_max", "repeats",
                                            "block_s", "seed", "quick", "memory_polls")}
    out = args.out or ("decisions-quick.json" if args.quick else "decisions.json")
    path = write_json(out, {
        "machine": info, "params": params, "method": __doc__.split("\n\n")[1],
        "results": results,
    })

    cost = {(r["policy"], r["impl"], r["tenants"], r["queued"]): r["us_per_decision"]
            for r in results}
    columns = [(t, q) for t in args.tenants for q in args.queued]
    rows = []
    for name in args.policies:
        for impl in ("fast", "naive", "fast+fit"):
            if not any(r["impl"] == impl for r in results):
                continue
            cells = []
            for t, q in columns:
                us = cost.get((name, impl, t, q))
                if us is None:
                    cells.append("–")
                else:
                    flag = " ⚠" if impl == "fast" and q >= 100_000 and us >= TARGET_US else ""
                    cells.append(f"{us:,.1f}{flag}")
            rows.append([name, impl, *cells])
    print()
    print(markdown_table(
        ["policy", "impl", *(f"T={t} N={q:,}" for t, q in columns)], rows
    ))
    missed = [r for r in results if r["impl"] == "fast" and r["queued"] >= 100_000
              and r["us_per_decision"] >= TARGET_US]
    print(f"\nCPU µs per decision (pop + push + complete), median of {args.repeats} blocks; "
          f"naive only up to {args.naive_max:,} queued; ⚠ = over the {TARGET_US:.0f} µs target "
          f"at 100k ({len(missed)} case(s)).")
    print(f"written: {shown(path)}; machine load average {info['load_avg_1m']:.2f}")


if __name__ == "__main__":
    main()
