"""How large are the labels a judge run makes as it goes, against the true sizes? A diagnostic.

The Fair Sojourn Protocol's virtual system runs at the arrival rate times the labels' mean
(docs/deploy-policy.md, "The Fair Sojourn Protocol on predicted sizes"), so the labels' mean
against the truth's says how crowded it is. The cached test parts hold the labels made from
the training part's history alone; a run makes its own at each arrival, from the tasks that
had finished in that run (``desched.bench.online``). For each development log this runs each
policy named (default ``fsp-predicted`` and ``boost-predicted``) once as the judge does,
reads the labels its run wrote, and prints the ratio of their mean to the true mean, the
median of the per-task ratios, and the same for the p90 where the policy reads it.

It reads ``duration_s`` only to compare, after each run; it chooses nothing, and the
held-back logs are never read. The test parts come from the judge's cache (``--cache``,
``desched judge``'s key), trained there first when missing.

    .venv/bin/python -m scripts.online_label_means [--policies fsp-predicted boost-predicted]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from desched.bench.judge_cases import Case

DEV_LOGS = ("LANL-CM5-1994-4.1-cln", "LLNL-Thunder-2007-1.1-cln", "SDSC-Par-1996-3.1-cln",
            "Sandia-Ross-2001-1.1-cln")


def label_means(case: Case, policy: str) -> dict[str, float]:
    """The ratios for one run of ``policy`` on judge case ``case`` (module docstring)."""
    from desched.bench.verdicts import case_table, run_labels
    from desched.policies import make_policy
    from desched.simulator import simulate

    tasks = case_table(case)
    truth = np.asarray(tasks.duration_s, dtype=np.float64)
    run = make_policy(policy, tasks)
    labels = run_labels(case, run, tasks)
    if labels is None:
        raise SystemExit(f"online_label_means: {policy} makes no labels as it runs")
    simulate(tasks, run, case.workers, labels=labels)
    out: dict[str, float] = {}
    for column, key in (("predicted_s", "point"), ("predicted_p90_s", "p90")):
        if column in run.reads:
            made = np.asarray(getattr(tasks, column), dtype=np.float64)
            out[f"{key}_mean_ratio"] = float(made.mean() / truth.mean())
            out[f"{key}_median_ratio"] = float(np.median(made / truth))
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policies", nargs="+", default=["fsp-predicted", "boost-predicted"])
    parser.add_argument("--traces", type=Path, default=Path("data/samples/traces"))
    parser.add_argument("--cache", type=Path, default=Path("data/judge-cache"))
    args = parser.parse_args(argv)
    import desched.bench.judge as jd

    for name in DEV_LOGS:
        path = args.traces / f"{name}.swf.gz"
        if not path.exists():
            raise SystemExit(f"online_label_means: {path}: no such log")
        case = jd.prepare_log(path, cache_dir=args.cache)
        truth = np.asarray(case.frame["duration_s"].to_numpy(), dtype=np.float64)
        cached = np.asarray(case.frame["predicted_s"].to_numpy(), dtype=np.float64)
        row = [name, f"true mean {truth.mean():.0f} s",
               f"cached labels {cached.mean() / truth.mean():.2f}"]
        for policy in args.policies:
            r = label_means(case, policy)
            row.append(f"{policy}: " + ", ".join(f"{k} {v:.2f}" for k, v in r.items()))
        print(" | ".join(row), flush=True)


if __name__ == "__main__":
    main()
