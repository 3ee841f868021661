"""Run enrichment tasks: one batch of documents through clean-up, extraction, embedding and
classification, with each task's duration and peak memory.

Task types: ``ocr_clean`` (whitespace clean-up of the OCR lines), ``extract`` (company, date,
total), ``embed`` (the sentence embedding), ``classify`` (merchant category, which needs the
embedding). A batch embeds every document that needs it in one call of the model, which is
what makes a batch faster than one document at a time on a GPU.

Duration and memory of a task in a batch: the batch is timed and measured as a whole; each
task is given the model part in proportion to its characters plus its own rule-based part
(timed and measured alone), and the model part's peak memory in proportion to its characters.
With a batch of one these are the task's own measurements.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from desched.enrich.classify import PrototypeClassifier, classify
from desched.enrich.embedding import Embedder
from desched.enrich.extract import extract_fields
from desched.enrich.memory import PeakMemory
from desched.errors import DeschedError

TASK_TYPES: tuple[str, ...] = ("ocr_clean", "extract", "embed", "classify")
NEEDS_EMBEDDING = frozenset({"embed", "classify"})


class UnknownTaskType(DeschedError):
    """A task type this worker does not run (not retryable)."""


@dataclass(frozen=True)
class EnrichTask:
    task_id: str
    task_type: str
    text: str


@dataclass
class EnrichResult:
    task_id: str
    task_type: str
    model: str
    device: str
    duration_s: float
    peak_mem_mb: float
    chars: int
    clean_text: str | None = None
    company: str | None = None
    date: str | None = None
    total: str | None = None
    category: str | None = None
    category_source: str | None = None
    embedding: list[float] | None = field(default=None, repr=False)


def clean_ocr(text: str) -> str:
    """One space between words, no empty lines, no trailing spaces."""
    return "\n".join(" ".join(ln.split()) for ln in text.splitlines() if ln.strip())


class Enricher:
    """Holds the embedding model and the category prototypes built with it."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self.prototypes = PrototypeClassifier.for_embedder(embedder)

    def run(self, tasks: Sequence[EnrichTask], batch_size: int = 32) -> list[EnrichResult]:
        """Results in the order of ``tasks``; ``UnknownTaskType`` before any work if one task
        has a type not in ``TASK_TYPES``."""
        for t in tasks:
            if t.task_type not in TASK_TYPES:
                raise UnknownTaskType(f"task {t.task_id}: unknown task type {t.task_type!r}")
        device = self.embedder.device
        embed_idx = [j for j, t in enumerate(tasks) if t.task_type in NEEDS_EMBEDDING]
        embeddings: np.ndarray | None = None
        model_s = 0.0
        with PeakMemory(device) as pm:
            if embed_idx:
                started = time.perf_counter()
                embeddings = self.embedder.encode([tasks[j].text for j in embed_idx], batch_size)
                model_s = time.perf_counter() - started
        embed_chars = sum(len(tasks[j].text) for j in embed_idx) or 1
        row_of = {j: r for r, j in enumerate(embed_idx)}
        out: list[EnrichResult] = []
        for j, t in enumerate(tasks):
            share = len(t.text) / embed_chars if j in row_of else 0.0
            with PeakMemory("cpu") as own:
                started = time.perf_counter()
                result = EnrichResult(
                    task_id=t.task_id,
                    task_type=t.task_type,
                    model=self.embedder.name if t.task_type in NEEDS_EMBEDDING else "rules",
                    device=device if t.task_type in NEEDS_EMBEDDING else "cpu",
                    duration_s=0.0,
                    peak_mem_mb=0.0,
                    chars=len(t.text),
                )
                if t.task_type == "ocr_clean":
                    result.clean_text = clean_ocr(t.text)
                elif t.task_type == "extract":
                    f = extract_fields(t.text)
                    result.company, result.date, result.total = f.company, f.date, f.total
                else:
                    assert embeddings is not None
                    vector = embeddings[row_of[j]]
                    if t.task_type == "embed":
                        result.embedding = [float(x) for x in vector]
                    else:
                        c = classify([t.text], vector[None, :], self.prototypes)[0]
                        result.category, result.category_source = c.category, c.source
                own_s = time.perf_counter() - started
            result.duration_s = max(own_s + model_s * share, 1e-6)
            result.peak_mem_mb = own.peak_mb + pm.peak_mb * share
            out.append(result)
        return out
