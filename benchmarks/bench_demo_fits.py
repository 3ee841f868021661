"""The duration model's fits in ``desched demo``: held-out error against fit cost, per option.

The full demo trains eight models: one per Q3 workload (``steady``, ``flood``, ``lanl``,
``atlas``: the warehouse's completion records of today's scorer before the 60 % cut, as
``desched.bench.demo.train_predictor`` does) and one per judge case (the first 70 % of the
LANL and Atlas logs, seed 2 of ``steady`` and ``flood``: ``desched.bench.judge_cases``). Each
option below is a ``TrainSettings``; for each it runs ``desched.models.training.train`` on the
eight training frames, one after the other in this process, and records

- the fit cost: wall and CPU seconds of ``train`` (features, every fit, baselines, metrics),
  and the number of LightGBM fits and trees;
- the held-out error of the chosen model on what the bench then ranks with it: the demo's
  held-out part (after the cut) and the judge's test part: MAE (s) and Spearman's rank
  correlation (what a shortest-predicted-first policy uses).

The Q3 frames come from a full demo run's work folder (``--work``; run ``desched demo``
first); the judge's from the bundled logs directly.

    .venv/bin/python benchmarks/bench_demo_fits.py --work data/demo/<run>/work
    .venv/bin/python benchmarks/bench_demo_fits.py --work ... --options "current, 1 thread;lr 0.1"
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np
import polars as pl

from benchmarks.common import machine, markdown_table, write_json

OPTIONS: dict[str, dict[str, Any]] = {
    "current (2 threads)": {"num_threads": 2},
    "current, 1 thread": {"num_threads": 1},
    "lr 0.1": {"num_threads": 1, "learning_rate": 0.1, "max_rounds": 200,
               "early_stopping_rounds": 15},
    "2 objectives (l2-log, l1-log)": {"num_threads": 1, "objectives": ("l2-log", "l1-log")},
    "lr 0.1, 2 objectives": {"num_threads": 1, "learning_rate": 0.1, "max_rounds": 200,
                             "early_stopping_rounds": 15, "objectives": ("l2-log", "l1-log")},
    "lr 0.1, no quantiles": {"num_threads": 1, "learning_rate": 0.1, "max_rounds": 200,
                             "early_stopping_rounds": 15, "quantiles": ()},
}
"""Option name -> ``TrainSettings`` overrides (the rest: the demo's full-mode defaults)."""


@dataclass
class Case:
    """One of the demo's training frames and the held-out rows its model then predicts."""

    name: str
    train: pl.DataFrame
    heldout: pl.DataFrame
    """Rows with the history features already computed (``with_history``)."""


def q3_cases(work: Path, train_frac: float = 0.6) -> list[Case]:
    """The demo's Q3 training frames, as ``desched.bench.demo.train_predictor`` builds them."""
    from desched.models import training
    from desched.models.features import with_history
    from desched.trace import read_trace

    completions = training.load_warehouse(work / "warehouse.duckdb")
    out = []
    for name in ("steady", "flood", "lanl", "atlas"):
        source = str((work / "logs" / name / "decision-log.parquet").resolve())
        mine = completions.filter(pl.col("source") == source)
        trace = read_trace(work / "traces" / f"{name}.parquet")
        cut_s = float(trace["submit_s"].quantile(train_frac, "lower"))  # type: ignore[arg-type]
        runs = pl.read_parquet(work / "logs" / name / "tasks.parquet")
        history = with_history(runs.sort("submit_s", maintain_order=True))
        out.append(Case(f"q3 {name}", mine.filter(pl.col("submit_s") < cut_s),
                        history.filter(pl.col("submit_s") >= cut_s)))
    return out


def judge_cases() -> list[Case]:
    """The judge's training frames in the demo: LANL and Atlas logs, steady and flood."""
    from desched.bench import judge_cases as jc
    from desched.models.features import with_history
    from desched.samples import traces_dir
    from desched.swf import import_swf
    from desched.workloads import generate

    out = []
    for name, file in (("lanl", "LANL-CM5-1994-4.1-cln.swf.gz"),
                       ("atlas", "LLNL-Atlas-2006-2.1-cln.swf.gz")):
        full, _ = import_swf(traces_dir() / file)
        full = full.sort("submit_s", maintain_order=True)
        train, _ = jc.split_log(full, jc.TRAIN_FRAC)
        out.append(Case(f"judge {name}", train, with_history(full)[train.height:]))
    for name in ("steady", "flood"):
        def draw(seed: int, name: str = name) -> pl.DataFrame:
            return generate(name, tasks=jc.SCENARIO_TASKS, load=jc.SCENARIO_LOAD,
                            workers=jc.SCENARIO_WORKERS, seed=seed)
        out.append(Case(f"judge {name}", draw(jc.SCENARIO_TRAIN_SEED),
                        with_history(draw(jc.SCENARIO_TEST_SEED))))
    return out


def run_option(name: str, overrides: dict[str, Any], cases: list[Case]) -> dict[str, Any]:
    from scipy.stats import spearmanr

    from desched.models.features import feature_matrix
    from desched.models.training import TrainSettings, train

    settings = TrainSettings(**overrides)
    rows: dict[str, Any] = {}
    wall = cpu = 0.0
    fits = trees = 0
    for case in cases:
        t0, c0 = time.perf_counter(), time.process_time()
        result = train(case.train, settings, source=case.name)
        w, c = time.perf_counter() - t0, time.process_time() - c0
        wall += w
        cpu += c
        fits += len(settings.objectives) + len(settings.quantiles)
        trees += int(sum(o["trees"] for o in result.objectives.values()))
        trees += sum(m.booster.num_trees() for m in result.quantile_models.values())
        y = case.heldout["duration_s"].to_numpy()
        pred = result.model.predict_s(feature_matrix(case.heldout, result.spec))
        rows[case.name] = {
            "wall_s": w, "cpu_s": c, "objective": result.objective,
            "heldout_mae_s": float(np.mean(np.abs(pred - y))),
            "heldout_spearman": float(spearmanr(y, pred).statistic),
            "model": result.model.booster.model_to_string(),
        }
        print(f"  {name} / {case.name}: {w:.1f} s wall, {c:.1f} s CPU, "
              f"{result.objective}, MAE {rows[case.name]['heldout_mae_s']:.1f}", flush=True)
    return {"settings": overrides, "wall_s": wall, "cpu_s": cpu, "fits": fits, "trees": trees,
            "cases": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True,
                        help="a full demo run's work folder (data/demo/<run>/work)")
    parser.add_argument("--options", default=";".join(OPTIONS),
                        help="option names separated by ; [all]")
    args = parser.parse_args()
    chosen = [o for o in OPTIONS if o in args.options.split(";")]
    info = machine()
    cases = q3_cases(args.work) + judge_cases()
    results = {}
    for name in chosen:
        print(name, flush=True)
        results[name] = run_option(name, OPTIONS[name], cases)
    ref = results[chosen[0]]
    header = ["option", "fits", "trees", "wall s", "CPU s", "MAE / first option's (median, worst)", "Spearman (mean)", "models equal to first's"]
    table = []
    for name, r in results.items():
        ratios = [r["cases"][c]["heldout_mae_s"] / ref["cases"][c]["heldout_mae_s"]
                  for c in r["cases"]]
        rho = np.mean([v["heldout_spearman"] for v in r["cases"].values()])
        same = sum(r["cases"][c]["model"] == ref["cases"][c]["model"] for c in r["cases"])
        table.append([name, str(r["fits"]), str(r["trees"]), f"{r['wall_s']:.1f}",
                      f"{r['cpu_s']:.1f}", f"{np.median(ratios):.3f}, {max(ratios):.3f}",
                      f"{rho:.3f}", f"{same} of {len(r['cases'])}"])
    for r in results.values():
        for v in r["cases"].values():
            v.pop("model")
    info["load_avg_1m_after"] = machine()["load_avg_1m"]
    write_json("demo_fits.json", {"machine": info, "options": results})
    per_case = [[n, c, v["objective"], f"{v['heldout_mae_s']:.1f}",
                 f"{v['heldout_spearman']:.3f}", f"{v['cpu_s']:.1f}"]
                for n, r in results.items() for c, v in r["cases"].items()]
    print(markdown_table(header, table))
    print()
    print(markdown_table(["option", "case", "objective", "held-out MAE s", "Spearman", "CPU s"],
                         per_case))


if __name__ == "__main__":
    main()
