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
``Booster.predict(num_threads=1)``, and ``Predictor.predict_labels`` (the model and its p50
and p90 quantile models from one encoding: what the service runs at submit).

Compile options: each of the version's three model texts (the model, p50, p90) compiled
with lleaves' defaults (trees inlined into one function) and with desched's
``COMPILE_OPTIONS`` (not inlined), once each (``--compile-repeats``): seconds to compile,
µs per single row, ms per batch, and whether the two give the same bits on the batch.

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

from benchmarks.common import machine, markdown_table, shown, write_json


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


def compile_options(folder: Path, files: dict[str, str], x: np.ndarray, row: np.ndarray,
                    args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Each model text compiled with lleaves' defaults and with ``COMPILE_OPTIONS``."""
    import ctypes

    import lleaves

    from desched.models.duration import COMPILE_OPTIONS

    doubles = ctypes.POINTER(ctypes.c_double)
    out: dict[str, dict[str, Any]] = {}
    for key in ("model", "p50", "p90"):
        if key not in files:
            continue
        compile_s, row_us, batch_ms, outputs = [], [], [], []
        trees = 0
        for options in ({}, COMPILE_OPTIONS):
            times = []
            for _ in range(args.compile_repeats):
                model = lleaves.Model(model_file=str(folder / files[key]))
                t0 = time.perf_counter()
                model.compile(**options)
                times.append(time.perf_counter() - t0)
            trees = model.num_trees()
            entry = model._c_entry_func
            one = np.ascontiguousarray(row[0])
            cell = np.zeros(1)
            one_p, cell_p = one.ctypes.data_as(doubles), cell.ctypes.data_as(doubles)
            xs = np.ascontiguousarray(x)
            res = np.zeros(xs.shape[0])
            xs_p, res_p = xs.ctypes.data_as(doubles), res.ctypes.data_as(doubles)
            compile_s.append(statistics.median(times))
            row_us.append(per_call_us(lambda e=entry, a=one_p, b=cell_p: e(a, b, 0, 1),
                                      args.repeats, args.block_s))
            batch_ms.append(per_batch_ms(
                lambda e=entry, a=xs_p, b=res_p, n=xs.shape[0]: e(a, b, 0, n), args.repeats))
            outputs.append(res.copy())
        out[key] = {"trees": trees, "compile_s": compile_s, "row_us": row_us,
                    "batch_ms": batch_ms,
                    "same_bits": bool(np.array_equal(outputs[0], outputs[1]))}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--block-s", type=float, default=0.2)
    parser.add_argument("--compile-repeats", type=int, default=1,
                        help="compilations per model text and option (median)")
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
    predictor = Predictor.load(registry, quantiles=True)
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
        "Predictor.predict_labels (model, p50, p90)": per_call_us(
            lambda: predictor.predict_labels(task), args.repeats, args.block_s
        ),
    }
    compiled = compile_options(registry / card.version, card.files, x, row, args)
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
        "compile_options": compiled,
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
    print()
    print(
        markdown_table(
            ["model text", "trees", "compile s (inlined / not)", "µs per row (inlined / not)",
             f"ms per {args.batch:,} rows (inlined / not)", "same bits"],
            [[k, str(v["trees"]), f"{v['compile_s'][0]:.2f} / {v['compile_s'][1]:.2f}",
              f"{v['row_us'][0]:.2f} / {v['row_us'][1]:.2f}",
              f"{v['batch_ms'][0]:.2f} / {v['batch_ms'][1]:.2f}", str(v["same_bits"])]
             for k, v in compiled.items()],
        )
    )
    print(f"\nwritten: {shown(path)}; machine load average {info['load_avg_1m']:.2f}")


if __name__ == "__main__":
    main()
