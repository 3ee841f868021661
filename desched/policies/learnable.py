"""Learnable parameters: what a policy lets the bench learn, and the weights cards it loads.

A policy whose ``Params`` derive from ``LearnableParams`` declares in ``search`` the
parameters a learner may set (its *learnable keys*, ``search.keys``) and the space they are
searched in. The bench (``desched.bench.tuning``: Optuna and the REINFORCE agent), weights
cards, evaluation, the report and the demo read only this declaration, never a policy's name.

A learned setting is written as a *weights card* (``card.json``, ``desched.bench.weights``)
naming the policy and holding exactly its learnable keys; ``weights=FOLDER`` loads it when
the parameters are built, so the decision path never reads a file.

Contract for a learnable policy: it reads its parameters from ``self.params`` at every
decision (the REINFORCE agent swaps ``params`` between windows of simulated time).
"""

from __future__ import annotations

import itertools
import json
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from desched.errors import DeschedError
from desched.policies.base import PolicyParams

CARD_FILE = "card.json"


@dataclass(frozen=True, slots=True)
class Range:
    """One parameter, searched over ``[low, high]`` (log-uniform with ``log``); ``grid`` is
    the values the REINFORCE agent chooses among."""

    key: str
    low: float
    high: float
    grid: tuple[float, ...]
    log: bool = False

    @property
    def name(self) -> str:
        """The search coordinate's name: the parameter's own."""
        return self.key

    @property
    def keys(self) -> tuple[str, ...]:
        return (self.key,)

    def params(self, x: float) -> dict[str, float]:
        return {self.key: float(x)}

    def coordinate(self, params: Mapping[str, float]) -> float:
        return float(params[self.key])


@dataclass(frozen=True, slots=True)
class Simplex:
    """Two weights that only matter in ratio (a score invariant to scaling both), searched
    as one coordinate ``name`` in [0, 1]: ``keys[0] = x``, ``keys[1] = 1 - x``."""

    name: str
    keys: tuple[str, str]
    grid: tuple[float, ...]
    low: float = 0.0
    high: float = 1.0
    log: bool = False

    def params(self, x: float) -> dict[str, float]:
        return {self.keys[0]: float(x), self.keys[1]: 1.0 - float(x)}

    def coordinate(self, params: Mapping[str, float]) -> float:
        """``first / (first + second)``; 0.5 where both are 0."""
        a, b = float(params[self.keys[0]]), float(params[self.keys[1]])
        return a / (a + b) if a + b > 0 else 0.5


Dimension = Range | Simplex


@dataclass(frozen=True, slots=True)
class SearchSpace:
    """The learnable keys of a policy and where a learner searches them.

    ``dimensions`` are searched in order (Optuna suggests them in this order; the agent's
    action grid is the product of their ``grid``\\ s, first dimension outermost). ``starts``
    are partial parameter settings, over the defaults, that a search tries first, before the
    defaults themselves.
    """

    dimensions: tuple[Dimension, ...]
    starts: tuple[Mapping[str, float], ...] = ()

    @property
    def keys(self) -> tuple[str, ...]:
        """The learnable keys, in dimension order: exactly what a weights card holds."""
        return tuple(k for d in self.dimensions for k in d.keys)

    def params(self, coordinates: Mapping[str, float]) -> dict[str, float]:
        """Parameter values from search coordinates (``theta`` of a simplex, ...)."""
        out: dict[str, float] = {}
        for d in self.dimensions:
            out.update(d.params(coordinates[d.name]))
        return out

    def coordinates(self, params: Mapping[str, float]) -> dict[str, float]:
        """Search coordinates of parameter values (the inverse of ``params``)."""
        return {d.name: d.coordinate(params) for d in self.dimensions}

    def grid(self) -> list[dict[str, float]]:
        """Every combination of the dimensions' grids, as parameter values."""
        return [self.params({d.name: x for d, x in zip(self.dimensions, xs)})
                for xs in itertools.product(*(d.grid for d in self.dimensions))]

    def start_points(self, defaults: Mapping[str, float]) -> list[dict[str, float]]:
        """Coordinates a search tries first: each of ``starts`` over ``defaults``, then the
        defaults; duplicates dropped."""
        points: list[dict[str, float]] = []
        for start in (*self.starts, {}):
            point = self.coordinates({**defaults, **start})
            if point not in points:
                points.append(point)
        return points


