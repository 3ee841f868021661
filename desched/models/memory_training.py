"""Training of the peak-memory model, a second LightGBM target learned from completion records.

Rows: completions with status ``ok`` and a non-null, non-negative ``peak_mem_mb``, sorted by
``submit_s``. Features are ``desched.models.memory.FEATURES``; the target is
``log1p(peak_mem_mb)`` with absolute error, so the prediction is a conditional median in log
space. The first ``1 - test_frac`` of the rows train a model that is scored on the rest, beside
the per-task-type median of the training rows; the model kept is then refit on every row (the
held-out numbers are the first fit's). ``desched.models.promotion.register`` writes the result
as a version of a memory-model registry. lightgbm is imported inside ``train_memory_model``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import polars as pl
from pydantic import Field
from pydantic_settings import SettingsConfigDict

from desched.errors import DeschedError
from desched.models.cards import MemoryMetrics, MemoryWindow
from desched.models.gbm import import_lightgbm
from desched.models.memory import MemoryModel, memory_features
from desched.settings import DeschedSettings

MIN_ROWS = 20


class MemoryModelSettings(DeschedSettings):
    """Hyper-parameters of the memory model; each field also reads ``DESCHED_MEMORY_<NAME>``.
    Every field is recorded in the card."""

    model_config = SettingsConfigDict(env_prefix="DESCHED_MEMORY_")

    test_frac: float = Field(
        default=0.2, ge=0, lt=1, description="newest share of the rows held out to score the model"
    )
    num_leaves: int = Field(default=15, ge=2, description="LightGBM leaves per tree")
    learning_rate: float = Field(default=0.1, gt=0, description="LightGBM shrinkage per round")
    rounds: int = Field(default=200, ge=1, description="boosting rounds (no early stopping)")
    min_data_in_leaf: int = Field(default=5, ge=1, description="LightGBM minimum rows per leaf")
    seed: int = Field(default=0, description="LightGBM seed (training is deterministic)")


@dataclass(frozen=True)
class MemoryTrainResult:
    """A fitted memory model and everything its registry card records."""

    model: MemoryModel
    source: str
    rows: int
    held_out_rows: int
    window: MemoryWindow
    metrics: MemoryMetrics
    settings: MemoryModelSettings
    train_s: float
    lightgbm_version: str


def training_rows(completions: pl.DataFrame) -> pl.DataFrame:
    """Completion records usable for training, oldest submit first."""
    need = {"task_type", "peak_mem_mb", "submit_s"}
    missing = need - set(completions.columns)
    if missing:
        raise DeschedError(f"completion records lack {sorted(missing)}")
    frame = completions
    if "status" in frame.columns:
        frame = frame.filter(pl.col("status") == "ok")
    for c in ("doc_bytes", "pages"):
        if c not in frame.columns:
            frame = frame.with_columns(pl.lit(None, pl.Float64).alias(c))
    return (
        frame.filter(pl.col("peak_mem_mb").is_not_null() & (pl.col("peak_mem_mb") >= 0))
        .select(
            pl.col("task_type").cast(pl.String),
            pl.col("doc_bytes").cast(pl.Float64),
            pl.col("pages").cast(pl.Float64),
            pl.col("peak_mem_mb").cast(pl.Float64),
            pl.col("submit_s").cast(pl.Float64),
        )
        .sort("submit_s", maintain_order=True)
    )


def train_memory_model(
    completions: pl.DataFrame,
    settings: MemoryModelSettings | None = None,
    source: str = "completion records",
) -> MemoryTrainResult:
    """Fit on the oldest rows, report on the newest ``test_frac``, refit on every row (module
    docstring). Cost: two LightGBM fits of ``rounds`` rounds on one thread."""
    lightgbm = import_lightgbm()

    settings = settings or MemoryModelSettings()
    rows = training_rows(completions)
    n = rows.height
    if n < MIN_ROWS:
        raise DeschedError(f"{source}: {n} completions with peak memory; need {MIN_ROWS}")
    task_types = sorted(rows["task_type"].unique().to_list())
    x = memory_features(rows.to_dicts(), {t: j for j, t in enumerate(task_types)})
    y = np.log1p(rows["peak_mem_mb"].to_numpy())
    cut = max(1, min(n - 1, int(n * (1 - settings.test_frac))))
    params = {
        "objective": "regression_l1",
        "num_leaves": settings.num_leaves,
        "learning_rate": settings.learning_rate,
        "min_data_in_leaf": settings.min_data_in_leaf,
        "min_data_per_group": 1,
        "cat_smooth": 1.0,
        "seed": settings.seed,
        "deterministic": True,
        "num_threads": 1,
        "verbose": -1,
    }
    started = time.perf_counter()
    train_set = lightgbm.Dataset(x[:cut], y[:cut], categorical_feature=[0], free_raw_data=False)
    booster = lightgbm.train(params, train_set, num_boost_round=settings.rounds)
    test_pred = np.expm1(booster.predict(x[cut:]))
    actual = rows["peak_mem_mb"].to_numpy()
    median_by_type = rows[:cut].group_by("task_type").agg(pl.col("peak_mem_mb").median())
    lookup = dict(zip(median_by_type["task_type"], median_by_type["peak_mem_mb"], strict=True))
    overall = float(np.median(actual[:cut]))
    baseline = np.array([lookup.get(t, overall) for t in rows["task_type"][cut:]])
    # Refit on every row for use; the card keeps the held-out numbers of the first fit.
    full = lightgbm.train(
        params,
        lightgbm.Dataset(x, y, categorical_feature=[0], free_raw_data=False),
        num_boost_round=settings.rounds,
    )
    return MemoryTrainResult(
        model=MemoryModel(full, task_types),
        source=source,
        rows=n,
        held_out_rows=n - cut,
        window=MemoryWindow(
            submit_s_min=float(rows["submit_s"].min()),  # type: ignore[arg-type]
            submit_s_max=float(rows["submit_s"].max()),  # type: ignore[arg-type]
        ),
        metrics=MemoryMetrics(
            mae_mb=float(np.mean(np.abs(test_pred - actual[cut:]))),
            baseline_type_median_mae_mb=float(np.mean(np.abs(baseline - actual[cut:]))),
        ),
        settings=settings,
        train_s=time.perf_counter() - started,
        lightgbm_version=lightgbm.__version__,
    )
