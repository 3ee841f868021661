"""Flow ``tune-weights``: learn the scorer's weights offline, judge them on held-out traces.

Trace-driven simulation on training traces (scenario seeds or slices of a log) with the Optuna
or the RL learner of ``desched.tuning``, then a verdict on traces never trained on, saved as a
weights folder that ``ifs-memoryless`` / ``ifs-counter`` load with ``weights=FOLDER``::

    from flows.tune import tune_weights
    tune_weights(train=["flood", "steady", "heavy-tail"], out="models/weights/ifs-optuna",
                 learner="optuna", trials=40)
"""

from __future__ import annotations

from typing import Any

from prefect import flow

from desched.tuning import Learner, Objective, TunedPolicy, TuneSettings
from tasks.tune import judge_heldout, learn_weights, publish_tuning, save_weights, split_traces


@flow(name="tune-weights", log_prints=True)
def tune_weights(
    train: list[str],
    out: str,
    heldout: list[str] | None = None,
    train_seeds: list[int] | None = None,
    heldout_seeds: list[int] | None = None,
    workers: int = 8,
    policy: TunedPolicy = "ifs-memoryless",
    learner: Learner = "optuna",
    trials: int = 40,
    seed: int = 0,
    windows: int = 20,
    fairness_weight: float = 5.0,
    command: str | None = None,
) -> dict[str, Any]:
    """Learn weights of ``policy`` on ``train`` (default seeds: ``desched.tuning``), judge them
    on ``heldout`` (default: the training specs on other seeds), write ``out``; returns the
    weights, the training objective and the held-out verdict per workload."""
    settings = TuneSettings(
        train=train, heldout=heldout, train_seeds=train_seeds, heldout_seeds=heldout_seeds,
        workers=workers, policy=policy, learner=learner, trials=trials, seed=seed,
        windows=windows, objective=Objective(fairness_weight=fairness_weight),
    )
    train_cells, heldout_cells = split_traces(settings)
    learned = learn_weights(settings, train_cells)
    verdict = judge_heldout(settings, learned, heldout_cells)
    card = save_weights(out, settings, learned, train_cells, heldout_cells, verdict, command)
    publish_tuning(card, out)
    overall = card["heldout"]["overall"]
    print(f"{out}: {card['weights']}; held-out J " + ", ".join(
        f"{label} {s['J']['mean']:.3f} ({s['verdict']})" for label, s in overall.items()))
    return {
        "out": out,
        "weights": card["weights"],
        "train_objective": card["train_objective"],
        "train": card["split"]["train"],
        "heldout": card["split"]["heldout"],
        "verdict": {w: {label: s["verdict"] for label, s in per.items()}
                    for w, per in card["heldout"]["by_workload"].items()},
    }
