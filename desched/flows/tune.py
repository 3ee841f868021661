"""Flow ``tune-weights``: learn the scorer's weights offline, judge them on held-out traces.

Trace-driven simulation on training traces (scenario seeds or slices of a log) with the Optuna
or the RL learner of ``desched.bench.tuning`` (through ``desched.tasks.tune``), then a verdict on traces never trained on, saved
as a weights folder that the policy (any with learnable parameters: ``desched policies``)
loads with ``weights=FOLDER``::

    from desched.flows.tune import tune_weights
    tune_weights(train=["flood", "steady", "heavy-tail"], out="models/weights/ifs-optuna",
                 learner="optuna", trials=40)

With ``runner`` (``process``, ``thread``, ``dask``, ``ray``: ``desched.flows.evaluate``'s
``task_runner``; ``address`` names an existing cluster's scheduler) every simulation (the
reference runs, each trial's training cells, the held-out judgement) is one task run on that
runner, through ``desched.tasks.tune.runner_map``; trials still run one after another. The
result is the same as without a runner.
"""

from __future__ import annotations

from prefect import flow

from desched.flows.evaluate import Runner, task_runner
from desched.tasks.tune import (
    Cell,
    Judgement,
    Learner,
    LearnerResult,
    Objective,
    TuneSettings,
    TuningRun,
    judge_heldout,
    learn_weights,
    publish_tuning,
    save_weights,
    split_traces,
    tune_with_runner_map,
)


@flow(name="tune-on-runner")
def tune_on_runner(
    settings: TuneSettings,
) -> tuple[list[Cell], list[Cell], LearnerResult, Judgement]:
    """Split, learn and judge with every simulation a task run on this flow's runner."""
    return tune_with_runner_map(settings)


@flow(name="tune-weights", log_prints=True)
def tune_weights(
    train: list[str],
    out: str,
    heldout: list[str] | None = None,
    train_seeds: list[int] | None = None,
    heldout_seeds: list[int] | None = None,
    workers: int = 8,
    policy: str | None = None,
    learner: Learner = "optuna",
    trials: int = 40,
    seed: int = 0,
    windows: int = 20,
    fairness_weight: float = 5.0,
    reference: str | None = None,
    command: str | None = None,
    runner: Runner | None = None,
    max_parallel: int | None = None,
    address: str | None = None,
) -> TuningRun:
    """Learn weights of ``policy`` on ``train`` (default seeds: ``desched.bench.learning``),
    judge them against ``reference`` on ``heldout`` (default: the training specs on other
    seeds), write ``out``; returns the weights, the training objective and the held-out
    verdict per workload. ``policy`` and ``reference`` default to ``TuneSettings``'s.
    ``runner`` runs the simulations on a task runner (module docstring)."""
    named = {k: v for k, v in (("policy", policy), ("reference", reference)) if v is not None}
    settings = TuneSettings(
        train=train, heldout=heldout, train_seeds=train_seeds, heldout_seeds=heldout_seeds,
        workers=workers, learner=learner, trials=trials, seed=seed, windows=windows,
        objective=Objective(fairness_weight=fairness_weight), **named,
    )
    if runner is None:
        train_cells, heldout_cells = split_traces(settings)
        learned = learn_weights(settings, train_cells)
        verdict = judge_heldout(settings, learned, heldout_cells)
    else:
        on = tune_on_runner.with_options(task_runner=task_runner(runner, max_parallel, address))
        train_cells, heldout_cells, learned, verdict = on(settings)
    card = save_weights(out, settings, learned, train_cells, heldout_cells, verdict, command)
    publish_tuning(card, out)
    overall = card.heldout.overall
    print(f"{out}: {card.weights}; held-out J " + ", ".join(
        f"{label} {s.J.mean:.3f} ({s.verdict})" for label, s in overall.items()))
    return TuningRun.of(out, card)
