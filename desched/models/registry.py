"""The model registry, read side: a folder of versions, their cards, and a champion pointer.

One registry folder holds the versions of one kind of model (``ModelKind``)::

    models/duration/          the duration model (models/memory/: the peak-memory model)
      CHAMPION                the champion's version name, one line (replaced atomically)
      v0001/
        card.json             the version's card (desched.models.cards), written last
        model.txt             the LightGBM text model; other files are listed in the card
      v0002/ ...

A version exists once its ``card.json`` is written; cards never change afterwards. Every file
a card lists under ``files`` has its SHA-256 under ``sha256``: a mismatch is a corrupt model.
This module only reads; ``desched.models.promotion`` writes versions and moves the pointer.
It imports neither LightGBM nor any runtime: the predictor runtimes sit above it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pydantic import ValidationError

from desched.errors import DeschedError
from desched.models.cards import Card, DurationCard, MemoryCard, ModelKind, VersionSummary

CARD = "card.json"
CHAMPION = "CHAMPION"
MODEL_FILE = "model.txt"


class ModelUnavailable(DeschedError):
    """No usable model: the registry, its champion pointer, a card or a model file is missing
    or corrupt."""


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's content, read in chunks (memory stays flat for any size)."""
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def parse_card(raw: object, where: Path) -> Card:
    """The card of the JSON value ``raw`` (read from ``where``); a card without ``kind`` is a
    duration card. Raises ``ModelUnavailable`` naming the first missing or bad key."""
    if not isinstance(raw, dict):
        raise ModelUnavailable(f"{where}: unreadable model card (not a JSON object)")
    kind = raw.get("kind", ModelKind.DURATION.value)
    model: type[DurationCard | MemoryCard]
    if kind == ModelKind.DURATION:
        model = DurationCard
    elif kind == ModelKind.MEMORY:
        model = MemoryCard
    else:
        raise ModelUnavailable(f"{where}: model card of unknown kind {kind!r}")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(part) for part in first["loc"])
        if first["type"] == "missing":
            raise ModelUnavailable(f"{where}: model card lacks {key!r}") from None
        raise ModelUnavailable(f"{where}: unreadable model card ({key}: {first['msg']})") from None


class Registry:
    """Read access to one registry folder. With ``kind`` given, a card of another kind is
    refused (``ModelUnavailable``)."""

    def __init__(self, root: str | Path, kind: ModelKind | None = None) -> None:
        self.root = Path(root)
        self.kind = kind

    def versions(self) -> list[str]:
        """Complete versions (those with a card), oldest first."""
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and (p / CARD).is_file())

    def champion(self) -> str | None:
        """The champion's version name, or None when there is none yet."""
        pointer = self.root / CHAMPION
        if not pointer.is_file():
            return None
        name = pointer.read_text().strip()
        if not name or not (self.root / name / CARD).is_file():
            raise ModelUnavailable(
                f"{pointer}: names version {name!r}, which has no card (corrupt registry)"
            )
        return name

    def champion_or_error(self) -> str:
        """The champion's version name; ``ModelUnavailable`` when there is none, naming a
        version folder given for its registry, or a folder of the single-folder layout that
        preceded versioned memory models."""
        name = self.champion()
        if name is not None:
            return name
        parent = self.root.parent
        if (parent / CHAMPION).is_file() and self.root.name in Registry(parent).versions():
            raise ModelUnavailable(
                f"{self.root}: one version of the registry {self.root.parent}; give that "
                "folder (its champion is the model used)")
        if (self.root / MODEL_FILE).is_file() and (self.root / CARD).is_file():
            raise ModelUnavailable(
                f"{self.root}: a model of the old single-folder layout (no versions, no "
                "CHAMPION); retrain it into this folder to make a versioned registry"
            )
        raise ModelUnavailable(f"{self.root}: no champion model (train one first)")

    def card(self, version: str) -> Card:
        """The card of ``version`` (of this registry's kind, when it has one)."""
        path = self.root / version / CARD
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            raise ModelUnavailable(f"{path}: no such model card") from None
        except (OSError, ValueError) as exc:
            raise ModelUnavailable(f"{path}: unreadable model card ({exc})") from None
        card = parse_card(raw, path)
        if self.kind is not None and card.kind != self.kind:
            raise ModelUnavailable(
                f"{path}: a {card.kind} model card in a registry of {self.kind} models"
            )
        return card

    def duration_card(self, version: str) -> DurationCard:
        """The card of ``version``, which must be a duration model's."""
        card = self.card(version)
        if not isinstance(card, DurationCard):
            raise ModelUnavailable(f"{self.root / version / CARD}: not a duration model card")
        return card

    def memory_card(self, version: str) -> MemoryCard:
        """The card of ``version``, which must be a memory model's."""
        card = self.card(version)
        if not isinstance(card, MemoryCard):
            raise ModelUnavailable(f"{self.root / version / CARD}: not a memory model card")
        return card

    def model_file(self, version: str, card: Card, role: str = "model") -> Path:
        """The path of ``card``'s file ``role``, checked against the card's checksum.
        Raises ``ModelUnavailable`` when it is missing or its content differs."""
        try:
            path = self.root / version / card.files[role]
        except KeyError:
            raise ModelUnavailable(
                f"{self.root / version / CARD}: the card lists no {role!r} file"
            ) from None
        if not path.is_file():
            raise ModelUnavailable(f"{path}: model file is missing")
        if card.sha256.get(role) != file_sha256(path):
            raise ModelUnavailable(
                f"{path}: model file is corrupt (its checksum differs from the card's)"
            )
        return path

    def listing(self) -> list[VersionSummary]:
        """One summary per version, oldest first: verdict, MAE against the best baseline,
        data. A version whose card cannot be read is listed as ``corrupt``."""
        try:
            champion = self.champion()
        except DeschedError:
            champion = None
        rows = []
        for version in self.versions():
            try:
                card = self.card(version)
            except DeschedError as exc:
                rows.append(
                    VersionSummary(version=version, champion=False, verdict=f"corrupt: {exc}")
                )
                continue
            rows.append(card.summary(version == champion))
        return rows
