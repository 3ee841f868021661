"""Learning a policy's weights offline by trace-driven simulation (research question 2).

Any registered policy whose parameters are learnable (``desched.policies.learnable``) can be
tuned: its ``Params`` declare the keys and the search space, and nothing here names a
policy. The objective ``J`` against a reference scorer, the cells and the split are
``desched.bench.learning``'s.

**Learners.** ``optuna``: TPE (seeded) over the search space, whose first trials are the
space's start points and the policy's defaults, so the search can only report something at
least as good as the defaults on the training traces. ``rl``: the REINFORCE agent of
``desched.bench.rl``, which sets the parameters once per window of simulated time; its
loadable static weights are the grid setting it used most.

A run (``tune``) splits the traces, learns, judges the result on held-out traces never
trained on (``judge``) and writes a weights folder: ``card.json`` (``WeightsCard``),
``card.md``, ``learning-curve.png`` and, for the agent, ``agent.pt``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from desched.bench.evaluate import mean_ci
from desched.bench.learning import (
    DEFAULT_REFERENCE,
    Cell,
    Learner,
    LearnerResult,
    Mapper,
    Objective,
    RunScore,
    build_cells,
    check_disjoint,
    default_seeds,
    mean_objective,
    reference_label,
    reference_of,
    run_on,
    serial_map,
)
from desched.bench.rl import Controller, agent_controller, run_controlled, tune_rl
from desched.bench.specs import TraceSpec
from desched.bench.weights import (
    CurvePoint,
    Heldout,
    HeldoutVerdict,
    ObjectiveText,
    Split,
    WeightsCard,
    write_card,
)
from desched.errors import DeschedError
from desched.policies import get_policy, learnable_params
from desched.records import Record
from desched.settings import DeschedSettings
from desched.tables import table_lines


def tune_optuna(
    train: Sequence[Cell],
    policy: str,
    workers: int,
    trials: int,
    objective: Objective,
    seed: int = 0,
    mapper: Mapper = serial_map,
    progress: Callable[[int], None] | None = None,
) -> LearnerResult:
    """TPE search over the policy's search space, starting from its start points and then
    its defaults (for ``ifs-counter``: 0.1 / 0.9 with no service term, then its defaults).

    Cost: ``trials * len(train)`` simulations; the trials run one after the other (each
    depends on the ones before), a trial's cells through ``mapper``. The curve has one
    point per trial, with the parameters it tried. ``progress`` hears the count of trials
    done after each.
    """
    import optuna

    params_cls = learnable_params(policy)
    space = params_cls.search
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    t0 = time.perf_counter()
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(8, max(1, trials // 3)))
    study = optuna.create_study(direction="minimize", sampler=sampler)
    for point in space.start_points(params_cls.learnable_defaults()):
        study.enqueue_trial(point)
    curve: list[CurvePoint] = []

    def trial_objective(trial: Any) -> float:
        x = {d.name: trial.suggest_float(d.name, d.low, d.high, log=d.log)
             for d in space.dimensions}
        params = space.params(x)
        value = mean_objective(
            mapper(run_on, [(c, policy, params, workers, objective) for c in train]))
        best = min([value, *(p.value for p in curve)])
        curve.append(CurvePoint(step=trial.number, value=value, best=best, **params))
        if progress is not None:
            progress(len(curve))
        return value

    study.optimize(trial_objective, n_trials=trials)
    best = space.params(study.best_params)
    return LearnerResult("optuna", policy, best, curve, float(study.best_value),
                         time.perf_counter() - t0)


Candidate = tuple[str, dict[str, Any], Controller | None]
"""(policy, params, controller or None): what is judged on the held-out cells."""


@dataclass(frozen=True, slots=True)
class Judged:
    """One candidate on one held-out cell, and its paired differences from the reference."""

    candidate: str
    score: RunScore
    ref_bsld: float
    ref_jain: float
    ref_max_lag_s: float

    @property
    def d_bsld(self) -> float:
        return self.score.mean_bounded_slowdown - self.ref_bsld

    @property
    def d_bsld_pct(self) -> float:
        return 100.0 * self.d_bsld / self.ref_bsld

    @property
    def d_jain(self) -> float:
        return self.score.jain_slowdown - self.ref_jain

    @property
    def d_max_lag_s(self) -> float:
        return self.score.max_service_lag_s - self.ref_max_lag_s


@dataclass(frozen=True, slots=True)
class Judgement:
    """Every candidate on every held-out cell (``cells``) and the verdicts (``heldout``)."""

    cells: list[Judged]
    heldout: Heldout


def verdict_of(rows: Sequence[Judged]) -> HeldoutVerdict:
    """``J`` and the paired differences over ``rows`` as intervals, and the verdict:
    ``beats`` when the interval of ``J - 1`` lies below 0, ``worse`` when above, else
    ``tie``."""
    j = mean_ci(r.score.J - 1.0 for r in rows)
    verdict: Literal["beats", "tie", "worse"] = "tie"
    if j.n >= 2 and j.hi < 0:
        verdict = "beats"
    elif j.n >= 2 and j.lo > 0:
        verdict = "worse"
    return HeldoutVerdict(
        seeds=sorted(r.score.seed for r in rows),
        J=mean_ci(r.score.J for r in rows),
        J_minus_1=j,
        ref_bsld=mean_ci(r.ref_bsld for r in rows),
        bsld=mean_ci(r.score.mean_bounded_slowdown for r in rows),
        d_bsld=mean_ci(r.d_bsld for r in rows),
        d_bsld_pct=mean_ci(r.d_bsld_pct for r in rows),
        ref_jain=mean_ci(r.ref_jain for r in rows),
        d_jain=mean_ci(r.d_jain for r in rows),
        d_max_lag_s=mean_ci(r.d_max_lag_s for r in rows),
        verdict=verdict,
    )


def judge(
    heldout: Sequence[Cell],
    candidates: dict[str, Candidate],
    workers: int,
    objective: Objective,
    windows: int = 20,
    mapper: Mapper = serial_map,
) -> Judgement:
    """Every candidate on every held-out cell, against the reference scorer on the same
    cell: per trace spec and candidate, and over all held-out cells (``verdict_of``). The
    runs go through ``mapper``."""
    pairs = [(c, label) for c in heldout for label in candidates]
    scores = mapper(judge_one, [(c, *candidates[label], workers, objective, windows)
                                for c, label in pairs])
    records = [Judged(label, score, c.reference.mean_bounded_slowdown,
                      c.reference.jain_slowdown, c.reference.max_service_lag_s)
               for (c, label), score in zip(pairs, scores)]
    by_workload = {
        spec: {label: verdict_of([r for r in records
                                  if r.score.trace == spec and r.candidate == label])
               for label in candidates}
        for spec in dict.fromkeys(c.spec for c in heldout)
    }
    overall = {label: verdict_of([r for r in records if r.candidate == label])
               for label in candidates}
    return Judgement(records, Heldout(by_workload=by_workload, overall=overall))


def judge_one(cell: Cell, policy: str, params: dict[str, Any], controller: Controller | None,
              workers: int, objective: Objective, windows: int) -> RunScore:
    """One candidate on one held-out cell."""
    if controller is None:
        return run_on(cell, policy, params, workers, objective)
    return run_controlled(cell, policy, controller, workers, objective, windows)[0]


class TuneSettings(DeschedSettings):
    """One tuning run: what to learn, on which traces, judged on which. Each field also
    reads ``DESCHED_TUNE_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="DESCHED_TUNE_", extra="forbid", frozen=True)

    train: list[str] = Field(description="training trace specs (desched.bench.specs)")
    heldout: list[str] | None = Field(
        None, description="held-out trace specs; default: the training specs on other seeds")
    train_seeds: list[int] | None = Field(
        None, description="training seeds or slices; default: default_seeds")
    heldout_seeds: list[int] | None = Field(
        None, description="held-out seeds or slices; default: default_seeds")
    workers: int = Field(8, ge=1, description="workers simulated")
    policy: str = Field(DEFAULT_REFERENCE,
                        description="the registered policy whose learnable weights to learn")
    learner: Learner = Field("optuna", description="optuna (TPE search) or rl (policy gradient)")
    trials: int = Field(40, ge=1, description="optuna trials, or rl iterations")
    seed: int = Field(0, ge=0, description="seed of the learner")
    windows: int = Field(20, ge=1, description="rl: decision windows per trace")
    objective: Objective = Field(default_factory=lambda: Objective(fairness_weight=5.0),
                                 description="the objective J and its fairness weight")
    reference: str = Field(DEFAULT_REFERENCE,
                           description="the scorer J is measured against, at its defaults")

    @field_validator("policy")
    @classmethod
    def _learnable(cls, name: str) -> str:
        try:
            learnable_params(name)
        except DeschedError as exc:
            raise ValueError(str(exc)) from None
        return name

    @field_validator("reference")
    @classmethod
    def _registered(cls, name: str) -> str:
        try:
            get_policy(name)
        except DeschedError as exc:
            raise ValueError(str(exc)) from None
        return name

    def pairs(self, role: Literal["train", "heldout"]) -> list[tuple[str, int]]:
        specs = self.train if role == "train" else (self.heldout or self.train)
        given = self.train_seeds if role == "train" else self.heldout_seeds
        return [(s, seed) for s in specs
                for seed in (TraceSpec.parse(s).seeds or given or default_seeds(s, role))]


