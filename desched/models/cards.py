"""The records of a model registry: one card per version, and one listing row per version.

A card is what a version is and how good it was; ``card.json`` in the version's folder holds
it, written once and never changed (models/README.md lists every key). The JSON keys are the
field names below. Cards are read leniently (unknown keys are ignored) so that a card written
by a later desched still loads; a card without ``kind`` is a duration card (cards written
before the memory model joined the registry).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, JsonValue


class ModelKind(StrEnum):
    """What a registry's models predict: a task's duration or its peak memory."""

    DURATION = "duration"
    MEMORY = "memory"


Outcome = Literal["promoted", "rejected"]


class Record(BaseModel):
    """Base of the registry's records: frozen, unknown keys ignored on read."""

    model_config = ConfigDict(frozen=True, extra="ignore")


class Scores(Record):
    """A duration predictor's scores on a held-out slice: MAE (s), median absolute percentage
    error (%), and Spearman rank correlation (None where undefined, as for a constant)."""

    mae_s: float
    mdape_pct: float
    spearman: float | None


class ObjectiveScores(Record):
    """One candidate objective: MAE on the valid slice (which chooses) and on the test slice,
    and its number of trees."""

    valid_mae_s: float
    test_mae_s: float
    trees: float


class Span(Record):
    """Rows of one slice of the time-ordered split and their submit-time range."""

    rows: int
    submit_s_min: float
    submit_s_max: float


class DurationWindow(Record):
    """The data a duration model was trained on; ``heldout_fingerprint`` hashes the held-out
    task ids, so equal slices have equal fingerprints."""

    source: str
    rows: int
    tenants: int
    task_types: int
    train: Span
    valid: Span
    test: Span
    heldout_fingerprint: str


class FeatureLayout(Record):
    """The feature layout of a duration model (``desched.models.features.FeatureSpec``)."""

    names: list[str]
    categorical: list[str]
    size_features: list[str]
    categories: dict[str, list[str]]
    history_window: int
    leakage_rule: str


class DurationPromotion(Record):
    """The promotion decision: the rule, the champion before, and both MAEs on the same rows."""

    rule: str
    champion_before: str | None
    champion_mae_s: float | None
    challenger_mae_s: float


class MemoryPromotion(Record):
    """The promotion decision of a memory model: the rule and the champion it replaced."""

    rule: str
    champion_before: str | None


class MemoryWindow(Record):
    """Submit-time range of the completion records a memory model was trained on."""

    submit_s_min: float
    submit_s_max: float


class MemoryMetrics(Record):
    """Held-out MAE (MiB) of the memory model and of the per-task-type median."""

    mae_mb: float
    baseline_type_median_mae_mb: float


class VersionSummary(Record):
    """One row of a registry listing. A version whose card cannot be read has only
    ``version``, ``champion`` and ``verdict`` (``corrupt: <reason>``). ``mae`` is in ``unit``
    (``s`` for a duration model, ``MiB`` for a memory model), as is ``best_baseline_mae``."""

    version: str
    champion: bool
    verdict: str
    kind: ModelKind | None = None
    objective: str | None = None
    mae: float | None = None
    unit: str | None = None
    mdape_pct: float | None = None
    spearman: float | None = None
    best_baseline: str | None = None
    best_baseline_mae: float | None = None
    rows: int | None = None
    source: str | None = None
    created_at: str | None = None
    reason: str | None = None


class DurationCard(Record):
    """The card of a duration-model version."""

    kind: Literal[ModelKind.DURATION] = ModelKind.DURATION
    version: str
    verdict: Outcome
    reason: str
    promotion: DurationPromotion
    objective: str
    target_log: bool
    objectives_compared: dict[str, ObjectiveScores]
    features: FeatureLayout
    data_window: DurationWindow
    metrics: Scores
    baselines: dict[str, Scores]
    beats_baselines: dict[str, bool]
    quantile_metrics: dict[str, float | None]
    settings: dict[str, JsonValue]
    training_time_s: float
    compile_time_s: float | None
    files: dict[str, str]
    sha256: dict[str, str]
    compiled_for: str | None
    libraries: dict[str, str | None]
    git_commit: str | None
    created_at: str

    def summary(self, champion: bool) -> VersionSummary:
        best = min(self.baselines.items(), key=lambda kv: kv[1].mae_s)
        return VersionSummary(
            version=self.version,
            champion=champion,
            verdict=self.verdict,
            kind=self.kind,
            objective=self.objective,
            mae=self.metrics.mae_s,
            unit="s",
            mdape_pct=self.metrics.mdape_pct,
            spearman=self.metrics.spearman,
            best_baseline=best[0],
            best_baseline_mae=best[1].mae_s,
            rows=self.data_window.rows,
            source=self.data_window.source,
            created_at=self.created_at,
            reason=self.reason,
        )


class MemoryCard(Record):
    """The card of a peak-memory-model version."""

    kind: Literal[ModelKind.MEMORY] = ModelKind.MEMORY
    version: str
    verdict: Outcome
    reason: str
    promotion: MemoryPromotion
    target: str
    features: list[str]
    task_types: list[str]
    source: str
    rows: int
    held_out_rows: int
    data_window: MemoryWindow
    metrics: MemoryMetrics
    settings: dict[str, JsonValue]
    train_s: float
    files: dict[str, str]
    sha256: dict[str, str]
    libraries: dict[str, str | None]
    git_commit: str | None
    created_at: str

    def summary(self, champion: bool) -> VersionSummary:
        return VersionSummary(
            version=self.version,
            champion=champion,
            verdict=self.verdict,
            kind=self.kind,
            objective="l1-log1p",
            mae=self.metrics.mae_mb,
            unit="MiB",
            best_baseline="type_median",
            best_baseline_mae=self.metrics.baseline_type_median_mae_mb,
            rows=self.rows,
            source=self.source,
            created_at=self.created_at,
            reason=self.reason,
        )


Card = DurationCard | MemoryCard
"""A card of either kind; ``kind`` tells which."""
