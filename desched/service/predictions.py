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
from pathlib import Path

from desched.errors import DeschedError
from desched.models.interfaces import DurationPredictor, MemoryPredictor
from desched.service.records import UNKNOWN_DURATIONS, Durations, NewTask

logger = logging.getLogger("desched.service")


MODEL_CHECK_S = 5.0
"""How often the service's ``ModelWatcher`` looks at the duration registry's champion."""


class Predictions:
    """The duration predictor and the memory model the service loaded (either may be None).

    With ``registry`` (the duration model's registry) the service follows its champion:
    ``refresh``, called by the ``ModelWatcher``, loads a newly promoted champion (a scheduled
    retraining's) and swaps it in under the scheduler's lock, keeping the tenant history
    the old one learned from completions. A champion that will not load leaves the current
    model serving; ``error`` says why until a champion loads. The active policy does not
    change with the model (``desched policy set`` does that)."""

    def __init__(self, duration: DurationPredictor | None, memory: MemoryPredictor | None) -> None:
        self.duration = duration
        self.memory = memory
        self.registry: Path | None = None
        self.error: str | None = None
        self._tried: tuple[str, tuple[tuple[str, int, int], ...]] | None = None
        """The champion last tried and its files' (name, size, mtime): tried once per state."""
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

    @property
    def version(self) -> str | None:
        """The loaded duration model's version (None without one)."""
        return getattr(self.duration, "version", None)

    def refresh(self, lock: threading.Lock) -> bool:
        """Load the registry's champion if it is not the loaded model (the service's
        ``ModelWatcher`` calls this every ``MODEL_CHECK_S``); whether a new model was swapped
        in. Loading runs outside ``lock`` (a first load compiles the forests: seconds); the
        swap holds it. A champion that failed is tried again once its folder's files change
        (fixed in place, or written again); ``error`` is cleared once the champion is the
        model serving."""
        if self.registry is None:
            return False
        from desched.models.registry import Registry

        try:
            champion = Registry(self.registry).champion()
            if champion is None:
                return False
            if champion == self.version:
                self.error = None
                return False
            files = _signature(self.registry / champion)
        except (DeschedError, OSError, ValueError) as exc:  # unreadable: permissions, bytes
            return self._refused(None, f"{type(exc).__name__}: {exc}")
        if (champion, files) == self._tried:
            return False
        self._tried = (champion, files)
        from desched.models.loading import load_duration_predictor

        try:
            fresh, reason = load_duration_predictor(self.registry)
        except Exception as exc:  # noqa: BLE001 (a bad champion must not stop the service)
            fresh, reason = None, f"{type(exc).__name__}: {exc}"
        if fresh is None or getattr(fresh, "version", None) != champion:
            return self._refused(champion, reason or "the pointer moved while it loaded")
        with lock:
            adopt = getattr(fresh, "adopt_history", None)
            if self.duration is not None and adopt is not None:
                adopt(self.duration)
            self.duration, self.error = fresh, None
        logger.warning("duration model %s loaded (the registry's new champion)", champion)
        return True

    def _refused(self, champion: str | None, reason: str) -> bool:
        which = "the registry's champion" if champion is None else f"champion {champion}"
        message = f"{which} not loaded, {self.version or 'no model'} serves: {reason}"
        if message != self.error:
            logger.warning("%s", message)
        self.error = message
        return False

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


def _signature(folder: Path) -> tuple[tuple[str, int, int], ...]:
    """(name, size, mtime) of each file of a version's folder: changes when it is rewritten."""
    stats = ((p.name, p.stat()) for p in sorted(folder.iterdir()) if p.is_file())
    return tuple((name, st.st_size, st.st_mtime_ns) for name, st in stats)
