"""Would a "same user, same request" history make the duration model good enough for issue 19?

docs/deploy-policy.md ("What would close the gap") finds the binding constraint in the
predictions: long jobs predicted short. HPC users resubmit the same job (same requested time
and processors), and the run time of the user's last such job is a classic predictor. The
model's history features follow the user and the task type (for these logs the queue), not
the request. This script measures, on the development logs only, what three more features
give the model under the judge's protocol (first 70 % by submit time to train, the rest to
test, the default training settings on one thread):

- ``same_req_last_s``: the duration of the user's last finished job with the same requested
  time and processors (a missing request counts as its own value);
- ``same_req_mean_s``: the mean of the last five such jobs;
- ``same_req_n``: how many such jobs had finished.

Each under the model's leakage rule (``desched.models.features``): only jobs that ended
strictly before the submit count. They enter the model as size features (``FeatureSpec``
takes the size columns it finds). Reported per log, for the model as it is and with the three
features: test MAE, Spearman's rank correlation (what the shortest-first policies live on),
and the median of predicted over actual duration on the longest tenth of the test jobs (the
under-estimated long jobs). It runs no policy and chooses nothing; the held-back logs are
refused.

    .venv/bin/python -m scripts.similar_job_history [--logs NAME ...]
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import polars as pl

from desched.bench.holdout import is_held_back
from desched.bench.judge_cases import default_logs, log_name, predict_frame, split_log
from desched.errors import DeschedError
from desched.models import features
from desched.models.training import TrainSettings, train
from desched.swf import import_swf

SAME_REQUEST: tuple[str, ...] = ("same_req_last_s", "same_req_mean_s", "same_req_n")
WINDOW = 5


def with_same_request(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` (row order kept) plus ``SAME_REQUEST``, NaN where no such job had finished:
    one sort by end time and one backward as-of join on ``(tenant, req_time_s, req_procs)``,
    as ``features.with_history`` does per tenant."""
    key = ["tenant", "_rt", "_rp"]
    base = frame.select(
        "tenant", "submit_s", "duration_s",
        pl.col("req_time_s").cast(pl.Float64).fill_null(-1.0).alias("_rt"),
        pl.col("req_procs").cast(pl.Float64).fill_null(-1.0).alias("_rp"),
        features.end_times(frame).alias("_end_s"),
    ).with_row_index("_row")
    done = (
        base.select(*key, "_end_s", "duration_s")
        .sort("_end_s", maintain_order=True)
        .with_columns(
            pl.col("duration_s").alias("same_req_last_s"),
            pl.col("duration_s").rolling_mean(WINDOW, min_samples=1).over(key)
            .alias("same_req_mean_s"),
            (pl.int_range(pl.len()).over(key) + 1).cast(pl.Float64).alias("same_req_n"),
        )
        # several completions at one instant: the last one's statistics include all of them
        .unique([*key, "_end_s"], keep="last", maintain_order=True)
        .drop("duration_s")
    )
    joined = (
        base.select("_row", *key, "submit_s").sort("submit_s")
        .join_asof(done, left_on="submit_s", right_on="_end_s", by=key, strategy="backward",
                   allow_exact_matches=False, check_sortedness=False)
        .sort("_row")
    )
    return frame.with_columns(joined[c].fill_null(float("nan")) for c in SAME_REQUEST)


@contextmanager
def size_features(extra: Sequence[str]) -> Iterator[None]:
    """The model's size columns plus ``extra`` while the block runs."""
    before = features.SIZE_CANDIDATES
    features.SIZE_CANDIDATES = (*before, *extra)
    try:
        yield
    finally:
        features.SIZE_CANDIDATES = before


def scores(frame: pl.DataFrame, cut: int, settings: TrainSettings) -> dict[str, float]:
    """Train on ``frame[:cut]``, predict ``frame[cut:]`` as the judge does (``predict_frame``:
    history from the whole frame): MAE, Spearman, the longest tenth's median
    predicted/actual."""
    from scipy.stats import spearmanr

    result = train(frame[:cut], settings, source="similar-job history")
    y = frame["duration_s"].to_numpy()[cut:]
    pred = predict_frame(result, frame, from_row=cut)["predicted_s"].to_numpy()
    longest = y > np.quantile(y, 0.9)
    return {
        "mae_s": float(np.mean(np.abs(pred - y))),
        "spearman": float(spearmanr(y, pred).statistic),
        "long_ratio": float(np.median(pred[longest] / y[longest])),
    }


def main() -> None:
    bundled = {log_name(p): p for p in default_logs()}
    dev = [name for name in bundled if not is_held_back(name)]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--logs", nargs="+", default=dev,
                        help="bundled development logs, by name (default: all)")
    parser.add_argument("--train-frac", type=float, default=0.7)
    args = parser.parse_args()
    held = sorted(n for n in args.logs if is_held_back(n))
    if held:
        raise SystemExit(f"error: {', '.join(held)}: held back for the final verdict "
                         "(desched.bench.holdout)")
    missing = sorted(set(args.logs) - set(bundled))
    if missing:
        raise SystemExit(f"error: {', '.join(missing)}: no such bundled log "
                         f"(known: {', '.join(bundled)})")
    settings = TrainSettings(num_threads=1)
    print("| log | model | test MAE s | Spearman | longest tenth: median predicted/actual |")
    print("|---|---|---:|---:|---:|")
    for name in args.logs:
        full, _ = import_swf(bundled[name])
        full = full.sort("submit_s", maintain_order=True)
        train_part, _ = split_log(full, args.train_frac)
        cut = train_part.height
        try:
            now = scores(full, cut, settings)
            with size_features(SAME_REQUEST):
                more = scores(with_same_request(full), cut, settings)
        except DeschedError as exc:
            raise SystemExit(f"error: {name}: {exc}") from None
        for label, s in (("as it is", now), ("+ same request", more)):
            print(f"| {name} | {label} | {s['mae_s']:,.0f} | {s['spearman']:.3f} | "
                  f"{s['long_ratio']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
