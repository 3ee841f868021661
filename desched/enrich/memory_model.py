"""The peak-memory model: a second LightGBM target, learned from the completion records.

Features: ``task_type`` (categorical, codes in the card), ``log1p(doc_bytes)``, ``pages``;
target: ``log1p(peak_mem_mb)`` (absolute error, so the prediction is a conditional median in
log space). Rows: completions with status ``ok`` and a non-null ``peak_mem_mb``, sorted by
``submit_s``; the last ``test_frac`` of them is held out and the card reports the model's MAE
there beside the per-task-type median's. A folder holds ``model.txt`` and ``card.json``;
``save`` replaces both together (written to a temp folder; the old folder is renamed aside and
the temp one into its place, so a reader sees the old pair, the new pair, or briefly none).

Cost at submit: one LightGBM prediction per submit (all its tasks in one call), well under a
millisecond for a few tasks; the service calls it before taking the scheduler's lock, so
a poll never waits on it.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from desched.errors import DeschedError

MODEL_FILE = "model.txt"
CARD_FILE = "card.json"
MIN_ROWS = 20


@dataclass(frozen=True)
class MemoryModelSettings:
    test_frac: float = 0.2
    num_leaves: int = 15
    learning_rate: float = 0.1
    rounds: int = 200
    min_data_in_leaf: int = 5
    seed: int = 0


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


class MemoryModel:
    """Predicts a task's peak memory (MiB) from its type and size."""

    def __init__(self, booster: Any, task_types: Sequence[str], card: dict[str, Any]) -> None:
        self.booster = booster
        self.codes = {t: j for j, t in enumerate(task_types)}
        self.card = card

    def matrix(self, rows: Sequence[Mapping[str, Any]]) -> np.ndarray:
        x = np.full((len(rows), 3), np.nan)
        for j, r in enumerate(rows):
            code = self.codes.get(str(r.get("task_type")))
            x[j, 0] = np.nan if code is None else code
            b, p = r.get("doc_bytes"), r.get("pages")
            x[j, 1] = math.log1p(float(b)) if b is not None and b >= 0 else np.nan
            x[j, 2] = float(p) if p is not None else np.nan
        return x

    def predict_mb(self, rows: Sequence[Mapping[str, Any]]) -> list[float]:
        if not rows:
            return []
        raw = self.booster.predict(self.matrix(rows), num_threads=1)
        return [max(0.0, float(math.expm1(v))) for v in raw]

    def save(self, folder: str | Path) -> Path:
        target = Path(folder)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".memory-model-", dir=target.parent))
        self.booster.save_model(str(tmp / MODEL_FILE))
        (tmp / CARD_FILE).write_text(json.dumps(self.card, indent=2) + "\n")
        old = None
        if target.exists():
            old = target.with_name(f".{target.name}-old-{os.getpid()}")
            target.rename(old)
        tmp.rename(target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return target


def load_memory_model(folder: str | Path) -> MemoryModel:
    import lightgbm

    path = Path(folder)
    if not (path / MODEL_FILE).is_file():
        raise DeschedError(f"{path}: no memory model ({MODEL_FILE})")
    card = json.loads((path / CARD_FILE).read_text())
    booster = lightgbm.Booster(model_file=str(path / MODEL_FILE))
    return MemoryModel(booster, card["task_types"], card)


def load_or_none(folder: str | Path | None) -> MemoryModel | None:
    if folder is None or not (Path(folder) / MODEL_FILE).is_file():
        return None
    return load_memory_model(folder)


def train_memory_model(
    completions: pl.DataFrame,
    settings: MemoryModelSettings = MemoryModelSettings(),
    source: str = "completion records",
) -> MemoryModel:
    """Fit on the oldest rows, report on the newest ``test_frac`` (module docstring)."""
    import lightgbm

    rows = training_rows(completions)
    n = rows.height
    if n < MIN_ROWS:
        raise DeschedError(f"{source}: {n} completions with peak memory; need {MIN_ROWS}")
    task_types = sorted(rows["task_type"].unique().to_list())
    model = MemoryModel(None, task_types, {})
    x = model.matrix(rows.to_dicts())
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
    lookup = dict(zip(median_by_type["task_type"], median_by_type["peak_mem_mb"]))
    overall = float(np.median(actual[:cut]))
    baseline = np.array([lookup.get(t, overall) for t in rows["task_type"][cut:]])
    # Refit on every row for use; the card keeps the held-out numbers of the first fit.
    full = lightgbm.train(
        params,
        lightgbm.Dataset(x, y, categorical_feature=[0], free_raw_data=False),
        num_boost_round=settings.rounds,
    )
    card = {
        "target": "peak_mem_mb",
        "features": ["task_type", "log1p(doc_bytes)", "pages"],
        "task_types": task_types,
        "source": source,
        "rows": n,
        "held_out_rows": n - cut,
        "data_window": {
            "submit_s_min": float(rows["submit_s"].min()),  # type: ignore[arg-type]
            "submit_s_max": float(rows["submit_s"].max()),  # type: ignore[arg-type]
        },
        "metrics": {
            "mae_mb": float(np.mean(np.abs(test_pred - actual[cut:]))),
            "baseline_type_median_mae_mb": float(np.mean(np.abs(baseline - actual[cut:]))),
        },
        "settings": asdict(settings),
        "train_s": time.perf_counter() - started,
        "lightgbm": lightgbm.__version__,
    }
    return MemoryModel(full, task_types, card)
