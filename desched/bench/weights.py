"""Learned weights on disk: a folder under ``models/weights/`` with ``card.json`` (``WeightsCard``).

The card holds the policy the weights were learned for, the weights themselves (exactly that
policy's learnable keys, ``desched.policies.learnable``), how they were learned (learner,
objective, the training and held-out traces) and the held-out verdict. A learnable policy
loads it at construction through its ``weights`` parameter; nothing here runs on the
decision path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, SerializerFunctionWrapHandler, ValidationError, model_serializer

from desched.bench.evaluate import Interval
from desched.errors import DeschedError
from desched.policies import check_card
from desched.policies.learnable import CARD_FILE, card_path
from desched.records import Record, json_text

Verdict = Literal["beats", "tie", "worse"]


class ObjectiveText(Record):
    """The objective a card's weights were learned for, in words and by its weight."""

    text: str
    fairness_weight: float


class Reference(Record):
    """The scorer ``J`` is measured against: a policy at its default learnable weights."""

    policy: str
    weights: dict[str, float]


class CellInfo(Record):
    """One trace of a split: its spec, seed, content fingerprint and size."""

    trace: str
    seed: int
    fingerprint: str
    tasks: int


class Split(Record):
    """The training and held-out traces, and the rule that keeps them disjoint."""

    rule: str
    train: list[CellInfo]
    heldout: list[CellInfo]


class CurvePoint(Record):
    """One step of a learning curve: ``J`` on the training traces, the best so far and, for
    a search, the parameters it tried (extra keys, in the order the learner wrote them)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    step: int
    value: float
    best: float

    def params(self) -> dict[str, Any]:
        """The parameters this step tried (none for the agent's iterations)."""
        return dict(self.model_extra or {})


class HeldoutVerdict(Record):
    """One candidate on a set of held-out traces, paired against the reference on the
    same traces: ``J`` and the differences as intervals over seeds, and the verdict
    (``beats`` when the interval of ``J - 1`` lies below 0, ``worse`` when above)."""

    seeds: list[int]
    J: Interval
    J_minus_1: Interval
    ref_bsld: Interval
    bsld: Interval
    d_bsld: Interval
    d_bsld_pct: Interval
    ref_jain: Interval
    d_jain: Interval
    d_max_lag_s: Interval
    verdict: Verdict


class Heldout(Record):
    """Per held-out trace spec and over all of them: candidate label -> verdict."""

    by_workload: dict[str, dict[str, HeldoutVerdict]]
    overall: dict[str, HeldoutVerdict]


class WeightsCard(Record):
    """``card.json`` of a weights folder written by ``desched tune``. ``settings`` and
    ``learner_details`` (and ``agent``, present for the REINFORCE learner) are what the
    learner recorded, free-form. A dump leaves ``agent`` out when there is none."""

    name: str
    policy: str
    weights: dict[str, float]
    learner: str
    objective: ObjectiveText
    reference: Reference
    workers: int
    settings: dict[str, Any]
    split: Split
    train_objective: float
    learning_curve: list[CurvePoint]
    learner_seconds: float
    learner_details: dict[str, Any]
    heldout: Heldout
    created: str
    command: str | None
    agent: dict[str, Any] | None = None

    @model_serializer(mode="wrap")
    def _omit_no_agent(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict) and data.get("agent") is None:
            data.pop("agent", None)
        return data


def read_card(location: str | Path) -> WeightsCard:
    """The card at ``location`` (its folder or the JSON file): its policy a registered
    learnable one, its weights exactly that policy's learnable keys (``check_card``), the
    rest as ``WeightsCard``. A missing or corrupt card is a ``DeschedError`` naming the file."""
    raw = check_card(location)
    try:
        return WeightsCard.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise DeschedError(f"{card_path(location)}: not a card written by `desched tune` "
                           f"({where}: {err['msg']})") from None


def write_card(folder: str | Path, card: WeightsCard) -> Path:
    """Write ``card`` as ``folder/card.json`` after checking it reads back; returns the path."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    path = out / CARD_FILE
    path.write_text(json_text(card.model_dump(), indent=2, default=str) + "\n")
    read_card(out)
    return path
