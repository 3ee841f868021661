"""Prefect tasks of weight tuning: thin wrappers around ``desched.bench.tuning``.

Cells (trace frames) and learner results (a torch agent) travel in memory between tasks of
one flow run, so these tasks skip input hashing and caching.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from prefect import task
from prefect.artifacts import (
    create_link_artifact,
    create_markdown_artifact,
    create_table_artifact,
)
from prefect.cache_policies import NONE

from desched.bench import tuning
from desched.bench.learning import Cell, Learner, LearnerResult, Mapper, Objective, serial_map
from desched.bench.tuning import Judgement, TuneSettings, TuningRun
from desched.bench.weights import WeightsCard

__all__ = [  # the tasks, and what the tune flows read of desched.bench through this module
    "Cell", "Judgement", "Learner", "LearnerResult", "Objective", "TuneSettings", "TuningRun", "WeightsCard",
    "judge_heldout", "learn_judge_save", "learn_weights", "publish_tuning", "runner_map",
    "save_weights",
    "split_traces", "tune_with_runner_map",
]


@task(name="simulate", cache_policy=NONE)
def call(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """``fn(*args)``: one simulation of a tuning run, as a task run on the flow's runner."""
    return fn(*args)


def runner_map(fn: Callable[..., Any], args: Sequence[tuple[Any, ...]]) -> list[Any]:
    """The ``desched.bench.learning.Mapper`` over the calling flow's task runner: one task
    run per call, submitted at once, results in order."""
    futures = [call.submit(fn, a) for a in args]
    return [f.result() for f in futures]


def tune_with_runner_map(
    settings: TuneSettings,
) -> tuple[list[Cell], list[Cell], LearnerResult, Judgement]:
    """Split, learn and judge with every simulation one task run on the calling flow's task
    runner (``runner_map``); called from a flow, not a task, so the runs land on its runner."""
    train, heldout = tuning.split(settings, runner_map)
    learned = tuning.learn(settings, train, runner_map)
    verdict = tuning.judge(heldout, tuning.candidates_of(learned, settings.reference),
                           settings.workers, settings.objective, settings.windows, runner_map)
    return train, heldout, learned, verdict


@task(cache_policy=NONE)
def split_traces(settings: TuneSettings,
                 mapper: Mapper | None = None) -> tuple[list[Cell], list[Cell]]:
    """Training and held-out cells, refused unless disjoint; the reference runs through
    ``mapper`` (default: here)."""
    return tuning.split(settings, mapper or serial_map)


@task(cache_policy=NONE)
def learn_weights(settings: TuneSettings, train: list[Cell],
                  mapper: Mapper | None = None) -> LearnerResult:
    """The learner on the training cells; Optuna's runs through ``mapper`` (default: here)."""
    return tuning.learn(settings, train, mapper or serial_map)


@task(cache_policy=NONE)
def judge_heldout(settings: TuneSettings, learned: LearnerResult,
                  heldout: list[Cell], mapper: Mapper | None = None) -> Judgement:
    """The learned weights (and agent) against the reference on traces never trained on;
    the runs through ``mapper`` (default: here)."""
    return tuning.judge(heldout, tuning.candidates_of(learned, settings.reference),
                        settings.workers, settings.objective, settings.windows,
                        mapper or serial_map)


@task(retries=2, retry_delay_seconds=2, cache_policy=NONE)
def save_weights(
    out: str, settings: TuneSettings, learned: LearnerResult, train: list[Cell],
    heldout: list[Cell], verdict: Judgement, command: str | None,
) -> WeightsCard:
    """Write the weights folder (card.json, card.md, learning-curve.png, agent.pt)."""
    card = tuning.make_card(Path(out).name, settings, learned, train, heldout, verdict, command)
    tuning.save(out, card, learned)
    return card


def learn_judge_save(settings: TuneSettings, train: list[Cell], heldout: list[Cell], out: str,
                     command: str | None) -> WeightsCard:
    """``learn_weights``, ``judge_heldout`` and ``save_weights`` in turn, in one process and
    without task runs, for a learner whose agent lives in the process that trained it (RL,
    serial by design): the demo runs it beside its other steps (``Pool.submit``) and
    publishes the card it returns."""
    learned = learn_weights.fn(settings, train)
    verdict = judge_heldout.fn(settings, learned, heldout)
    card: WeightsCard = save_weights.fn(out, settings, learned, train, heldout, verdict, command)
    return card


@task(cache_policy=NONE)
def publish_tuning(card: WeightsCard, out: str) -> None:
    """The verdict (markdown, with the learning curve embedded) and two tables: the learning
    curve and the held-out results per workload."""
    png = (Path(out) / "learning-curve.png").resolve()
    if png.is_file():
        create_link_artifact(key="tune-weights-learning-curve-png", link=png.as_uri(),
                             link_text=str(png), description=f"Learning curve of {card.name}")
    create_markdown_artifact(markdown=tuning.verdict_markdown(card),
                             key="tune-weights-verdict",
                             description=f"Held-out verdict of {card.name}")
    create_table_artifact(table=[{k: (round(v, 5) if isinstance(v, float) else v)
                                  for k, v in p.model_dump().items()}
                                 for p in card.learning_curve],
                          key="tune-weights-learning-curve",
                          description="Objective J on the training traces per trial/iteration")
    rows = []
    for workload, per in card.heldout.by_workload.items():
        for label, s in per.items():
            rows.append({"workload": workload, "candidate": label, "seeds": len(s.seeds),
                         "J": s.J.mean, "J_lo": s.J.lo, "J_hi": s.J.hi,
                         "d_bsld_pct": s.d_bsld_pct.mean, "d_jain": s.d_jain.mean,
                         "verdict": s.verdict})
    create_table_artifact(table=rows, key="tune-weights-heldout",
                          description="Held-out J (the reference = 1) per workload")
