"""The constrained clairvoyant frontier: how much of the oracle's gain is reachable at all while
keeping the three promises (issue 19).

The three promises on a real log, against today's scorer (``ifs-memoryless``, defaults):

- **tail**: p99 response ≤ ``p99_ratio_max`` (1.05) × today's;
- **fairness**: Jain's index over per-tenant mean bounded slowdown ≥ today's
  + ``delta_jain_min`` (−0.02);
- **no tenant harmed**: every tenant with ≥ ``min_tenant_tasks`` (10) tasks keeps its mean
  bounded slowdown ≤ ``worst_tenant_max`` (2) × its value under today's.

(``desched.bench.judge.Thresholds`` holds the bounds; exact p99 ≤ 1.0× forces zero gain, since
first-come-first-served minimises the largest response.)

**The family.** Every registered policy that ranks on ``predicted_s`` (``roles.predictive``),
each *fed the true durations*: the bench replaces ``predicted_s`` and its quantile columns by
``duration_s`` (``clairvoyant_frame``) and names the run ``clairvoyant:SPEC``, so a
clairvoyant point declares itself in every table; the policies' own code is unchanged and
reads only ``predicted_s``. A policy runs at each point of the grid its parameters declare
(``Params.frontier_grid``), or at its defaults where it declares none (``duration_scaled``
parameters scaled to the log as the judge does). ``guarded-sjf``'s grid, ``beta = 1`` and ``a`` from 0 to 5,000 mean tasks, runs
from nearly first-come-first-served (``a = 0``: a task is due at its first-come turn on the
work clock) to nearly shortest-first (``a = 5,000``); ``sjf-predicted`` fed the truth is
shortest-first itself; ``boost-predicted`` runs with its boosts scaled by 0.25 to 64 (towards
first-come below 1, towards shortest-first above) and once with a sympathy guard of 10 mean
sizes; ``fair-boost`` with scales 1, 4 and 16. A policy registered later joins the family by
itself (at its defaults, or at the grid it declares).

**The frontier gain** of a log is the largest ``gain = (mean_resp_today − mean_resp_x) /
(mean_resp_today − mean_resp_oracle)`` over the family's points that keep the three
promises, and 0 when none keeps them with a positive gain (today itself keeps them with gain
0). It is undefined (``None``) when the oracle does not beat today. A deployable policy's
**frontier share** is its gain over the frontier gain (``None`` when the frontier gain is not
positive).

Cost: one simulation per family point and log (about 20 per log), cached in the clairvoyant
twin of the case (``clairvoyant_case``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl

from desched.bench.judge_cases import PREDICTED_COLUMNS, Case
from desched.bench.verdicts import (
    ORACLE,
    SHARE_EPS,
    TODAY,
    Outcome,
    Thresholds,
    evaluate,
    frontier_share,
    log_criteria,
)
from desched.records import Record

__all__ = [
    "CLAIRVOYANT_PREFIX", "Frontier", "FrontierPoint", "clairvoyant_case",
    "clairvoyant_frame", "family", "frontier_from", "frontier_of", "frontier_share",
]

CLAIRVOYANT_PREFIX = "clairvoyant:"
"""How a family point names itself: ``clairvoyant:guarded-sjf?beta=1&a=5``."""


class FrontierPoint(Record):
    """One clairvoyant family point on one log: its gain and the three promises."""

    spec: str
    clairvoyant: bool = True
    gain: float | None
    p99_ratio: float
    delta_jain: float
    worst_tenant: float
    kept: bool


class Frontier(Record):
    """The frontier of one log: its gain (``None`` when the oracle does not beat today), the
    point reaching it (``None`` when no point keeps the promises with a positive gain) and
    every point of the family."""

    workload: str
    gain: float | None
    best: str | None
    today_mean_response_s: float
    oracle_mean_response_s: float
    points: list[FrontierPoint]


def clairvoyant_frame(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with ``predicted_s`` and its quantile columns replaced by ``duration_s``."""
    return frame.with_columns([pl.col("duration_s").alias(c) for c in PREDICTED_COLUMNS])


