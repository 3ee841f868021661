"""A registry's champion as the predictor a consumer needs (``desched.models.interfaces``).

The live service loads both of its models here and sees only the protocols; which runtime
serves them (lleaves for durations, LightGBM for peak memory) stays behind this module, and
so do their imports: nothing heavy is imported until a loader is called.
"""

from __future__ import annotations

from pathlib import Path

from desched.models.interfaces import DurationPredictor, MemoryPredictor


def load_duration_predictor(registry: str | Path) -> tuple[DurationPredictor | None, str | None]:
    """The champion of a duration-model registry with the p50 and p90 quantile models its
    card lists (the Boost policies' labels), or ``(None, reason)`` when there is none or it is
    corrupt. Compiles the models on first load (seconds), then reads the cached form."""
    from desched.models.duration import load_or_none

    return load_or_none(registry, quantiles=True)


def load_memory_predictor(registry: str | Path) -> tuple[MemoryPredictor | None, str | None]:
    """The champion of a memory-model registry, or ``(None, reason)`` when there is none or it
    is corrupt."""
    from desched.models.memory import load_or_none

    return load_or_none(registry)
