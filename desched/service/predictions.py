"""Predictions made at submit: a task's duration and its peak memory, each once, stored.

The service depends only on the predictor protocols of ``desched.models.interfaces``; either
model may be absent. ``predicted_s`` and its quantiles ``predicted_p50_s`` and
``predicted_p90_s`` (when the model has them) are NaN when unknown; ``predicted_mem_mb`` is the larger
of the submitted ``mem_mb`` hint and the memory model's prediction, None when there is
neither. A broken memory model never refuses a submit (the hints are used); a prediction that
is not a finite, non-negative number (positive for durations) counts as none.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Sequence

from desched.models.interfaces import DurationPredictor, MemoryPredictor
from desched.service.records import UNKNOWN_DURATIONS, Durations, NewTask

logger = logging.getLogger("desched.service")


class Predictions:
    """The duration predictor and the memory model the service loaded (either may be None)."""

    def __init__(self, duration: DurationPredictor | None, memory: MemoryPredictor | None) -> None:
        self.duration = duration
        self.memory = memory
        self._memory_lock = threading.Lock()
        """Submits run in worker threads; the memory model is asked one batch at a time, as
        when every submit ran on the event loop (the duration model runs under the
        scheduler's lock)."""

    def durations(self, tenant: str, item: NewTask, now: float) -> Durations:
        """The predicted duration of ``item`` submitted at ``now`` and its p50 and p90
        quantiles, each NaN when unknown."""
        if self.duration is None:
            return UNKNOWN_DURATIONS
        features = {
            "tenant": tenant,
            "task_type": item.task_type,
            "doc_bytes": item.doc_bytes,
            "pages": item.pages,
            "submit_s": now,
        }
        return Durations(
            *(
                v if math.isfinite(v) and v > 0 else math.nan
                for v in map(float, self.duration.predict_labels(features))
            )
        )

    def labels(self) -> list[str]:
        """The task columns the duration predictor fills (none without one)."""
        return [] if self.duration is None else list(self.duration.labels)

    def memory_mb(self, tenant: str, items: Sequence[NewTask]) -> list[float | None]:
        """``predicted_mem_mb`` of each item: one batched call of the memory model."""
        model: list[float | None] = [None] * len(items)
        if self.memory is not None:
            rows = [
                {
                    "tenant": tenant,
                    "task_type": t.task_type,
                    "doc_bytes": t.doc_bytes,
                    "pages": t.pages,
                }
                for t in items
            ]
            try:
                with self._memory_lock:
                    raw = self.memory.predict_mb(rows)
                model = [v if math.isfinite(v) and v >= 0 else None for v in raw]
            except Exception:  # a broken model must not refuse submits: fall back to hints
                logger.exception("memory model failed; using the mem_mb hints")
        out: list[float | None] = []
        for item, predicted in zip(items, model):
            known = [v for v in (item.mem_mb, predicted) if v is not None]
            out.append(max(known) if known else None)
        return out

    def observe_completion(self, tenant: str, task_type: str, duration_s: float) -> None:
        """Tell the duration predictor a real duration (it keeps tenant history)."""
        if self.duration is not None:
            self.duration.observe_completion(tenant, task_type, duration_s)
