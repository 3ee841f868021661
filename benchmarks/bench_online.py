"""What predictions made during a run cost the judge: one test part, four ways.

A judge case's policies that rank on predictions predict each arrival from what had finished
in that run (``desched.bench.online``). This times, per policy, one simulation of a bundled
log's test part (prepared as ``desched judge`` does, cached under ``data/judge-cache``): the
compiled kernel on the case's own (seed-history) predictions, the Python loop on the same, and
the predictions made during the run by the Python loop and by the kernel
(``desched.kernels.source_online``), each arrival calling the forests (the case's memo of
earlier runs' predictions off). Process CPU time, medians over ``--repeats``.

    .venv/bin/python benchmarks/bench_online.py                     # SDSC-Par, three policies
    .venv/bin/python benchmarks/bench_online.py --log LANL-CM5-1994-4.1-cln --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.common import machine, markdown_table, write_json
from desched.bench.judge_cases import default_logs, log_name, prepare_log
from desched.bench.verdicts import case_table, run_labels
from desched.policies import make_policy
from desched.simulator import Engine, simulate


def cpu_of(run: object) -> float:
    t0 = time.process_time()
    run()  # type: ignore[operator]
    return time.process_time() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log", default="SDSC-Par-1996-3.1-cln", help="a bundled log's name")
    parser.add_argument("--policies", nargs="+",
                        default=["sjf-predicted", "boost-predicted", "boost-ledger"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cache", default=str(ROOT / "data" / "judge-cache"))
    parser.add_argument("--out", default="online.json", help="file under benchmarks/out/")
    args = parser.parse_args()
    logs = {log_name(p): p for p in default_logs()}
    if args.log not in logs:
        parser.error(f"--log: no bundled log {args.log!r} (logs: {', '.join(logs)})")
    case = prepare_log(logs[args.log], cache_dir=Path(args.cache),
                       progress=lambda m: print(m, file=sys.stderr))
    rows, results = [], []
    for name in args.policies:
        def kernel(name: str = name) -> None:
            tasks = case_table(case)
            simulate(tasks, make_policy(name, tasks), case.workers)

        def loop(name: str = name) -> None:
            tasks = case_table(case)
            simulate(tasks, make_policy(name, tasks), case.workers, engine="python")

        def online(name: str = name, engine: Engine = "python") -> None:
            tasks = case_table(case)
            policy = make_policy(name, tasks)
            labels = run_labels(case, policy, tasks)
            labels.memo = False  # every arrival calls the forests (no earlier run's memo)
            simulate(tasks, policy, case.workers, labels=labels, engine=engine)

        def kernel_online(name: str = name) -> None:
            online(name, "kernel")

        online()  # compiles the forests once (the machine's cache keeps them)
        times = {k: statistics.median(cpu_of(f) for _ in range(args.repeats))
                 for k, f in (("kernel", kernel), ("python", loop), ("online", online),
                              ("kernel_online", kernel_online))}
        results.append({"policy": name, **{f"{k}_cpu_s": v for k, v in times.items()}})
        rows.append([name, f"{times['kernel']:.2f}", f"{times['python']:.2f}",
                     f"{times['online']:.2f}", f"{times['kernel_online']:.2f}",
                     f"{(times['kernel_online'] - times['kernel']) / case.tasks * 1e6:.0f}"])
    print(f"{args.log}: {case.tasks} test tasks on {case.workers} workers; process CPU s, "
          f"median of {args.repeats}")
    print(markdown_table(["policy", "kernel", "Python loop", "Python loop + online predictions",
                          "kernel + online predictions", "in the kernel, µs/arrival"], rows))
    write_json(args.out, {"machine": machine(), "log": args.log, "tasks": case.tasks,
                          "workers": case.workers, "repeats": args.repeats, "rows": results})


if __name__ == "__main__":
    main()
