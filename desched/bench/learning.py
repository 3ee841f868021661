"""What every learner of ``desched.bench.tuning`` shares: the objective ``J``, the cells
(traces) it is measured on, and a learner's result.

**Objective** (minimised), per trace, against the reference scorer (by default today's,
``ifs-memoryless`` at its default weights 0.1 / 0.9) simulated on the very same trace::

    J = bsld / bsld_ref + fairness_weight * max(0, jain_ref - jain)

``bsld`` is the mean bounded slowdown (the standard figure of merit of job scheduling: it
weighs a short task's wait by its length without letting tasks of a few seconds dominate);
dividing by the reference's makes every trace count the same whatever its scale, so ``J = 1``
is exactly the reference and ``J = 0.9`` is 10 % less slowdown. ``jain`` is Jain's index over
the per-tenant mean slowdown. The hinge is a fairness *constraint* written as an exact
penalty: learned weights may not buy slowdown by being less fair to tenants than the
reference; above the reference's index fairness earns nothing. With the default weight 5, a
drop of 0.01 in Jain's index costs as much as 5 % more slowdown, more than any gain seen when
tuning, so in practice the constraint binds. The objective of a set of traces is the mean of
``J`` over them.

**Split.** Training cells and held-out cells are (trace spec, seed) pairs of
``desched.bench.specs``: a scenario seed is a regenerated workload, a file seed a disjoint
time slice. ``check_disjoint`` refuses any overlap: no held-out scenario seed is a training
seed of any scenario (``steady`` and ``diurnal`` of one seed share their documents), no
held-out slice of a file overlaps a training slice of it, and no held-out cell has the
content fingerprint of a training cell.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from desched.bench.evaluate import simulate_summary
from desched.bench.specs import TraceSpec, fingerprint
from desched.bench.weights import CellInfo, CurvePoint, Reference
from desched.errors import DeschedError
from desched.policies import get_policy, learnable_params
from desched.policies.base import Policy
from desched.policies.learnable import LearnableParams
from desched.runs import RunSummary
from desched.today import TODAY_SCORER

Learner = Literal["optuna", "rl"]

Mapper = Callable[[Callable[..., Any], Sequence[tuple[Any, ...]]], list[Any]]
"""``mapper(fn, args)`` is ``[fn(*a) for a in args]``, in order, wherever it runs: the
simulations of a tuning run go through one, so that a flow can run them on a Prefect task
runner (a Dask cluster: ``desched.flows.tune``) with the same results as here."""


def serial_map(fn: Callable[..., Any], args: Sequence[tuple[Any, ...]]) -> list[Any]:
    """The ``Mapper`` that runs everything here, in order."""
    return [fn(*a) for a in args]

DEFAULT_REFERENCE = TODAY_SCORER
"""Today's scorer: the reference ``J`` is measured against unless a run names another."""

DEFAULT_TRAIN_SEEDS = (0, 1, 2)
DEFAULT_HELDOUT_SEEDS = (100, 101, 102, 103, 104)


def reference_of(policy: str) -> Reference:
    """The reference scorer ``policy`` at its default learnable weights (none for a policy
    without learnable parameters)."""
    params = get_policy(policy).Params
    weights = params.learnable_defaults() if issubclass(params, LearnableParams) else {}
    return Reference(policy=policy, weights=weights)


def reference_label(reference: Reference) -> str:
    """``ifs-memoryless 0.1/0.9``: the reference policy and its weights."""
    weights = "/".join(f"{v:g}" for v in reference.weights.values())
    return f"{reference.policy} {weights}".strip()


