"""Prefect tasks of the duration-model retraining: thin I/O around ``desched`` functions.

Loading retries (the warehouse may be locked by an ingestion run) and is cached by the input
file's content hash; training and registration never retry (a registration writes a version).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import polars as pl
from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.context import TaskRunContext

from desched.models import promotion, training
from desched.models.cards import DurationCard
from desched.models.registry import file_sha256
from desched.models.training import TrainResult, TrainSettings
from desched.tables import table_lines


def _content_key(context: TaskRunContext, parameters: dict[str, Any]) -> str | None:
    """``training-data-{db|trace}-<sha256 of the input file>``; no caching when there is no
    such file."""
    kind = "db" if parameters.get("db") else "trace"
    path = parameters.get(kind)
    if not path or not Path(path).is_file():
        return None
    return f"training-data-{kind}-{file_sha256(Path(path))}"


@task(
    name="load-training-data",
    retries=2,
    retry_delay_seconds=5,
    cache_key_fn=_content_key,
    cache_expiration=timedelta(days=1),
    persist_result=True,
)
def load_training_data(db: str | None = None, trace: str | None = None) -> pl.DataFrame:
    """Completion records of the warehouse (``db``) or a trace / SWF log (``trace``)."""
    if db:
        return training.load_warehouse(db)
    assert trace is not None
    return training.load_trace_or_swf(trace)


@task(name="load-workloads", retries=2, retry_delay_seconds=5, cache_policy=NO_CACHE)
def load_workloads(db: str) -> dict[str, pl.DataFrame]:
    """The warehouse's completion records, one frame per workload (its log files' folder)."""
    return training.load_warehouse_workloads(db)


@task(name="train-duration-model", task_run_name="train-{workload}", cache_policy=NO_CACHE)
def train_duration_model(
    frame: pl.DataFrame, settings: TrainSettings, source: str, workload: str = "model"
) -> TrainResult:
    """One duration model on ``frame`` (one workload's tasks); ``source`` goes on its card."""
    return training.train(frame, settings, source=source)


@task(name="register-version", cache_policy=NO_CACHE)
def register_version(registry_dir: str, result: TrainResult) -> DurationCard:
    """Write the version, apply the promotion rule, return its card."""
    return promotion.register(registry_dir, result)


def report_markdown(card: DurationCard) -> str:
    """The card as a person reads it: metrics against the baselines and the verdict."""

    def fmt(value: float | None, digits: int = 3) -> str:
        return "n/a" if value is None else f"{value:.{digits}f}"

    window = card.data_window
    lines = [
        f"# Duration model {card.version}: **{card.verdict}**",
        "",
        f"Reason: {card.reason}.",
        "",
        (
            f"Objective `{card.objective}` (chosen by valid-slice MAE); data "
            f"{window.source}, {window.rows} tasks; held-out slice {window.test.rows} tasks "
            f"(fingerprint `{window.heldout_fingerprint}`)."
        ),
        "",
    ]
    m = card.metrics
    lines += table_lines(
        ["predictor", "MAE (s)", "MdAPE (%)", "Spearman"],
        [["**model**", fmt(m.mae_s), fmt(m.mdape_pct, 1), fmt(m.spearman)]]
        + [[name, fmt(b.mae_s), fmt(b.mdape_pct, 1), fmt(b.spearman)]
           for name, b in card.baselines.items()],
        "lrrr",
    )
    lines += ["", *table_lines(
        ["objective", "valid MAE (s)", "test MAE (s)", "trees"],
        [[name, fmt(o.valid_mae_s), fmt(o.test_mae_s), int(o.trees)]
         for name, o in card.objectives_compared.items()],
        "lrrr",
    )]
    q = card.quantile_metrics
    if q:
        lines += [
            "",
            "Quantile models on the held-out slice: "
            + ", ".join(f"{k} {fmt(v)}" for k, v in q.items())
            + ".",
        ]
    lines += ["", f"Training {fmt(card.training_time_s, 1)} s; git `{card.git_commit}`."]
    return "\n".join(lines) + "\n"


@task(name="publish-report", cache_policy=NO_CACHE)
def publish_report(card: DurationCard, workload: str | None = None) -> None:
    """A markdown artifact (metrics vs baselines, verdict) and a table artifact of metrics,
    keyed per workload (``duration-model-report-<workload>``) when there is one."""
    suffix = f"-{workload}" if workload else ""
    create_markdown_artifact(
        markdown=report_markdown(card),
        key=f"duration-model-report{suffix}",
        description=f"Duration model {card.version}: {card.verdict}",
    )
    rows = [{"predictor": "model", **card.metrics.model_dump()}] + [
        {"predictor": name, **b.model_dump()} for name, b in card.baselines.items()
    ]
    create_table_artifact(
        table=rows,
        key=f"duration-model-metrics{suffix}",
        description=f"{card.version} ({card.verdict}): {card.reason}",
    )
