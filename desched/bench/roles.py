"""Which registered policies play which part in the bench, from what they declare.

The report and the demo group policies only through these functions, which read the
registry and each policy's declarations (``reads``, ``tenant_state``, learnable ``Params``),
never a list of names. A policy registered tomorrow lands in the right groups by itself:
one that reads ``predicted_s`` is among Q3's predicted-duration policies, one that keeps a
per-tenant service counter is in Q1's family, one that reads the true ``duration_s`` is a
clairvoyant bound. Each function returns names in registry order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from desched.policies import REGISTRY, get_policy

PREDICTION = "predicted_s"
TRUE_DURATION = "duration_s"
SERVICE_STATE = "service"


def clairvoyant(name: str) -> bool:
    """Whether policy ``name`` reads the true duration: a bound to compare with, never a
    policy to run."""
    return TRUE_DURATION in get_policy(name).reads


def predictive(name: str) -> bool:
    """Whether policy ``name`` ranks on a prediction (``predicted_s``): Q3's policies."""
    return PREDICTION in get_policy(name).reads


def predictive_policies() -> list[str]:
    """Every registered policy that ranks on ``predicted_s``."""
    return [n for n in REGISTRY if predictive(n)]


def runnable_without_predictions() -> list[str]:
    """Every registered policy a trace without ``predicted_s`` can run."""
    return [n for n in REGISTRY if not predictive(n)]


def q1_family(baseline: str) -> list[str]:
    """Q1's policies: the baseline, then every policy that keeps a per-tenant counter of
    service (``tenant_state``) and needs no prediction."""
    counters = [n for n in REGISTRY if SERVICE_STATE in REGISTRY[n].tenant_state
                and not predictive(n) and n != baseline]
    return [baseline, *counters]


def q3_order(names: Sequence[str], baseline: str) -> list[str]:
    """``names`` (registered policies) in the order the report lists them: the baseline,
    the clairvoyant bounds, the predicted-duration policies, then the rest, each group in
    registry order."""
    rank = {n: i for i, n in enumerate(REGISTRY)}
    chosen = sorted(dict.fromkeys(names), key=lambda n: rank[n])
    groups = ([n for n in chosen if n == baseline],
              [n for n in chosen if n != baseline and clairvoyant(n)],
              [n for n in chosen if n != baseline and predictive(n)],
              [n for n in chosen if n != baseline and not clairvoyant(n) and not predictive(n)])
    return [n for g in groups for n in g]


def duration_scaled_params(mean_duration_s: float) -> dict[str, dict[str, float]]:
    """Per registered policy, its ``duration_scaled`` parameters for a workload whose mean
    task duration is ``mean_duration_s``: ``factor * mean_duration_s``, to 0.1 s."""
    return {n: {k: round(f * mean_duration_s, 1) for k, f in cls.Params.duration_scaled.items()}
            for n, cls in REGISTRY.items() if cls.Params.duration_scaled}


def duration_scale_factors() -> dict[str, Mapping[str, float]]:
    """Per registered policy with any, its ``duration_scaled`` declaration."""
    return {n: dict(cls.Params.duration_scaled) for n, cls in REGISTRY.items()
            if cls.Params.duration_scaled}
