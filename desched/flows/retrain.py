"""Flow ``retrain-duration-model``: train the duration model and offer it to the registry.

Nightly (prefect.yaml) it trains on the warehouse's completion records; ad hoc it trains on a
trace or an SWF log::

    from desched.flows.retrain import retrain_duration_model
    retrain_duration_model(trace="data/trace.parquet", registry="models/duration")
"""

from __future__ import annotations

from typing import Any

from prefect import flow

from desched.errors import DeschedError
from desched.models.training import TrainSettings
from desched.tasks.retrain import (
    load_training_data,
    publish_report,
    register_version,
    train_duration_model,
)
from desched.warehouse.schema import DEFAULT_DB

DEFAULT_REGISTRY = "models/duration"


@flow(name="retrain-duration-model", log_prints=True)
def retrain_duration_model(
    db: str | None = None,
    trace: str | None = None,
    registry: str = DEFAULT_REGISTRY,
    max_rounds: int = 400,
    seed: int = 0,
) -> dict[str, Any]:
    """Train on ``db`` (DuckDB warehouse; the default when neither is given) or ``trace``
    (Parquet trace or SWF log), register the version, publish the report; returns a summary
    of the card (version, verdict, reason, metrics)."""
    if db and trace:
        raise DeschedError("give either db or trace, not both")
    if not trace:
        db = db or str(DEFAULT_DB)
    frame = load_training_data(db=db, trace=trace)
    settings = TrainSettings(max_rounds=max_rounds, seed=seed)
    result = train_duration_model(frame, settings, source=str(db or trace))
    card = register_version(registry, result)
    publish_report(card)
    print(f"{card.version} {card.verdict}: {card.reason}")
    return {
        "version": card.version,
        "verdict": card.verdict,
        "reason": card.reason,
        "objective": card.objective,
        "metrics": card.metrics.model_dump(),
        "baselines": {name: b.model_dump() for name, b in card.baselines.items()},
    }
