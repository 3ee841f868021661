"""``guarded-sjf-p90`` and ``boost-predicted-p90``, candidates (issue 19, docs/deploy-policy.md,
"What would close the gap"): the two policies ranked on the pessimistic label. Not
registered: run

    .venv/bin/python -m scripts.pessimistic_label --out data/judge-p90

to register both in this process and run ``desched judge --set dev --jobs 1`` on them beside
``guarded-sjf`` and ``boost-predicted`` (its own judge options may follow).

The rule, fixed and committed before its first run on any log:

- *The label.* Each task's ``predicted_s`` is replaced, for ranking, by its
  ``predicted_p90_s`` where that is finite and ``>= predicted_s``, and kept where it is not
  (NaN or infinite p90, or a p90 below the point prediction: a crossed quantile is not
  trusted). ``predicted_p50_s`` and ``predicted_p90_s`` are left as they are.
- *The policies.* ``guarded-sjf`` and ``boost-predicted``, each at its defaults (``beta =
  1, a = 20``; ``scale = 10, window = 256, workers = 0, max_load = 0.98, sympathy = 0``),
  run unchanged on a task table whose ``predicted_s`` column is the label above (the
  mechanics of the judge's clairvoyant twin, ``desched.bench.frontier.clairvoyant_frame``,
  with the p90 column in place of the truth). ``guarded-sjf-p90`` thus runs shortest-p90
  first, its work clock and first-come turns counted in p90 seconds.

Why: a task whose point prediction is short but whose p90 is long (an uncertain one) no
longer ranks as short, so fewer long jobs predicted short overtake and then block.

Expected before any run, from the code: ``boost-predicted`` reads ``predicted_s`` only where
``predicted_p50_s`` is missing or not positive (its label's median is the p50 otherwise) or
where ``predicted_p90_s`` is not finite (where the swap keeps ``predicted_s``). Where the
judge's model fitted both quantile models, every label, boost and estimate is the same, so
``boost-predicted-p90`` decides exactly as ``boost-predicted``: the swap is a no-op for it,
and only ``guarded-sjf-p90`` can differ.

The table is built once, at construction, from the table given (the simulator's, which is
fixed); a live service's table, which grows, would need the label at submit instead. The
judge, run with these policies registered, adds them to the clairvoyant family, where the
true durations replace all three prediction columns, so their clairvoyant points are their
parents' and the frontier is unchanged. State, cost, scores: the parent policy's.
"""

from __future__ import annotations

import math

from desched.policies.base import PolicyParams
from desched.policies.boost_predicted import BoostPredicted, BoostPredictedNaive
from desched.policies.guarded_sjf import GuardedSjf, GuardedSjfNaive, GuardedSjfParams
from desched.trace import TaskTable

GUARDED_READS = frozenset({"predicted_s", "predicted_p90_s"})
BOOST_READS = frozenset({"predicted_s", "predicted_p50_s", "predicted_p90_s"})


def pessimistic(predicted_s: float, predicted_p90_s: float) -> float:
    """The ranking label of one task (module docstring)."""
    if math.isfinite(predicted_p90_s) and predicted_p90_s >= predicted_s:
        return predicted_p90_s
    return predicted_s


def p90_table(tasks: TaskTable) -> TaskTable:
    """``tasks`` (its true durations withheld) with ``predicted_s`` the pessimistic label;
    every other column is ``tasks``' own list."""
    seen = tasks.without_durations()
    return TaskTable(
        task_id=seen.task_id, tenant=seen.tenant, tenant_names=seen.tenant_names,
        submit_s=seen.submit_s, duration_s=seen.duration_s,
        predicted_s=[pessimistic(p, q) for p, q in zip(seen.predicted_s, seen.predicted_p90_s)],
        tenant_index=seen.tenant_index, tenant_weight=seen.tenant_weight,
        predicted_p50_s=seen.predicted_p50_s, predicted_p90_s=seen.predicted_p90_s,
    )


class GuardedSjfP90(GuardedSjf):
    """``guarded-sjf`` on the pessimistic label (module docstring)."""

    name = "guarded-sjf-p90"
    summary = "guarded-sjf ranked on predicted_p90_s where it is finite and >= predicted_s"
    reads = GUARDED_READS

    def __init__(self, tasks: TaskTable, params: GuardedSjfParams | None = None) -> None:
        super().__init__(p90_table(tasks), params)


class BoostPredictedP90(BoostPredicted):
    """``boost-predicted`` on the pessimistic label (module docstring)."""

    name = "boost-predicted-p90"
    summary = "boost-predicted with predicted_s replaced by predicted_p90_s where it is " \
              "finite and >= predicted_s"
    reads = BOOST_READS

    def __init__(self, tasks: TaskTable, params: PolicyParams | None = None) -> None:
        super().__init__(p90_table(tasks), params)


# -- the naive twins: the label written again from the module docstring, on the parents'
# -- naive twins (sharing no code above) ----------------------------------------------------


def naive_swapped(tasks: TaskTable) -> TaskTable:
    """A copy of ``tasks`` whose ``predicted_s`` holds, row by row, the p90 when the p90 is a
    real number not below the prediction, else the prediction."""
    labels = []
    for k in range(len(tasks.task_id)):
        point, high = tasks.predicted_s[k], tasks.predicted_p90_s[k]
        usable = not (math.isnan(high) or math.isinf(high)) and not high < point
        labels.append(high if usable and not math.isnan(point) else point)
    return TaskTable(
        task_id=list(tasks.task_id), tenant=list(tasks.tenant),
        tenant_names=list(tasks.tenant_names), submit_s=list(tasks.submit_s),
        duration_s=tasks.without_durations().duration_s, predicted_s=labels,
        predicted_p50_s=list(tasks.predicted_p50_s),
        predicted_p90_s=list(tasks.predicted_p90_s), tenant_weight=dict(tasks.tenant_weight),
    )


class GuardedSjfP90Naive(GuardedSjfNaive):
    """Reference: ``guarded-sjf``'s naive twin on ``naive_swapped``."""

    name = "guarded-sjf-p90"
    summary = GuardedSjfP90.summary
    reads = GUARDED_READS

    def __init__(self, tasks: TaskTable, params: GuardedSjfParams | None = None) -> None:
        super().__init__(naive_swapped(tasks), params)


class BoostPredictedP90Naive(BoostPredictedNaive):
    """Reference: ``boost-predicted``'s naive twin on ``naive_swapped``."""

    name = "boost-predicted-p90"
    summary = BoostPredictedP90.summary
    reads = BOOST_READS

    def __init__(self, tasks: TaskTable, params: PolicyParams | None = None) -> None:
        super().__init__(naive_swapped(tasks), params)


GuardedSjfP90.naive = GuardedSjfP90Naive
BoostPredictedP90.naive = BoostPredictedP90Naive


def main(argv: list[str]) -> None:
    from desched.cli import cli
    from desched.policies import REGISTRY

    for policy in (GuardedSjfP90, BoostPredictedP90):
        REGISTRY[policy.name] = policy
    cli.main(["judge", "--set", "dev", "--jobs", "1", "--policies",
              "guarded-sjf,guarded-sjf-p90,boost-predicted,boost-predicted-p90", *argv])


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