def split(settings: TuneSettings, mapper: Mapper = serial_map) -> tuple[list[Cell], list[Cell]]:
    """The training and held-out cells, checked disjoint."""
    train = build_cells(settings.pairs("train"), settings.workers, settings.reference, mapper)
    heldout = build_cells(settings.pairs("heldout"), settings.workers, settings.reference,
                          mapper)
    check_disjoint(train, heldout)
    return train, heldout


def learn(settings: TuneSettings, train: Sequence[Cell],
          mapper: Mapper = serial_map,
          progress: Callable[[int], None] | None = None) -> LearnerResult:
    """Run the settings' learner on the training cells (optuna's simulations through
    ``mapper``; the RL learner updates its agent after every run, so runs here);
    ``progress`` hears the count of trials or iterations done."""
    if settings.learner == "optuna":
        return tune_optuna(train, settings.policy, settings.workers, settings.trials,
                           settings.objective, settings.seed, mapper, progress)
    return tune_rl(train, settings.policy, settings.workers, settings.trials,
                   settings.objective, settings.seed, settings.windows, progress=progress)


def candidates_of(learned: LearnerResult, reference: str) -> dict[str, Candidate]:
    """What the held-out judgement compares with the reference: the learned static weights,
    the policy's own defaults where it is not the reference, and, for the RL learner, the
    adaptive agent itself."""
    out: dict[str, Candidate] = {"learned": (learned.policy, dict(learned.weights), None)}
    if learned.policy != reference:
        out[f"{learned.policy} defaults"] = (learned.policy, {}, None)
    if learned.agent is not None:
        out["rl-adaptive"] = (learned.policy, {}, agent_controller(learned.agent, greedy=True))
    return out


