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
from typing import Any

from prefect import flow, get_run_logger

from desched.errors import DeschedError
from desched.models.cards import DurationCard
from desched.models.training import TrainSettings, workload_key
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


def _summary(card: DurationCard) -> dict[str, Any]:
    return {
        "version": card.version,
        "verdict": card.verdict,
        "reason": card.reason,
        "objective": card.objective,
        "metrics": card.metrics.model_dump(),
        "baselines": {name: b.model_dump() for name, b in card.baselines.items()},
    }


@flow(name="retrain-duration-model")
def retrain_duration_model(
    db: str | None = None,
    trace: str | None = None,
    registry: str = DEFAULT_REGISTRY,
    max_rounds: int = 400,
    seed: int = 0,
    min_rows: int = MIN_ROWS,
) -> dict[str, Any]:
    """Train on ``db`` (DuckDB warehouse; the default when neither is given), one model per
    workload, or on ``trace`` (Parquet trace or SWF log), one model; register each version and
    publish its report.

    Returns, for ``trace``, the card's summary (version, verdict, reason, metrics); for
    ``db``, ``{"workloads": {key: summary or {"skipped": reason}}, "trained": n, "db": db}``,
    ``trained`` 0 and a ``nothing_to_train`` reason when the warehouse holds no completion.
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
        return _summary(card)

    db = db or str(DEFAULT_DB)
    out: dict[str, Any] = {"db": db, "workloads": {}, "trained": 0}
    if not Path(db).is_file():
        out["nothing_to_train"] = f"no warehouse at {db} yet (the ingest-logs flow creates it)"
        logger.info("nothing to train: %s", out["nothing_to_train"])
        return out
    workloads = load_workloads(db)
    if not workloads:
        out["nothing_to_train"] = f"{db} holds no successful completion record yet"
        logger.info("nothing to train: %s", out["nothing_to_train"])
        return out
    logger.info("%d workloads in %s: %s", len(workloads), db, ", ".join(workloads))
    for folder, frame in workloads.items():
        key = workload_key(folder)
        if frame.height < min_rows:
            reason = f"{frame.height} completions, fewer than min_rows={min_rows}"
            out["workloads"][key] = {"folder": folder, "skipped": reason}
            logger.info("%s: skipped (%s)", key, reason)
            continue
        result = train_duration_model(frame, settings, source=f"{db}:{folder}", workload=key)
        card = register_version(str(Path(registry) / key), result)
        publish_report(card, key)
        out["workloads"][key] = {"folder": folder, **_summary(card)}
        out["trained"] += 1
        logger.info(
            "%s: %s %s on %d tasks: %s", key, card.version, card.verdict, frame.height, card.reason
        )
    if not out["trained"]:
        out["nothing_to_train"] = f"no workload has {min_rows} completions yet"
        logger.info("nothing to train: %s", out["nothing_to_train"])
    return out