class Objective(BaseModel):
    """``J = bsld / bsld_ref + fairness_weight * max(0, jain_ref - jain)`` (module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    fairness_weight: float = Field(
        5.0, ge=0, allow_inf_nan=False,
        description="penalty per unit of Jain's index below the reference's",
    )

    def of(self, summary: RunSummary, reference: RunSummary) -> float:
        """``J`` of one run (``summary``) against the reference run on the same trace."""
        ratio = summary.mean_bounded_slowdown / reference.mean_bounded_slowdown
        shortfall = max(0.0, reference.jain_slowdown - summary.jain_slowdown)
        return float(ratio + self.fairness_weight * shortfall)

    def describe(self, reference: Reference) -> str:
        return (f"J = mean_bounded_slowdown / that of {reference_label(reference)} on the "
                f"same trace + {self.fairness_weight:g} * max(0, Jain_ref - Jain) (Jain's "
                "index over per-tenant mean slowdown); mean over traces; lower is better, "
                "1 = today's")


@dataclass(slots=True)
class Cell:
    """One trace of a split: its spec and seed, the frame, and the reference run on it."""

    spec: str
    seed: int
    frame: pl.DataFrame
    fingerprint: str
    source: tuple[Any, ...]
    reference: RunSummary

    def describe(self) -> CellInfo:
        return CellInfo(trace=self.spec, seed=self.seed, fingerprint=self.fingerprint,
                        tasks=self.frame.height)


def _source(tspec: TraceSpec, seed: int) -> tuple[Any, ...]:
    """What a cell is drawn from: ``("scenario", seed)`` (every scenario of one seed shares
    its documents) or ``("file", path, first_row, end_row)``."""
    if tspec.scenario is not None:
        return ("scenario", seed)
    return ("file", str(Path(tspec.path or "").resolve()), seed * tspec.slice_tasks,
            (seed + 1) * tspec.slice_tasks)


def default_seeds(spec: str, role: Literal["train", "heldout"]) -> list[int]:
    """Seeds of ``spec`` when none are given: scenarios train on 0..2 and are judged on
    100..104; a file trains on its first 3 slices and is judged on its last 5 (learn from the
    past, judge on the future)."""
    tspec = TraceSpec.parse(spec)
    count = tspec.slices()
    if count is None:
        return list(DEFAULT_TRAIN_SEEDS if role == "train" else DEFAULT_HELDOUT_SEEDS)
    n_train, n_held = len(DEFAULT_TRAIN_SEEDS), len(DEFAULT_HELDOUT_SEEDS)
    if count < n_train + n_held:
        raise DeschedError(
            f"trace {spec!r}: {count} slices of {tspec.slice_tasks} tasks, the default split "
            f"needs {n_train + n_held} ({n_train} to train, {n_held} held out); give smaller "
            f"slices ('{tspec.path}?slice_tasks=N'), or --train-seeds and --heldout-seeds")
    return list(range(n_train)) if role == "train" else list(range(count - n_held, count))


def build_cell(spec: str, seed: int, workers: int, reference: str) -> Cell:
    """Materialise ``(spec, seed)`` and simulate the ``reference`` scorer, at its defaults,
    on it."""
    tspec = TraceSpec.parse(spec)
    frame = tspec.materialize(seed, workers)
    ref = simulate_summary(frame, reference, {}, workers)
    return Cell(spec, seed, frame, fingerprint(frame), _source(tspec, seed), ref)


def build_cells(pairs: Sequence[tuple[str, int]], workers: int,
                reference: str = DEFAULT_REFERENCE, mapper: Mapper = serial_map) -> list[Cell]:
    """``build_cell`` of every (spec, seed) pair, through ``mapper``."""
    for spec, _ in pairs:
        TraceSpec.parse(spec)  # a bad spec is refused here, before anything runs
    return mapper(build_cell, [(spec, seed, workers, reference) for spec, seed in pairs])


def check_disjoint(train: Sequence[Cell], heldout: Sequence[Cell]) -> None:
    """Refuse a held-out cell that shares a source or a fingerprint with a training cell."""
    if not train or not heldout:
        raise DeschedError("tuning needs at least one training and one held-out trace")
    train_prints = {c.fingerprint: c for c in train}
    for h in heldout:
        for t in train:
            same = h.source == t.source if h.source[0] == "scenario" else (
                t.source[0] == "file" and h.source[1] == t.source[1]
                and h.source[2] < t.source[3] and t.source[2] < h.source[3])
            if same:
                raise DeschedError(
                    f"held-out trace {h.spec!r} seed {h.seed} overlaps training trace "
                    f"{t.spec!r} seed {t.seed}: held-out traces must be ones never trained on")
        if h.fingerprint in train_prints:
            t = train_prints[h.fingerprint]
            raise DeschedError(f"held-out trace {h.spec!r} seed {h.seed} is identical to "
                               f"training trace {t.spec!r} seed {t.seed}")


@dataclass(frozen=True, slots=True)
class RunScore:
    """``J`` and the headline metrics of one policy setting on one cell."""

    trace: str
    seed: int
    J: float
    mean_bounded_slowdown: float
    jain_slowdown: float
    max_service_lag_s: float
    window_jain_min: float
    mean_wait_s: float


def run_on(
    cell: Cell,
    policy: str,
    params: dict[str, Any],
    workers: int,
    objective: Objective,
    wrap: Callable[[Policy], Policy] | None = None,
) -> RunScore:
    """``J`` and the headline metrics of ``policy`` with ``params`` on ``cell``."""
    s = simulate_summary(cell.frame, policy, params, workers, wrap=wrap, seed=cell.seed)
    return RunScore(
        trace=cell.spec, seed=cell.seed, J=objective.of(s, cell.reference),
        mean_bounded_slowdown=s.mean_bounded_slowdown, jain_slowdown=s.jain_slowdown,
        max_service_lag_s=s.max_service_lag_s, window_jain_min=s.drift().window_jain_min,
        mean_wait_s=s.mean_wait_s,
    )


def mean_objective(results: Sequence[RunScore]) -> float:
    return float(np.mean([r.J for r in results]))


@dataclass(slots=True)
class LearnerResult:
    """What a learner hands back: loadable static weights (exactly the policy's learnable
    keys), its learning curve, extras.

    ``train_objective`` is the mean ``J`` of ``weights`` on the training cells."""

    learner: Learner
    policy: str
    weights: dict[str, float]
    curve: list[CurvePoint]
    train_objective: float
    seconds: float
    agent: Any = None
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        keys = learnable_params(self.policy).search.keys
        if set(self.weights) != set(keys):
            raise DeschedError(f"learned weights {sorted(self.weights)} are not the learnable "
                               f"keys of {self.policy!r} ({', '.join(keys)})")