def make_card(
    name: str,
    settings: TuneSettings,
    learned: LearnerResult,
    train: Sequence[Cell],
    heldout: Sequence[Cell],
    judgement: Judgement,
    command: str | None = None,
) -> WeightsCard:
    """The weights card (``desched.bench.weights``): weights, provenance, split, verdict."""
    reference = reference_of(settings.reference)
    return WeightsCard(
        name=name,
        policy=learned.policy,
        weights=learned.weights,
        learner=learned.learner,
        objective=ObjectiveText(text=settings.objective.describe(reference),
                                fairness_weight=settings.objective.fairness_weight),
        reference=reference,
        workers=settings.workers,
        settings=settings.model_dump(),
        split=Split(
            rule="scenario seed = regenerated workload; file seed = disjoint time slice; "
                 "no held-out seed/slice/fingerprint is used in training",
            train=[c.describe() for c in train],
            heldout=[c.describe() for c in heldout],
        ),
        train_objective=learned.train_objective,
        learning_curve=learned.curve,
        learner_seconds=learned.seconds,
        learner_details=learned.details,
        heldout=judgement.heldout,
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        command=command,
        agent={"file": "agent.pt", **learned.details} if learned.agent is not None else None,
    )


def verdict_markdown(card: WeightsCard) -> str:
    """The held-out verdict as a person reads it: one table per workload."""
    from desched.bench.evaluate import fmt_ci

    w = ", ".join(f"{k}={v:.4g}" for k, v in card.weights.items())
    ref = reference_label(card.reference)
    ref_weights = "/".join(f"{v:g}" for v in card.reference.weights.values()) or ref
    lines = [
        f"# Weights `{card.name}` ({card.learner}, {card.policy}): {w}",
        "",
        f"Objective: {card.objective.text}.",
        "",
        (f"Trained on {len(card.split.train)} traces, judged on "
         f"{len(card.split.heldout)} held-out traces never trained on; "
         f"{card.workers} workers. Training objective {card.train_objective:.4f}."),
        "",
    ]
    sections = {**card.heldout.by_workload, "all held-out": card.heldout.overall}
    lines += table_lines(
        ["held-out workload", "candidate", "J (today = 1)", f"Δ bsld % vs {ref_weights}",
         "Δ Jain", "Δ max lag s", "verdict"],
        [[workload, label, fmt_ci(s.J), fmt_ci(s.d_bsld_pct), fmt_ci(s.d_jain),
          fmt_ci(s.d_max_lag_s), s.verdict]
         for workload, per in sections.items() for label, s in per.items()],
    )
    lines += ["", ("Mean ± half-width of the 95 % t-interval over held-out seeds; Δ is paired "
                   f"(same trace) against {ref}.")]
    return "\n".join(lines) + "\n"


