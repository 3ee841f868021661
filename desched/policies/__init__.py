"""The policy registry: one line per policy; contract tests run over all of them.

Everything else (the simulator, the service, the bench's tuning, evaluation, report and
demo) finds policies here and reads what they declare (``reads``, ``tenant_state``,
learnable ``Params``), never their names. Registry order is the order the report lists them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from desched.errors import DeschedError
from desched.policies.base import Policy, PolicyParams
from desched.policies.boost_predicted import BoostPredicted
from desched.policies.fair_boost import FairBoost
from desched.policies.fair_sjf import FairSjf
from desched.policies.fifo import Fifo
from desched.policies.guarded_sjf import GuardedSjf
from desched.policies.hrrn_predicted import HrrnPredicted
from desched.policies.ifs_counter import IfsCounter
from desched.policies.ifs_memoryless import IfsMemoryless
from desched.policies.ifs_predicted import IfsPredicted
from desched.policies.learnable import (
    LearnableParams,
    check_weight_values,
    learnable_keys,
    read_card_json,
)
from desched.policies.round_robin import RoundRobin
from desched.policies.sjf_oracle import SjfOracle
from desched.policies.sjf_predicted import SjfPredicted
from desched.policies.vtc import Vtc
from desched.trace import TaskTable

REGISTRY: dict[str, type[Policy]] = {
    p.name: p
    for p in (
        Fifo,
        IfsMemoryless,
        RoundRobin,
        Vtc,
        IfsCounter,
        SjfOracle,
        SjfPredicted,
        HrrnPredicted,
        IfsPredicted,
        FairSjf,
        GuardedSjf,
        BoostPredicted,
        FairBoost,
    )
}


RECOMMENDED = "guarded-sjf"
"""The policy to deploy where a duration model is loaded: the live service's default when no
policy is recorded, and the report's "deployed default". It is the recommendation of the
deployment judge (``desched judge``, docs/deploy-policy.md); change it only with a judge run
that recommends another."""
WITHOUT_PREDICTION = "ifs-memoryless"
"""The service's default when no duration model is loaded: a policy that reads no
``predicted_s`` (today's scorer)."""


def default_policy(has_predictor: bool) -> tuple[str, str]:
    """The policy a service runs when none is recorded, and why: ``RECOMMENDED`` where it can
    run (a duration model is loaded, or it reads no prediction), else ``WITHOUT_PREDICTION``."""
    if has_predictor or "predicted_s" not in REGISTRY[RECOMMENDED].reads:
        return RECOMMENDED, (f"a duration model is loaded: the recommended policy "
                             f"{RECOMMENDED!r} (docs/deploy-policy.md)")
    return WITHOUT_PREDICTION, (f"no duration model is loaded: {WITHOUT_PREDICTION!r}, which "
                                "needs no prediction (train one and set "
                                "DESCHED_PREDICTOR_REGISTRY to run the recommended "
                                f"{RECOMMENDED!r})")


def get_policy(name: str) -> type[Policy]:
    """The fast policy class registered as ``name``."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise DeschedError(
            f"unknown policy {name!r} (known: {', '.join(sorted(REGISTRY))})"
        ) from None


def learnable_policies() -> dict[str, type[Policy]]:
    """The registered policies whose ``Params`` declare learnable keys, in registry order."""
    return {n: cls for n, cls in REGISTRY.items() if learnable_keys(cls.Params)}


def learnable_params(name: str) -> type[LearnableParams]:
    """The ``Params`` of registered policy ``name``, refused unless it has learnable keys."""
    params = get_policy(name).Params
    if not issubclass(params, LearnableParams):
        raise DeschedError(f"policy {name!r} has no learnable parameters (learnable: "
                           f"{', '.join(learnable_policies()) or 'none'})")
    return params


def check_card(location: str | Path) -> dict[str, Any]:
    """The weights card at ``location`` (its folder or the JSON file) as JSON, checked: its
    ``policy`` is a registered learnable policy and its ``weights`` hold exactly that
    policy's learnable keys, each a finite number >= 0. A missing or corrupt card is a
    ``DeschedError`` naming the file."""
    path, card = read_card_json(location)
    policy, weights = card.get("policy"), card.get("weights")
    learnable = learnable_policies()
    if not isinstance(policy, str) or policy not in learnable:
        raise DeschedError(f"{path}: 'policy' must be one of {', '.join(learnable)}, "
                           f"got {policy!r}")
    keys = learnable_keys(learnable[policy].Params)
    if not isinstance(weights, dict) or set(weights) != set(keys):
        raise DeschedError(f"{path}: 'weights' must hold exactly {', '.join(keys)} for {policy}")
    check_weight_values(path, weights)
    return card


def parse_params(name: str, raw: dict[str, str] | None) -> PolicyParams:
    """Validate ``raw`` (strings from ``--param k=v`` or values) against the policy's model;
    a ``weights`` card is checked (``check_card``) before its values are loaded."""
    cls = get_policy(name)
    raw = dict(raw or {})
    known = cls.Params.model_fields
    for key in raw:
        if key not in known:
            listed = ", ".join(known) or "none"
            raise DeschedError(f"policy {name!r} has no parameter {key!r} (parameters: {listed})")
    if issubclass(cls.Params, LearnableParams) and raw.get("weights") not in (None, ""):
        check_card(str(raw["weights"]))
    try:
        return cls.Params(**raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise DeschedError(f"policy {name!r}: parameter {where!r}: {err['msg']}") from None


def make_policy(
    name: str,
    tasks: TaskTable,
    params: dict[str, str] | PolicyParams | None = None,
    *,
    naive: bool = False,
) -> Policy:
    """Instantiate policy ``name`` over ``tasks``; ``naive`` picks the reference twin.

    Refuses a policy that reads a column the tasks lack (``predicted_s``). A policy that is
    not clairvoyant (``Policy.clairvoyant``) is given ``tasks.without_durations()``.
    """
    cls = get_policy(name)
    if not isinstance(params, PolicyParams):
        params = parse_params(name, params)
    if "predicted_s" in cls.reads and not tasks.has_predictions:
        raise DeschedError(
            f"policy {name!r} ranks on 'predicted_s', which the trace lacks or has NaN in "
            "(run `desched predict` first)"
        )
    impl = cls.naive if naive else cls
    return impl(tasks if impl.clairvoyant() else tasks.without_durations(), params)
