"""Leave-one-log-out tuning of guarded-sjf with the deployment judge (docs/deploy-policy-research.md).

For each real log, the parameters are chosen on the five other logs only: among the points
of the policy's search grid (``GuardedSjfParams.search.grid()``) that do no harm on the DES
scenarios (steady, flood), the one with the smallest sum, over those logs, of the judge's
distances to the four criteria (``Criterion.distance``: 0 when a criterion holds); the
held-out log is then judged with them. ``--all`` also prints the grid
point chosen on all six logs (the default) and the whole grid.

    PYTHONPATH=. .venv/bin/python scripts/guarded_sjf_lolo.py --all --out data/lolo
    PYTHONPATH=. .venv/bin/desched judge --policies guarded-sjf \
        --tune scripts.guarded_sjf_lolo:grid_tune --out data/judge-lolo
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from desched.bench import judge as jd
from desched.policies import get_policy

POLICY = "guarded-sjf"


def distance(case: jd.Case, params: dict[str, float]) -> float:
    v = jd.verdict_of(case, POLICY, params)
    return sum(c.distance for c in v.criteria.values())


SCENARIOS: list[jd.Case] = []
"""The DES scenario cases: a grid point must do no harm on every one of them."""


def no_harm(params: dict[str, float]) -> bool:
    """Whether ``params`` do no harm on every DES scenario case (prepared, from the judge's
    cache, on first use when called through ``desched judge --tune``)."""
    if not SCENARIOS:
        SCENARIOS[:] = jd.prepare_cases(logs=[])
    return all(jd.verdict_of(c, POLICY, params).all_passed for c in SCENARIOS)


def grid_tune(policy: str, training: Sequence[jd.Case]) -> dict[str, float]:
    """Among the grid points that do no harm on the DES scenarios (all of them if none
    does), the one with the smallest summed distance on the ``training`` logs (ties: grid
    order); no parameters for a policy other than guarded-sjf."""
    if policy != POLICY:
        return {}
    grid = get_policy(policy).Params.search.grid()
    allowed = [p for p in grid if no_harm(p)] or grid
    logs = [c for c in training if c.kind == "log"]
    return min(allowed, key=lambda p: sum(distance(c, p) for c in logs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--all", action="store_true", help="also tune on all six logs")
    parser.add_argument("--out", type=Path, help="folder for judge.json / judge.md / grid.json")
    args = parser.parse_args()
    cases = jd.prepare_cases(progress=print)
    logs = [c for c in cases if c.kind == "log"]
    SCENARIOS[:] = [c for c in cases if c.kind == "scenario"]
    result = jd.run_judge(cases, [POLICY, "sjf-predicted", "hrrn-predicted"],
                          tune=grid_tune, progress=None)
    print(jd.markdown(result))
    if args.out:
        jd.write_judge(result, args.out)
    if args.all:
        grid = get_policy(POLICY).Params.search.grid()
        table = {json.dumps(p): {c.name: {k: cr.value for k, cr in
                                          jd.verdict_of(c, POLICY, p).criteria.items()}
                                 for c in logs} for p in grid}
        best = grid_tune(POLICY, logs)
        print("chosen on all six logs:", best)
        if args.out:
            (args.out / "grid.json").write_text(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