def save(folder: str | Path, card: WeightsCard, learned: LearnerResult) -> dict[str, Path]:
    """Write ``card.json``, ``card.md``, ``learning-curve.png`` (and ``agent.pt``)."""
    from desched.bench.curves import plot_curve, step_label

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    if learned.agent is not None:
        import torch

        paths["agent"] = out / "agent.pt"
        torch.save(learned.agent.state_dict(), paths["agent"])
    paths["card"] = write_card(out, card)
    paths["markdown"] = out / "card.md"
    paths["markdown"].write_text(verdict_markdown(card))
    today = "/".join(f"{v:g}" for v in card.reference.weights.values())
    paths["curve"] = plot_curve(learned.curve, f"{card.name}: {card.learner} learning curve",
                                step_label(learned.learner), out / "learning-curve.png",
                                reference=f"today's {today}".strip(),
                                shipped=card.train_objective)
    return paths


class TuningRun(Record):
    """What the ``tune-weights`` flow hands back: its folder, the learned weights and their
    training objective, the training and held-out cells, and the held-out verdict per
    workload and candidate."""

    out: str
    weights: dict[str, float]
    train_objective: float
    train: list[dict[str, Any]]
    heldout: list[dict[str, Any]]
    verdict: dict[str, dict[str, str]]

    @classmethod
    def of(cls, out: str, card: WeightsCard) -> TuningRun:
        return cls(out=out, weights=card.weights, train_objective=card.train_objective,
                   train=[c.model_dump() for c in card.split.train],
                   heldout=[c.model_dump() for c in card.split.heldout],
                   verdict={w: {label: s.verdict for label, s in per.items()}
                            for w, per in card.heldout.by_workload.items()})


def tune(settings: TuneSettings, out: str | Path, command: str | None = None,
         progress: Callable[[int], None] | None = None) -> WeightsCard:
    """Split, learn, judge on the held-out traces, save the weights folder; returns the card.
    ``progress`` hears the count of trials (iterations) done."""
    from desched.policies import check_reads

    train, heldout = split(settings)
    for cell in (*train, *heldout):  # a policy the traces cannot feed: before any trial
        check_reads(settings.policy, "predicted_s" in cell.frame.columns)
    learned = learn(settings, train, progress=progress)
    judgement = judge(heldout, candidates_of(learned, settings.reference), settings.workers,
                      settings.objective, settings.windows)
    card = make_card(Path(out).name, settings, learned, train, heldout, judgement, command)
    save(out, card, learned)
    return card
