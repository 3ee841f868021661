"""Duration-model prediction latency: the compiled predictor against ``Booster.predict``.

Method: a model is trained on a generated trace (``steady``, 20k tasks, default settings) and
registered in a temporary registry; every contender then predicts the same held-out rows
with the same model. Single row: one call on one (1, n_features) row, timed in blocks of
calls (about ``--block-s`` seconds each); the figure is the median over ``--repeats`` blocks
of the mean µs per call. Batch: one call on 10,000 rows, median over ``--repeats`` calls.
Outputs of every contender are checked equal to ``Booster.predict`` to 1e-9 first.

Contenders: ``Booster.predict`` with LightGBM's default threads and with ``num_threads=1``;
``lleaves.Model.predict`` (n_jobs=1, and n_jobs=2 for the batch); desched's
``CompiledForest`` (lleaves' compiled code called directly on preallocated buffers);
end to end, ``Predictor.predict_one`` on a task mapping against the same encoding followed by
``Booster.predict(num_threads=1)``.

    .venv/bin/python benchmarks/bench_predictor.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.common import machine, markdown_table, write_json


def per_call_us(fn: Callable[[], object], repeats: int, block_s: float) -> float:
    """Median over ``repeats`` blocks of the mean µs per call; block size calibrated once."""
    start = time.perf_counter()
    n = 0
    while time.perf_counter() - start < 0.05:
        fn()
        n += 1
    calls = max(10, int(n * block_s / 0.05))
    blocks = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        blocks.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(blocks)


def per_batch_ms(fn: Callable[[], object], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--block-s", type=float, default=0.2)
    args = parser.parse_args()

    import lleaves

    from desched.models.duration import Predictor
    from desched.models.promotion import register
    from desched.models.training import train
    from desched.workloads import generate

    frame = generate("steady", tasks=args.tasks, tenants=20, seed=1)
    result = train(frame)
    registry = Path(tempfile.mkdtemp(prefix="bench-predictor-")) / "duration"
    card = register(registry, result, commit="bench")
    predictor = Predictor.load(registry)
    booster = predictor.booster()
    forest = predictor._forest
    ll = lleaves.Model(model_file=str(predictor.model_path))
    ll.compile(cache=str(registry / card.version / "model.so"))

    big = generate("steady", tasks=args.batch, tenants=20, seed=2)
    x = predictor.features_of(big)
    row = np.ascontiguousarray(x[:1])
    task = big.row(500, named=True)

    # Equality first: every contender against Booster.predict, on the whole batch.
    reference = booster.predict(x)
    diffs = {
        "lleaves": float(np.max(np.abs(ll.predict(x, n_jobs=1) - reference))),
        "CompiledForest": float(np.max(np.abs(forest.predict(x) - reference))),
    }
    for r in x[:200]:
        forest.row[:] = r
        diffs["CompiledForest"] = max(
            diffs["CompiledForest"], abs(forest.predict_row() - float(booster.predict(r[None])[0]))
        )
    assert all(d <= 1e-9 for d in diffs.values()), diffs

    def fast_row() -> float:
        forest.row[:] = row[0]
        return forest.predict_row()

    def reference_one() -> float:
        return float(np.exp(booster.predict(predictor.encode(task)[None, :], num_threads=1)[0]))

    single = {
        "Booster.predict (default threads)": per_call_us(
            lambda: booster.predict(row), args.repeats, args.block_s
        ),
        "Booster.predict (num_threads=1)": per_call_us(
            lambda: booster.predict(row, num_threads=1), args.repeats, args.block_s
        ),
        "lleaves Model.predict (n_jobs=1)": per_call_us(
            lambda: ll.predict(row, n_jobs=1), args.repeats, args.block_s
        ),
        "CompiledForest (desched)": per_call_us(fast_row, args.repeats, args.block_s),
    }
    end_to_end = {
        "encode + Booster.predict (num_threads=1)": per_call_us(
            reference_one, args.repeats, args.block_s
        ),
        "Predictor.predict_one": per_call_us(
            lambda: predictor.predict_one(task), args.repeats, args.block_s
        ),
    }
    batch = {
        "Booster.predict (default threads)": per_batch_ms(lambda: booster.predict(x), args.repeats),
        "Booster.predict (num_threads=1)": per_batch_ms(
            lambda: booster.predict(x, num_threads=1), args.repeats
        ),
        "lleaves Model.predict (n_jobs=1)": per_batch_ms(
            lambda: ll.predict(x, n_jobs=1), args.repeats
        ),
        "lleaves Model.predict (n_jobs=2)": per_batch_ms(
            lambda: ll.predict(x, n_jobs=2), args.repeats
        ),
        "CompiledForest (desched, 1 thread)": per_batch_ms(lambda: forest.predict(x), args.repeats),
    }
    anchor_single = single["Booster.predict (num_threads=1)"]
    anchor_default = single["Booster.predict (default threads)"]
    anchor_batch = batch["Booster.predict (default threads)"]
    info = machine()
    payload: dict[str, Any] = {
        "machine": info,
        "model": {
            "version": card.version,
            "objective": card.objective,
            "trees": booster.num_trees(),
            "features": booster.num_feature(),
            "compile_time_s": card.compile_time_s,
        },
        "max_abs_diff_vs_booster": diffs,
        "single_row_us": single,
        "end_to_end_us": end_to_end,
        "batch_ms": batch,
        "batch_rows": args.batch,
    }
    path = write_json("predictor.json", payload)
    print(
        f"model: {card.objective}, {booster.num_trees()} trees, {booster.num_feature()} "
        f"features; lleaves compile {card.compile_time_s or 0.0:.1f} s; max |diff| {diffs}"
    )
    print()
    print(
        markdown_table(
            ["single row", "µs per call", "vs Booster (1 thread)", "vs Booster (default)"],
            [
                [k, f"{v:.2f}", f"{anchor_single / v:.1f}×", f"{anchor_default / v:.1f}×"]
                for k, v in single.items()
            ],
        )
    )
    print()
    print(
        markdown_table(
            ["end to end (task mapping)", "µs per call", "speedup"],
            [
                [
                    k,
                    f"{v:.2f}",
                    f"{end_to_end['encode + Booster.predict (num_threads=1)'] / v:.1f}×",
                ]
                for k, v in end_to_end.items()
            ],
        )
    )
    print()
    print(
        markdown_table(
            [f"batch of {args.batch:,} rows", "ms per call", "vs Booster (default)"],
            [[k, f"{v:.2f}", f"{anchor_batch / v:.1f}×"] for k, v in batch.items()],
        )
    )
    print(f"\nwritten: {path.relative_to(ROOT)}; machine load average {info['load_avg_1m']:.2f}")


if __name__ == "__main__":
    main()