def clairvoyant_case(case: Case) -> Case:
    """The clairvoyant twin of ``case``: the same workload, its predictions the true
    durations, its name ``clairvoyant:NAME``; made once and kept on ``case``."""
    key = f"{CLAIRVOYANT_PREFIX}twin"
    twin = case.outcomes.get(key)
    if twin is None:
        twin = Case(name=f"{CLAIRVOYANT_PREFIX}{case.name}", kind=case.kind,
                    source=case.source, frame=clairvoyant_frame(case.frame),
                    workers=case.workers, mean_train_duration_s=case.mean_train_duration_s,
                    model=None, load=case.load, train_frac=case.train_frac)
        case.outcomes[key] = twin
    return twin


def family(grids: Mapping[str, Sequence[Mapping[str, float]]] | None = None) -> list[str]:
    """The family's policy specs (without the prefix), registry order, each grid in order:
    every predictive policy at each point of its ``Params.frontier_grid`` (its defaults when
    empty), or of ``grids[name]`` when given."""
    from desched.bench.roles import predictive_policies
    from desched.bench.specs import policy_spec
    from desched.policies import get_policy

    specs: list[str] = []
    for name in predictive_policies():
        declared = get_policy(name).Params.frontier_grid
        points = (grids.get(name) if grids is not None else None) or declared or ({},)
        specs += [policy_spec(name, dict(p)) for p in points]
    return specs


def frontier_from(workload: str, today: Outcome, oracle: Outcome,
                  points: Sequence[tuple[str, Outcome]], th: Thresholds) -> Frontier:
    """The frontier of one log from outcomes already simulated (pure: no simulation)."""
    rows: list[FrontierPoint] = []
    best: tuple[float, str] | None = None
    defined = log_criteria(today, today, oracle, th)[0]["gain"].value is not None
    for spec, out in points:
        c, _, _ = log_criteria(out, today, oracle, th)
        gain = c["gain"].value
        kept = c["p99"].passed and c["delta_jain"].passed and c["worst_tenant"].passed
        rows.append(FrontierPoint(spec=spec, gain=gain, p99_ratio=float(c["p99"].value or 0.0),
                                  delta_jain=float(c["delta_jain"].value or 0.0),
                                  worst_tenant=float(c["worst_tenant"].value or 0.0),
                                  kept=kept))
        if kept and gain is not None and gain > SHARE_EPS and (best is None or gain > best[0]):
            best = (gain, spec)
    return Frontier(workload=workload, gain=(best[0] if best else 0.0) if defined else None,
                    best=best[1] if best else None,
                    today_mean_response_s=today.mean_response_s,
                    oracle_mean_response_s=oracle.mean_response_s, points=rows)


def frontier_of(case: Case, th: Thresholds | None = None,
                specs: Sequence[str] | None = None, *, clairvoyant: bool = True) -> Frontier:
    """The frontier of log ``case`` over ``specs`` (default: ``family()``), each fed the true
    durations; simulations cached in the clairvoyant twin.

    ``clairvoyant=False`` runs the same family on the case's own predictions instead: the
    *deployable* frontier, a diagnostic (how much of the frontier prediction error costs the
    family at its best parameters for this very log), never a policy's parameters."""
    th = th or Thresholds()
    target = clairvoyant_case(case) if clairvoyant else case
    prefix = CLAIRVOYANT_PREFIX if clairvoyant else ""
    today, oracle = evaluate(case, TODAY), evaluate(case, ORACLE)
    points: list[tuple[str, Outcome]] = []
    for spec in (family() if specs is None else specs):
        out = evaluate(target, spec)
        points.append((prefix + out.policy, out))
    frontier = frontier_from(case.name, today, oracle, points, th)
    if not clairvoyant:
        frontier = frontier.model_copy(update={"points": [
            p.model_copy(update={"clairvoyant": False}) for p in frontier.points]})
    return frontier
