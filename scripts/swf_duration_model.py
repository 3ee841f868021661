"""Duration model on the real SWF logs: held-out metrics of the model against the baselines.

For each log in data/samples/traces, imports it (``desched.models.training.load_trace_or_swf``:
``desched.swf.import_swf`` plus the queue waits, so that a job counts as history only once it
has really ended), trains with default settings and prints the markdown tables that go into
docs/duration-model.md. Writes nothing else.

    .venv/bin/python scripts/swf_duration_model.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "data" / "samples" / "traces"
LOGS = ("LANL-CM5-1994-4.1-cln.swf.gz", "LLNL-Atlas-2006-2.1-cln.swf.gz")


def fmt(value: float | None, digits: int) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def main() -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from desched.models.training import load_trace_or_swf, train

    for name in LOGS:
        frame = load_trace_or_swf(TRACES / name)
        result = train(frame, source=name)
        w = result.window
        print(f"### {name}\n")
        print(
            f"{w['rows']:,} jobs, {w['tenants']} users, {w['task_types']} task types; "
            f"held-out slice: the last {w['test']['rows']:,} jobs by submit time. "
            f"Objective chosen on the valid slice: `{result.objective}`; training "
            f"{result.training_time_s:.1f} s.\n"
        )
        print("| predictor | MAE (s) | MdAPE (%) | Spearman |")
        print("|---|---:|---:|---:|")
        m = result.metrics
        print(
            f"| **LightGBM ({result.objective})** | **{fmt(m['mae_s'], 0)}** | "
            f"{fmt(m['mdape_pct'], 1)} | {fmt(m['spearman'], 3)} |"
        )
        for key, b in result.baselines.items():
            print(
                f"| {key} | {fmt(b['mae_s'], 0)} | {fmt(b['mdape_pct'], 1)} | "
                f"{fmt(b['spearman'], 3)} |"
            )
        print("\n| objective | valid MAE (s) | held-out MAE (s) | trees |")
        print("|---|---:|---:|---:|")
        for key, o in result.objectives.items():
            print(
                f"| {key} | {fmt(o['valid_mae_s'], 0)} | {fmt(o['test_mae_s'], 0)} | "
                f"{int(o['trees'])} |"
            )
        q = result.quantile_metrics
        print(
            f"\nQuantile models: p50 covers {q['p50_coverage']:.1%} of held-out jobs, "
            f"p90 covers {q['p90_coverage']:.1%}.\n"
        )


if __name__ == "__main__":
    main()
