"""Leave-one-log-out tuning for the deployment judge (``desched judge --tune lolo``).

``LoloTuner`` is a ``judge.Tune``: ``tuner(policy_name, training_logs) -> params``. The judge
calls it once per judged log with the *other* logs (``judge.run_judge``), never with a
held-back log (``desched.bench.holdout``; the tuner drops one if it is handed one anyway).
Over the policy's grid (``grid_of``: its ``Params.search`` grid, or nothing to tune), it keeps
the points that do no harm on every DES scenario given (all points if none does), then picks,
on the training logs, the best point by the judge's own recommendation rule
(``desched.bench.rule``): points that clear the gain floor first, then the most logs with
every promise kept, the most promises kept, the highest smallest frontier share, the highest
mean share; ties go to the first point in grid order.

Cost: one simulation per grid point and training log (cached in each case, so the held-out
rounds share them) and one per grid point and scenario, plus each training log's frontier
(``desched.bench.frontier``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from desched.bench.holdout import is_held_back
from desched.bench.judge import Case, Thresholds, verdict_of
from desched.bench.rule import rank_key, standing

__all__ = ["LoloTuner", "grid_of"]


def grid_of(policy: str) -> list[dict[str, float]]:
    """The grid a leave-one-log-out tuner searches for registered ``policy``: its
    ``Params.search.grid()``, or ``[{}]`` (its defaults) when it has none."""
    from desched.policies import get_policy

    search = getattr(get_policy(policy).Params, "search", None)
    grid = search.grid() if search is not None else []
    return grid or [{}]


class LoloTuner:
    """The leave-one-log-out tuner of the module docstring.

    ``scenarios`` are the DES scenario cases of the no-harm filter (never the held-back
    seed's). ``choices`` records every choice: ``(policy, training log names) -> params``.
    """

    __name__ = "lolo"

    def __init__(self, scenarios: Sequence[Case] = (), thresholds: Thresholds | None = None,
                 ) -> None:
        self.scenarios = [c for c in scenarios if c.kind == "scenario"]
        self.thresholds = thresholds or Thresholds()
        self.choices: dict[tuple[str, tuple[str, ...]], dict[str, float]] = {}

    def no_harm(self, policy: str, params: dict[str, float]) -> bool:
        """Whether ``params`` do no harm on every scenario."""
        return all(verdict_of(c, policy, params, self.thresholds).all_passed
                   for c in self.scenarios)

    def score(self, policy: str, params: dict[str, float],
              logs: Sequence[Case]) -> tuple[bool, tuple[int, int, float], float]:
        """A grid point's rank on ``logs`` under the recommendation rule (larger is better)."""
        verdicts = [verdict_of(c, policy, params, self.thresholds) for c in logs]
        s = standing(policy, verdicts, self.thresholds)
        mean = -math.inf if s.mean_share is None else s.mean_share
        return s.eligible, rank_key(s), mean

    def __call__(self, policy: str, training: Sequence[Case]) -> dict[str, float]:
        """The grid point chosen for ``policy`` on the ``training`` logs (module docstring):
        ``{}`` (the defaults) without a training log."""
        logs = [c for c in training if c.kind == "log" and not is_held_back(c.name)]
        grid = grid_of(policy)
        if len(grid) == 1 or not logs:
            return dict(grid[0]) if logs else {}
        allowed = [p for p in grid if self.no_harm(policy, p)] or grid
        best = max(allowed, key=lambda p: self.score(policy, p, logs))  # first of equals
        self.choices[(policy, tuple(c.name for c in logs))] = best
        return dict(best)
