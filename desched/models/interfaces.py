"""What a consumer needs of a loaded model: the read side's contracts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol


class MemoryPredictor(Protocol):
    """Predicts a task's peak memory from its submitted columns."""

    def predict_mb(self, rows: Sequence[Mapping[str, Any]]) -> list[float]: ...


class DurationPredictor(Protocol):
    """Predicts one task's duration and learns the tenant history it uses from completions."""

    def predict_one(self, task: Mapping[str, Any]) -> float: ...

    @property
    def labels(self) -> tuple[str, ...]:
        """The columns ``predict_labels`` fills: ``predicted_s`` and the loaded quantiles."""
        ...

    def predict_labels(self, task: Mapping[str, Any]) -> tuple[float, float, float]:
        """``(predicted_s, p50_s, p90_s)``; a quantile the predictor lacks is NaN."""
        ...

    def observe_completion(self, tenant: str, task_type: str, duration_s: float) -> None: ...
