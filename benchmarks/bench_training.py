"""Duration-model training time on 1 million tasks.

Method: ``desched.workloads.generate("steady", tasks=N)`` builds the trace (not timed in the
training figure); then, timed separately, the leakage-safe history features
(``desched.models.features.with_history``), the whole ``desched.models.training.train``
(features, four objectives compared, p50 and p90 quantile models, baselines and metrics;
default settings: at most 400 rounds, early stopping after 30), and the lleaves compilation
of the chosen model.
One run (training is deterministic; its time is long against timer noise).

    .venv/bin/python benchmarks/bench_training.py              # 1M tasks
    .venv/bin/python benchmarks/bench_training.py --tasks 200000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.common import machine, markdown_table, shown, write_json


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--tenants", type=int, default=100)
    args = parser.parse_args()

    from desched.models.duration import compile_model
    from desched.models.features import with_history
    from desched.models.training import train
    from desched.workloads import generate

    t0 = time.perf_counter()
    frame = generate("steady", tasks=args.tasks, tenants=args.tenants, seed=1)
    generate_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    with_history(frame)
    history_s = time.perf_counter() - t0

    cpu0 = time.process_time()
    result = train(frame)
    train_cpu_s = time.process_time() - cpu0

    folder = Path(tempfile.mkdtemp(prefix="bench-training-"))
    result.model.booster.save_model(str(folder / "model.txt"))
    t0 = time.perf_counter()
    compile_model(folder / "model.txt", folder / "model.so")
    compile_s = time.perf_counter() - t0

    info = machine()
    payload = {
        "machine": info,
        "tasks": args.tasks,
        "tenants": args.tenants,
        "generate_s": generate_s,
        "history_features_s": history_s,
        "train_s": result.training_time_s,
        "train_cpu_s": train_cpu_s,
        "compile_s": compile_s,
        "objective": result.objective,
        "objectives": result.objectives,
        "metrics": result.metrics,
        "baselines": result.baselines,
    }
    path = write_json("training.json", payload)
    rows = [
        ["history features (with_history)", f"{history_s:.2f}"],
        ["train: features + 4 objectives + p50/p90 + baselines", f"{result.training_time_s:.1f}"],
        [
            f"lleaves compile of the chosen model ({int(result.objectives[result.objective]['trees'])} trees)",
            f"{compile_s:.1f}",
        ],
    ]
    rows.insert(2, ["train, CPU time of this process (all threads)", f"{train_cpu_s:.1f}"])
    print(markdown_table([f"{args.tasks:,} tasks", "seconds"], rows))
    print()
    print(
        markdown_table(
            ["objective", "trees", "valid MAE (s)", "test MAE (s)"],
            [
                [k, str(int(v["trees"])), f"{v['valid_mae_s']:.3f}", f"{v['test_mae_s']:.3f}"]
                for k, v in result.objectives.items()
            ],
        )
    )
    print(
        f"\nchosen: {result.objective}; model MAE {result.metrics['mae_s']:.3f} s; baselines "
        + ", ".join(f"{k} {v['mae_s']:.3f}" for k, v in result.baselines.items())
    )
    print(f"written: {shown(path)}; machine load average {info['load_avg_1m']:.2f}")


if __name__ == "__main__":
    main()
