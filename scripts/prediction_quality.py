"""How good must the predictions be for issue 19's target? A yardstick, clairvoyant by
declaration.

docs/deploy-policy.md finds that the family of predictive policies keeps the three promises
with 0.62–1.00 of the oracle's gain on the true sizes and 0–0.44 on the model's predictions.
This script measures the road between the two on the development logs: each prediction
column (``predicted_s``, ``predicted_p50_s``, ``predicted_p90_s``) of a log's test part is
moved a share ``alpha`` of the way to the true duration in log space,

    c' = c^(1 - alpha) * duration_s^alpha,

so that ``alpha = 0`` is the model's predictions and ``alpha = 1`` the judge's clairvoyant
twin (``desched.bench.frontier.clairvoyant_frame``), and the ratio of every prediction to the
truth shrinks to its ``1 - alpha`` power. At each ``alpha`` it reports the predictions'
Spearman rank correlation with the truth and the median predicted/actual on the longest tenth
of the jobs, and, against the log's clairvoyant frontier gain (the judge's ``case_frontier``):

- the *reachable share*: the frontier of the same family run on these blended predictions
  (``frontier_of(..., clairvoyant=False)``: the best point *for this very log*, a diagnostic,
  never a policy's parameters), over the clairvoyant frontier gain;
- the recommended policy (``desched.policies.RECOMMENDED``, ``boost-ledger``; defaults) on
  them: its frontier share and the promises it keeps;
- and, per ``alpha``, the one family point that keeps the promises at a frontier share of at
  least 0.8 on the most development logs (could a single policy meet the target at that
  quality?).

It reads ``duration_s`` to build the blend and says so in every row; the policies read only
the blended prediction columns. It chooses nothing: the held-back logs are never read. The
judge's test parts come from its cache (``data/judge-cache``, the key ``desched judge``
uses), trained there first when missing.

    .venv/bin/python -m scripts.prediction_quality [--alphas 0 0.25 0.5 0.75 1]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl

from desched.bench import holdout
from desched.bench import judge as jd
from desched.bench.frontier import frontier_of
from desched.bench.judge_cases import PREDICTED_COLUMNS, Case, log_name
from desched.bench.verdicts import Thresholds, promise_checks
from desched.policies import RECOMMENDED

ROOT = Path(__file__).resolve().parents[1]


def blend(frame: pl.DataFrame, alpha: float) -> pl.DataFrame:
    """``frame`` with each prediction column moved ``alpha`` of the way to ``duration_s`` in
    log space (module docstring); ``alpha = 1`` gives the true duration exactly."""
    if alpha == 1.0:
        return frame.with_columns([pl.col("duration_s").alias(c) for c in PREDICTED_COLUMNS
                                   if c in frame.columns])
    return frame.with_columns([
        (pl.col(c).pow(1.0 - alpha) * pl.col("duration_s").pow(alpha)).alias(c)
        for c in PREDICTED_COLUMNS if c in frame.columns
    ])


def blended_case(case: Case, alpha: float) -> Case:
    """``case`` on blended predictions, named ``blend<alpha>:NAME``."""
    return Case(name=f"blend{alpha:g}:{case.name}", kind=case.kind, source=case.source,
                frame=blend(case.frame, alpha), workers=case.workers,
                mean_train_duration_s=case.mean_train_duration_s, model=None,
                load=case.load, train_frac=case.train_frac)


def quality(frame: pl.DataFrame) -> tuple[float, float]:
    """Spearman of ``predicted_s`` with the truth; median predicted/actual, longest tenth."""
    from scipy.stats import spearmanr

    y = frame["duration_s"].to_numpy()
    p = frame["predicted_s"].to_numpy()
    longest = y > np.quantile(y, 0.9)
    return float(spearmanr(y, p).statistic), float(np.median(p[longest] / y[longest]))


def rows_of(case: Case, alphas: Sequence[float], th: Thresholds,
            points: dict[float, dict[str, list[float | None]]]) -> list[str]:
    """The table's rows of ``case``; each family point's frontier share where it keeps the
    three promises (else None) goes into ``points[alpha][spec]``."""
    frontier_gain = jd.case_frontier(case, th).gain
    rows = []

    def share(g: float | None) -> str:
        if g is None or not frontier_gain:
            return "-"
        return f"{g / frontier_gain:.2f}"

    for alpha in alphas:
        b = blended_case(case, alpha)
        rho, ratio = quality(b.frame)
        reachable = frontier_of(b, th, clairvoyant=False)
        for p in reachable.points:
            kept_share = (p.gain / frontier_gain if p.kept and p.gain is not None
                          and frontier_gain else None)
            points.setdefault(alpha, {}).setdefault(p.spec, []).append(kept_share)
        verdict = jd.verdict_of(b, RECOMMENDED, thresholds=th, frontier=False)
        gain = verdict.criteria["gain"].value
        kept_n = sum(promise_checks(verdict))
        rows.append(f"| {case.name} | {alpha:g} | {rho:.3f} | {ratio:.2f} | "
                    f"{share(reachable.gain)} ({reachable.best or 'none'}) | "
                    f"{share(gain)} | {kept_n} of 3 |")
    return rows


def best_single(per_spec: dict[str, list[float | None]],
                target: float = 0.8) -> tuple[str, int, float | None] | None:
    """The family point that keeps the promises with a frontier share >= ``target`` on the
    most logs (ties: the larger smallest share over the logs where it keeps them with a
    positive gain): its spec, that count and that smallest share."""
    best: tuple[int, float, str] | None = None
    for spec, shares in per_spec.items():
        good = [x for x in shares if x is not None and x > 0]
        met = sum(1 for x in good if x >= target)
        key = (met, min(good) if good else float("-inf"), spec)
        if best is None or key > best:
            best = key
    if best is None:
        return None
    return best[2], best[0], (best[1] if best[1] != float("-inf") else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--alphas", type=float, nargs="+", default=[0.0, 0.25, 0.5, 0.75, 1.0])
    parser.add_argument("--cache", type=Path, default=ROOT / "data" / "judge-cache")
    args = parser.parse_args()
    if any(not 0.0 <= a <= 1.0 for a in args.alphas):
        raise SystemExit("error: --alphas: each between 0 and 1")
    from desched.models.training import TrainSettings

    started = time.perf_counter()
    th = Thresholds()
    dev = [p for p in jd.default_logs() if not holdout.is_held_back(log_name(p))]
    print("| log | alpha | Spearman | longest tenth: predicted/actual | reachable share "
          f"(best point on these predictions) | {RECOMMENDED} frontier share | promises kept |")
    print("|---|---:|---:|---:|---|---:|---:|")
    points: dict[float, dict[str, list[float | None]]] = {}
    for path in dev:
        case = jd.prepare_log(path, cache_dir=args.cache,
                              settings=TrainSettings(num_threads=1))
        for row in rows_of(case, args.alphas, th, points):
            print(row, flush=True)
    print(f"\n| alpha | one family point for all {len(dev)} logs: logs where it keeps the "
          "promises at share >= 0.8 | its smallest positive share where it keeps them |")
    print("|---:|---|---:|")
    for alpha in args.alphas:
        best = best_single(points.get(alpha, {}))
        if best is None:
            print(f"| {alpha:g} | none | - |")
            continue
        spec, met, low = best
        print(f"| {alpha:g} | {met} of {len(dev)} ({spec}) | "
              f"{'-' if low is None else f'{low:.2f}'} |")
    print(f"\n(clairvoyant by declaration: the blend reads duration_s; "
          f"{time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
