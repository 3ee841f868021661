"""Flow ``retrain-duration-model``: train the duration model and offer it to the registry.

Nightly (prefect.yaml) it trains on the warehouse's completion records, one model per
workload (the folder of the log files, ``desched.models.training.workload_of``), each in its
own registry ``<registry>/<workload key>``: a flood scenario and a supercomputer's log do not
share one duration distribution, and one model fitted to their mix predicts neither well. A
workload with fewer than ``min_rows`` completions is skipped and said so; a fresh set-up (no
warehouse yet, or an empty one) completes with "nothing to train". Ad hoc it trains on a
trace or an SWF log into ``registry`` itself::

    from desched.flows.retrain import retrain_duration_model
    retrain_duration_model(trace="data/trace.parquet", registry="models/duration")
"""

from __future__ import annotations

from pathlib import Path
from typing import Self

from prefect import flow, get_run_logger

from desched.errors import DeschedError
from desched.models.cards import DurationCard, Outcome, Scores
from desched.models.training import TrainSettings, workload_keys
from desched.records import Record
from desched.tasks.retrain import (
    load_training_data,
    load_workloads,
    publish_report,
    register_version,
    train_duration_model,
)
from desched.warehouse.schema import DEFAULT_DB

DEFAULT_REGISTRY = "models/duration"
MIN_ROWS = 200
"""Fewest completion records of a workload worth a model (the time-ordered split keeps 70 %
for training; below this the held-out slice is too small to judge a promotion)."""


class DurationSummary(Record):
    """A registered duration-model version as a retrain reports it: its verdict and why, and
    its held-out scores beside the baselines'."""

    version: str
    verdict: Outcome
    reason: str
    objective: str
    metrics: Scores
    baselines: dict[str, Scores]

    @classmethod
    def of(cls, card: DurationCard, **more: str) -> Self:
        """The summary of ``card``; ``more``: a subclass's own fields."""
        return cls(
            **more,
            version=card.version,
            verdict=card.verdict,
            reason=card.reason,
            objective=card.objective,
            metrics=card.metrics,
            baselines=card.baselines,
        )


class TrainedWorkload(DurationSummary):
    """A workload of the warehouse that got a model version, and the log folder it is."""

    folder: str


class SkippedWorkload(Record):
    """A workload of the warehouse left untrained (fewer than ``min_rows`` completions)."""

    folder: str
    skipped: str


class WarehouseRetrain(Record):
    """A retrain on the warehouse: each workload's version or why it was skipped, the number
    trained, and why nothing was (None when a model was trained)."""

    db: str
    workloads: dict[str, TrainedWorkload | SkippedWorkload]
    trained: int
    nothing_to_train: str | None = None


@flow(name="retrain-duration-model")
def retrain_duration_model(
    db: str | None = None,
    trace: str | None = None,
    registry: str = DEFAULT_REGISTRY,
    max_rounds: int = 400,
    seed: int = 0,
    min_rows: int = MIN_ROWS,
) -> DurationSummary | WarehouseRetrain:
    """Train on ``db`` (DuckDB warehouse; the default when neither is given), one model per
    workload, or on ``trace`` (Parquet trace or SWF log), one model; register each version and
    publish its report.

    Returns, for ``trace``, the card's summary (version, verdict, reason, metrics); for
    ``db``, each workload's summary or why it was skipped and the number trained, ``trained``
    0 and a ``nothing_to_train`` reason when the warehouse holds no completion.
    """
    logger = get_run_logger()
    if db and trace:
        raise DeschedError("give either db or trace, not both")
    settings = TrainSettings(max_rounds=max_rounds, seed=seed)
    if trace:
        frame = load_training_data(trace=trace)
        card = register_version(
            registry, train_duration_model(frame, settings, source=trace, workload="trace")
        )
        publish_report(card)
        logger.info("%s %s: %s", card.version, card.verdict, card.reason)
        return DurationSummary.of(card)

    db = db or str(DEFAULT_DB)
    if not Path(db).is_file():
        why = f"no warehouse at {db} yet (the ingest-logs flow creates it)"
        logger.info("nothing to train: %s", why)
        return WarehouseRetrain(db=db, workloads={}, trained=0, nothing_to_train=why)
    workloads = load_workloads(db)
    if not workloads:
        why = f"{db} holds no successful completion record yet"
        logger.info("nothing to train: %s", why)
        return WarehouseRetrain(db=db, workloads={}, trained=0, nothing_to_train=why)
    logger.info("%d workloads in %s: %s", len(workloads), db, ", ".join(workloads))
    done: dict[str, TrainedWorkload | SkippedWorkload] = {}
    keys = workload_keys(workloads)
    for folder, frame in workloads.items():
        key = keys[folder]
        if frame.height < min_rows:
            reason = f"{frame.height} completions, fewer than min_rows={min_rows}"
            done[key] = SkippedWorkload(folder=folder, skipped=reason)
            logger.info("%s: skipped (%s)", key, reason)
            continue
        result = train_duration_model(frame, settings, source=f"{db}:{folder}", workload=key)
        card = register_version(str(Path(registry) / key), result)
        publish_report(card, key)
        done[key] = TrainedWorkload.of(card, folder=folder)
        logger.info(
            "%s: %s %s on %d tasks: %s", key, card.version, card.verdict, frame.height, card.reason
        )
    trained = sum(isinstance(w, TrainedWorkload) for w in done.values())
    if trained:
        return WarehouseRetrain(db=db, workloads=done, trained=trained)
    why = f"no workload has {min_rows} completions yet"
    logger.info("nothing to train: %s", why)
    return WarehouseRetrain(db=db, workloads=done, trained=0, nothing_to_train=why)
