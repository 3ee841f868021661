"""Documents to enrich: SROIE receipts on disk, and the ``document_ref`` of a task.

A task's ``document_ref`` is ``sroie:NNN`` (receipt NNN of the SROIE folder) or a path
relative to the worker's document root. A worker reads only files inside its root: a
reference that leaves it (``..``, an absolute path elsewhere, a symlink out) is refused, so a
tenant cannot make a worker read arbitrary files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from desched.errors import DeschedError
from desched.samples import sroie_dir

DEFAULT_SROIE = sroie_dir()
"""The checkout's ``data/samples/sroie`` (or ``$DESCHED_SAMPLES_DIR/sroie``)."""


class BadDocumentRef(DeschedError):
    """The reference is malformed or points outside the document root (not retryable)."""


@dataclass(frozen=True)
class Receipt:
    """One SROIE receipt: its OCR text (one line per box) and ground-truth key fields."""

    receipt_id: str
    text: str
    company: str
    date: str
    address: str
    total: str

    @property
    def ref(self) -> str:
        return f"sroie:{self.receipt_id}"


def load_sroie(root: Path = DEFAULT_SROIE, limit: int | None = None) -> list[Receipt]:
    """Receipts of ``root`` (``txt/NNN.txt`` with ``key/NNN.json``), in id order."""
    txt = root / "txt"
    if not txt.is_dir():
        raise DeschedError(f"{root}: no SROIE txt/ folder")
    out: list[Receipt] = []
    for path in sorted(txt.glob("*.txt"))[:limit]:
        key = json.loads((root / "key" / f"{path.stem}.json").read_text(encoding="utf-8"))
        out.append(
            Receipt(
                receipt_id=path.stem,
                text=path.read_text(encoding="utf-8"),
                company=str(key.get("company", "")),
                date=str(key.get("date", "")),
                address=str(key.get("address", "")),
                total=str(key.get("total", "")),
            )
        )
    return out


def resolve_ref(ref: str, root: Path) -> Path:
    """The file ``ref`` names inside ``root``; ``BadDocumentRef`` if it is not inside."""
    if ref.startswith("sroie:"):
        stem = ref[len("sroie:") :]
        if not (stem.isdigit() and len(stem) <= 6):
            raise BadDocumentRef(f"document_ref {ref!r}: expected sroie:<digits>")
        rel = Path("txt") / f"{stem}.txt"
    else:
        rel = Path(ref)
    base = root.resolve()
    path = (base / rel).resolve()
    if not path.is_relative_to(base):
        raise BadDocumentRef(f"document_ref {ref!r} is outside the document root")
    return path


def read_document(ref: str, root: Path, max_bytes: int = 1 << 20) -> str:
    """The text of ``ref`` (UTF-8, at most ``max_bytes``); ``BadDocumentRef`` when it is not
    a readable file inside ``root``."""
    path = resolve_ref(ref, root)
    if not path.is_file():
        raise BadDocumentRef(f"document_ref {ref!r}: no such document")
    with path.open("rb") as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise BadDocumentRef(f"document_ref {ref!r}: larger than {max_bytes} bytes")
    return data.decode("utf-8", errors="replace")
