"""The peak-memory predictor runtime: a registry's champion memory model, for the submit path.

Features of a task: ``task_type`` (a category code of the card's ``task_types``, NaN when the
card lacks it), ``log1p(doc_bytes)`` and ``pages`` (NaN when absent or negative); the model
predicts ``log1p(peak_mem_mb)`` and ``predict_mb`` returns ``max(0, expm1(raw))`` MiB.
Training is ``desched.models.memory_training``; versions and the champion pointer are the
registry's (``desched.models.registry``).

Cost at submit: one LightGBM prediction per submit (all its tasks in one call), well under a
millisecond for a few tasks; the service calls it before taking the scheduler's lock, so a
poll never waits on it. lightgbm is imported only when a model is loaded.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from desched.models.cards import MemoryCard, ModelKind
from desched.models.gbm import import_lightgbm
from desched.models.registry import ModelUnavailable, Registry

FEATURES: tuple[str, ...] = ("task_type", "log1p(doc_bytes)", "pages")
TARGET = "peak_mem_mb"


def memory_features(rows: Sequence[Mapping[str, Any]], codes: Mapping[str, int]) -> np.ndarray:
    """The (n, 3) float64 feature matrix of ``rows`` (module docstring); ``codes`` maps a task
    type to its category code."""
    x = np.full((len(rows), len(FEATURES)), np.nan)
    for j, r in enumerate(rows):
        code = codes.get(str(r.get("task_type")))
        x[j, 0] = np.nan if code is None else code
        b, p = r.get("doc_bytes"), r.get("pages")
        x[j, 1] = math.log1p(float(b)) if b is not None and b >= 0 else np.nan
        x[j, 2] = float(p) if p is not None else np.nan
    return x


class MemoryModel:
    """Predicts a task's peak memory (MiB) from its type and size. ``card`` is None for a
    model not yet registered (fresh from training)."""

    def __init__(
        self, booster: Any, task_types: Sequence[str], card: MemoryCard | None = None
    ) -> None:
        self.booster = booster
        self.task_types = list(task_types)
        self.codes = {t: j for j, t in enumerate(task_types)}
        self.card = card

    def matrix(self, rows: Sequence[Mapping[str, Any]]) -> np.ndarray:
        return memory_features(rows, self.codes)

    def predict_mb(self, rows: Sequence[Mapping[str, Any]]) -> list[float]:
        if not rows:
            return []
        raw = self.booster.predict(self.matrix(rows), num_threads=1)
        return [max(0.0, float(math.expm1(v))) for v in raw]


def load(registry: str | Path, version: str | None = None) -> MemoryModel:
    """The champion (or ``version``) of a memory-model registry. Raises ``ModelUnavailable``
    naming what is missing or corrupt."""
    lightgbm = import_lightgbm()

    reg = Registry(registry, ModelKind.MEMORY)
    name = version or reg.champion_or_error()
    card = reg.memory_card(name)
    path = reg.model_file(name, card)
    try:
        booster = lightgbm.Booster(model_file=str(path))
    except lightgbm.basic.LightGBMError as exc:
        raise ModelUnavailable(f"{path}: model cannot be loaded ({exc})") from None
    return MemoryModel(booster, card.task_types, card)


def load_or_none(registry: str | Path) -> tuple[MemoryModel | None, str | None]:
    """The champion memory model, or ``(None, reason)`` when it is missing or corrupt."""
    try:
        return load(registry), None
    except ModelUnavailable as exc:
        return None, str(exc)
