"""The project's own sample data: ``data/samples/`` of the checkout (or ``DESCHED_SAMPLES_DIR``).

The demo, the live demo and the tests read the real SWF logs (``traces/``) and the SROIE
receipts (``sroie/``) from here, never from a path outside the checkout. Each folder has a
SOURCE.md (origin, licence or citation request, what was changed).
"""

from __future__ import annotations

import os
from pathlib import Path

from desched.errors import DeschedError

CHECKOUT = Path(__file__).resolve().parents[1]
"""The folder holding the ``desched`` package: the checkout, for an editable install."""


def samples_dir() -> Path:
    """``$DESCHED_SAMPLES_DIR`` if set, else the checkout's ``data/samples``."""
    override = os.environ.get("DESCHED_SAMPLES_DIR")
    return Path(override) if override else CHECKOUT / "data" / "samples"


def traces_dir() -> Path:
    """The folder of the bundled SWF logs."""
    return samples_dir() / "traces"


def sroie_dir() -> Path:
    """The folder of the bundled SROIE receipts (``txt/`` and ``key/``)."""
    return samples_dir() / "sroie"


def require(path: Path, what: str) -> Path:
    """``path`` if it exists, else a one-line error naming it and how to point elsewhere."""
    if not path.exists():
        raise DeschedError(
            f"{path}: no {what} (the checkout's data/samples; set DESCHED_SAMPLES_DIR "
            "or pass a path)")
    return path
