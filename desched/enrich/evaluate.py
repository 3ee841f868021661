"""Enrichment on the SROIE receipts: extraction accuracy against the ground truth, the
classifier's agreement with its rules, and time per document on this machine.

``python -m desched.enrich.evaluate [--model auto|minilm|tiny] [--device cpu|cuda]
[--limit N] [--sample N]`` prints a markdown report (docs/enrichment.md holds one).
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from desched.enrich.classify import PrototypeClassifier, keyword_category
from desched.enrich.documents import DEFAULT_SROIE, load_sroie
from desched.enrich.embedding import ModelChoice, load_embedder
from desched.enrich.extract import extract_fields, score
from desched.enrich.memory import PeakMemory
from desched.tables import table_lines

FIELDS = ("company", "date", "total")
"""The extracted fields scored against the ground truth."""


@dataclass(frozen=True, slots=True)
class EnrichmentEval:
    """One evaluation on the receipts (``evaluate``): exact-match accuracy per field with the
    misses (receipt, extracted, truth); time per receipt of the rules, of the embedding in
    batches and one at a time (on the first ``embed_single_sample`` receipts), with the
    memory each added; how often the classifier's rules fire, how often the zero-shot
    classifier agrees with them where they do, and the five most common disagreements
    ``((rule, zero-shot), count)``; the machine it ran on."""

    receipts: int
    accuracy: dict[str, float]
    misses: dict[str, list[tuple[str, str, str]]]
    extract_ms_per_doc: float
    model: str
    device: str
    load_s: float
    embed_batched_ms_per_doc: float
    embed_batch_size: int
    embed_batched_peak_mb: float
    embed_single_ms_per_doc: float
    embed_single_sample: int
    embed_single_peak_mb: float
    rule_coverage: float
    rule_categories: Counter[str]
    zero_shot_agreement: float
    zero_shot_categories: Counter[str]
    confusion: list[tuple[tuple[str, str], int]]
    cpu: str
    torch_threads: int


def evaluate(
    root: Path = DEFAULT_SROIE,
    model: ModelChoice = "auto",
    device: str | None = None,
    limit: int | None = None,
    sample: int = 64,
    batch_size: int = 32,
) -> EnrichmentEval:
    """Extraction, embedding and classification over the first ``limit`` receipts under
    ``root`` (all by default) with embedder ``model`` on ``device``: one pass each, the
    embedding timed after a warm-up of two receipts."""
    receipts = load_sroie(root, limit)
    n = len(receipts)
    hits: Counter[str] = Counter()
    misses: dict[str, list[tuple[str, str, str]]] = {k: [] for k in FIELDS}
    started = time.perf_counter()
    for r in receipts:
        f = extract_fields(r.text)
        for key, ok in score(f, r.company, r.date, r.total).items():
            hits[key] += ok
            if not ok:
                misses[key].append((r.receipt_id, getattr(f, key), getattr(r, key)))
    extract_s = time.perf_counter() - started

    load_started = time.perf_counter()
    embedder = load_embedder(model, device)
    load_s = time.perf_counter() - load_started
    texts = [r.text for r in receipts]
    embedder.encode(texts[:2], 2)  # warm-up
    with PeakMemory(embedder.device) as batched_mem:
        t0 = time.perf_counter()
        vectors = embedder.encode(texts, batch_size)
        batched_s = time.perf_counter() - t0
    one_by_one = texts[:sample]
    with PeakMemory(embedder.device) as single_mem:
        t0 = time.perf_counter()
        for t in one_by_one:
            embedder.encode([t], 1)
        single_s = time.perf_counter() - t0

    prototypes = PrototypeClassifier.for_embedder(embedder)
    zero_shot = [c for c, _ in prototypes.predict(vectors)]
    rules = [keyword_category(t) for t in texts]
    covered = [(r, z) for r, z in zip(rules, zero_shot) if r is not None]
    agree = sum(r == z for r, z in covered)
    return EnrichmentEval(
        receipts=n,
        accuracy={k: hits[k] / n for k in FIELDS},
        misses=misses,
        extract_ms_per_doc=1000 * extract_s / n,
        model=embedder.name,
        device=embedder.device,
        load_s=load_s,
        embed_batched_ms_per_doc=1000 * batched_s / n,
        embed_batch_size=batch_size,
        embed_batched_peak_mb=batched_mem.peak_mb,
        embed_single_ms_per_doc=1000 * single_s / max(1, len(one_by_one)),
        embed_single_sample=len(one_by_one),
        embed_single_peak_mb=single_mem.peak_mb,
        rule_coverage=len(covered) / n,
        rule_categories=Counter(r for r in rules if r is not None),
        zero_shot_agreement=agree / len(covered) if covered else float("nan"),
        zero_shot_categories=Counter(zero_shot),
        confusion=Counter((r, z) for r, z in covered if r != z).most_common(5),
        cpu=f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores visible",
        torch_threads=_torch_threads(),
    )


def _torch_threads() -> int:
    import torch

    return int(torch.get_num_threads())


def markdown(res: EnrichmentEval) -> str:
    """The report ``python -m desched.enrich.evaluate`` prints (docs/enrichment.md)."""
    acc, n = res.accuracy, res.receipts
    lines = [
        f"receipts: {n}",
        "",
        *table_lines(
            ["field", "exact match after normalisation"],
            [[k, f"{acc[k]:.1%} ({round(acc[k] * n)}/{n})"] for k in FIELDS],
        ),
        "",
        f"extraction (rules): {res.extract_ms_per_doc:.3f} ms per receipt",
        (
            f"embedding model: {res.model} on {res.device} (load {res.load_s:.1f} s; "
            f"torch threads {res.torch_threads}; {res.cpu})"
        ),
        (
            f"- batches of {res.embed_batch_size}: {res.embed_batched_ms_per_doc:.1f} ms "
            f"per receipt, peak memory added {res.embed_batched_peak_mb:.1f} MiB"
        ),
        (
            f"- one at a time ({res.embed_single_sample} receipts): "
            f"{res.embed_single_ms_per_doc:.1f} ms per receipt, peak memory added "
            f"{res.embed_single_peak_mb:.1f} MiB"
        ),
        "",
        (
            f"classifier: rules fire on {res.rule_coverage:.1%} of receipts "
            f"({dict(res.rule_categories)}); zero-shot agrees with them on "
            f"{res.zero_shot_agreement:.1%} of those; zero-shot over all: "
            f"{dict(res.zero_shot_categories)}; most common disagreements (rule, zero-shot): "
            f"{res.confusion}"
        ),
    ]
    for key in FIELDS:
        lines += ["", f"first misses, {key} (receipt, extracted, truth):"]
        lines += [f"- {m}" for m in res.misses[key][:5]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default="auto", choices=["auto", "minilm", "tiny"])
    p.add_argument("--device", default=None)
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--sample", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=32)
    a = p.parse_args(argv)
    res = evaluate(DEFAULT_SROIE, a.model, a.device, a.limit, a.sample, a.batch_size)
    print(markdown(res))


if __name__ == "__main__":
    main()
