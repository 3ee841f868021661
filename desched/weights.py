"""Learned scorer weights on disk: a folder under ``models/weights/`` with ``card.json``.

The card holds the policy the weights were learned for, the weights themselves (exactly the
parameters that policy takes from a card, ``WEIGHT_KEYS``), how they were learned (learner,
objective, the training and held-out traces) and the held-out verdict. ``ifs-memoryless`` and
``ifs-counter`` load it at construction through their ``weights`` parameter; nothing here runs
on the decision path.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from desched.errors import DeschedError

CARD_FILE = "card.json"

WEIGHT_KEYS: dict[str, tuple[str, ...]] = {
    "ifs-memoryless": ("w_backlog", "w_wait"),
    "ifs-counter": ("w_backlog", "w_wait", "w_service", "half_life_s"),
}
"""Policy name -> the parameters a weights card sets for it."""


def card_path(location: str | Path) -> Path:
    """``location/card.json`` for a folder, ``location`` itself for a file."""
    path = Path(location)
    return path if path.suffix == ".json" else path / CARD_FILE


def read_card(location: str | Path) -> dict[str, Any]:
    """The card at ``location`` (its folder or the JSON file), checked for a ``policy`` and
    finite, non-negative ``weights``. A missing or corrupt card is a ``DeschedError`` naming
    the file."""
    path = card_path(location)
    if not path.is_file():
        raise DeschedError(f"{path}: no weights card (expected a folder written by `desched tune`)")
    try:
        card = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DeschedError(f"{path}: not a readable weights card ({type(exc).__name__})") from None
    if not isinstance(card, dict):
        raise DeschedError(f"{path}: not a readable weights card (not a JSON object)")
    policy = card.get("policy")
    weights = card.get("weights")
    if policy not in WEIGHT_KEYS:
        raise DeschedError(f"{path}: 'policy' must be one of {', '.join(WEIGHT_KEYS)}, "
                           f"got {policy!r}")
    if not isinstance(weights, dict) or set(weights) != set(WEIGHT_KEYS[policy]):
        raise DeschedError(f"{path}: 'weights' must hold exactly "
                           f"{', '.join(WEIGHT_KEYS[policy])} for {policy}")
    for key, value in weights.items():
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not math.isfinite(value) or value < 0):
            raise DeschedError(f"{path}: weight {key!r} must be a finite number >= 0, "
                               f"got {value!r}")
    return card


def card_weights(location: str | Path, keys: tuple[str, ...]) -> dict[str, float]:
    """The weights of the card at ``location`` for a policy that takes ``keys`` from a card.

    Refuses a card learned for a policy that takes other keys (an ``ifs-counter`` card has a
    service weight that ``ifs-memoryless`` cannot honour, and the reverse lacks one).
    """
    card = read_card(location)
    weights = card["weights"]
    if set(weights) != set(keys):
        raise DeschedError(
            f"{card_path(location)}: weights learned for {card['policy']!r} "
            f"({', '.join(weights)}); this policy takes {', '.join(keys)}"
        )
    return {k: float(weights[k]) for k in keys}


def write_card(folder: str | Path, card: dict[str, Any]) -> Path:
    """Write ``card`` as ``folder/card.json`` after checking it reads back; returns the path."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    path = out / CARD_FILE
    path.write_text(json.dumps(card, indent=2, allow_nan=True, default=str) + "\n")
    read_card(out)
    return path