def card_path(location: str | Path) -> Path:
    """``location/card.json`` for a folder, ``location`` itself for a file."""
    path = Path(location)
    return path if path.suffix == ".json" else path / CARD_FILE


def read_card_json(location: str | Path) -> tuple[Path, dict[str, Any]]:
    """The card file at ``location`` (its folder or the JSON file) and its JSON object; a
    missing or unreadable one is a ``DeschedError`` naming the file."""
    path = card_path(location)
    if not path.is_file():
        raise DeschedError(f"{path}: no weights card (expected a folder written by `desched tune`)")
    try:
        card = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DeschedError(f"{path}: not a readable weights card ({type(exc).__name__})") from None
    if not isinstance(card, dict):
        raise DeschedError(f"{path}: not a readable weights card (not a JSON object)")
    return path, card


def check_weight_values(path: Path, weights: Mapping[str, Any]) -> None:
    """Refuse a weight that is not a finite number >= 0."""
    for key, value in weights.items():
        # one exact comparison (ints and floats compare exactly): NaN, inf, negatives and
        # integers past a double's range all fail it
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not 0 <= value <= sys.float_info.max):
            shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
            raise DeschedError(f"{path}: weight {key!r} must be a finite number >= 0, "
                               f"got {shown}")


def card_weights(location: str | Path, keys: tuple[str, ...]) -> dict[str, float]:
    """The weights of the card at ``location`` for a policy whose learnable keys are ``keys``.

    Refuses a card learned for a policy with other keys (an ``ifs-counter`` card has a
    service weight that ``ifs-memoryless`` cannot honour, and the reverse lacks one).
    """
    path, card = read_card_json(location)
    weights = card.get("weights")
    if not isinstance(weights, dict) or set(weights) != set(keys):
        held = ", ".join(weights) if isinstance(weights, dict) and weights else "none"
        raise DeschedError(f"{path}: weights learned for {card.get('policy')!r} ({held}); "
                           f"this policy takes {', '.join(keys)}")
    check_weight_values(path, weights)
    return {k: float(weights[k]) for k in keys}


class LearnableParams(PolicyParams):
    """Parameters of a policy a learner may tune: ``search`` declares the learnable keys and
    their search space; ``weights`` loads them from a weights card.

    With ``weights`` set, the card's values fill the learnable keys when the model is built
    (so the fast and naive twins both get them, and the decision path never reads a file).
    An explicit value given along with ``weights`` must equal the card's (so a dumped model
    rebuilds itself); a different one is refused, as is a missing or corrupt card. A dump
    leaves ``weights`` out when no card was given and otherwise puts it last.
    """

    search: ClassVar[SearchSpace]

    weights: str | None = Field(
        None,
        description="folder (or card.json) of weights learned by `desched tune`; sets the "
        "learnable parameters of this policy from its card",
    )

    @classmethod
    def learnable_defaults(cls) -> dict[str, float]:
        """The default value of every learnable key, in ``search.keys`` order."""
        return {k: float(cls.model_fields[k].default) for k in cls.search.keys}

    @model_validator(mode="before")
    @classmethod
    def _load_card(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("weights") in (None, ""):
            return data
        location = str(data["weights"])
        loaded = card_weights(location, cls.search.keys)
        for key, value in loaded.items():
            given = data.get(key)
            if given is None:
                continue
            try:
                same = math.isclose(float(given), value, rel_tol=1e-12, abs_tol=0.0)
            except (TypeError, ValueError):
                same = False
            if not same:
                raise DeschedError(
                    f"parameter {key}={given} contradicts weights={location} ({key}={value}); "
                    "give one or the other"
                )
        return {**data, **loaded, "weights": location}

    @model_serializer(mode="wrap")
    def _weights_last(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Leave ``weights`` out of a dump when no card was given (run summaries then record
        the same parameters as before cards existed), and put it last otherwise."""
        data = handler(self)
        if isinstance(data, dict) and "weights" in data:
            location = data.pop("weights")
            if location is not None:
                data["weights"] = location
        return data


def learnable_keys(params: type[PolicyParams]) -> tuple[str, ...]:
    """The learnable keys of a policy's ``Params``; empty for one with none."""
    return params.search.keys if issubclass(params, LearnableParams) else ()
