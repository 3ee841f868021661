"""The policy registry: one line per policy; contract tests run over all of them.

Everything else (the simulator, the service, the bench's tuning, evaluation, report and
demo) finds policies here and reads what they declare (``reads``, ``tenant_state``,
learnable ``Params``), never their names. Registry order is the order the report lists them.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from desched.errors import DeschedError
from desched.policies.base import Policy, PolicyParams
from desched.tables import markdown_table
from desched.today import TODAY_SCORER
from desched.trace import TaskTable

if TYPE_CHECKING:
    from desched.policies.learnable import LearnableParams


class Registry(MutableMapping[str, type[Policy]]):
    """Policy name -> fast class, in registry order. Each built-in policy's module is imported
    the first time its class is asked for, so a command that runs one policy (``desched
    simulate``) loads that one's module and not fifteen; names, order and membership need no
    import. ``REGISTRY[name] = cls`` registers a class (a script's candidate, a test's toy)."""

    def __init__(self, where: dict[str, str]) -> None:
        self._entries: dict[str, type[Policy] | str] = dict(where)

    def __getitem__(self, name: str) -> type[Policy]:
        entry = self._entries[name]
        if isinstance(entry, str):
            module, _, attr = entry.partition(":")
            entry = getattr(importlib.import_module(f"desched.policies.{module}"), attr)
            assert isinstance(entry, type) and issubclass(entry, Policy) and entry.name == name
            self._entries[name] = entry
        return entry

    def __setitem__(self, name: str, cls: type[Policy]) -> None:
        self._entries[name] = cls

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries


REGISTRY = Registry({
    "fifo": "fifo:Fifo",
    "ifs-memoryless": "ifs_memoryless:IfsMemoryless",
    "round-robin": "round_robin:RoundRobin",
    "vtc": "vtc:Vtc",
    "ifs-counter": "ifs_counter:IfsCounter",
    "sjf-oracle": "sjf_oracle:SjfOracle",
    "sjf-predicted": "sjf_predicted:SjfPredicted",
    "hrrn-predicted": "hrrn_predicted:HrrnPredicted",
    "ifs-predicted": "ifs_predicted:IfsPredicted",
    "fair-sjf": "fair_sjf:FairSjf",
    "guarded-sjf": "guarded_sjf:GuardedSjf",
    "boost-predicted": "boost_predicted:BoostPredicted",
    "boost-now": "boost_now:BoostNow",
    "fair-boost": "fair_boost:FairBoost",
    "boost-lanes": "boost_lanes:BoostLanes",
    "boost-ledger": "boost_ledger:BoostLedger",
    "fsp-predicted": "fsp_predicted:FspPredicted",
})


RECOMMENDED = "boost-now"
"""The policy to deploy where a duration model is loaded: the live service's default when no
policy is recorded, and the report's "deployed default". It follows the deployment judge's
recommendation on the development logs by issue 19's rule (``desched judge --set dev``,
``desched.bench.rule``, docs/deploy-policy.md) among the policies that keep the decision-cost
targets: the rule ranks ``boost-now`` first (4 of 6 workloads, 14 of 18 promises, against
``boost-predicted``'s 12). It became the default on 2026-12-08 with its amortised re-keying
(a queue deeper than 4,096 re-keyed at most once per ``q / 16`` dispatches): 5.7 µs per
decision on the 100k-task burst (target 10 µs; 12.8 µs re-keying at every move of γ), with
the adoption criteria committed before the run and the held-back logs confirming it (12 of
12 promises, as ``boost-predicted``). ``boost-predicted`` was the default before, and
``boost-ledger`` under the earlier, leaky predictions; change it only with a judge run that
recommends another."""
WITHOUT_PREDICTION = TODAY_SCORER
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


README_BEGIN = "<!-- policy table: generated by `desched policies --markdown`; do not edit -->"
README_END = "<!-- end of policy table -->"


def registry_markdown() -> str:
    """The README's policy table, one row per registered policy in registry order: name,
    rule (``summary``), the task columns it reads besides tenant and submit time, its state
    (``tenant_state``) and its parameters with their defaults. ``tests/test_contributing.py``
    keeps the README's copy (between ``README_BEGIN`` and ``README_END``) equal to it."""
    rows: list[list[str]] = []
    for name, cls in REGISTRY.items():
        fields = cls.Params.model_fields
        params = ", ".join(f"`{k}={f.default}`" for k, f in fields.items()
                           if k != "weights") or "none"
        if "weights" in fields:
            params += ", `weights=` (a learned card)"
        reads = ", ".join([*(f"`{c}`" for c in sorted(cls.reads)),
                           *(f"`{c}` where given" for c in sorted(cls.optional_reads))]) or "-"
        if cls.clairvoyant():
            reads += " (clairvoyant bound)"
        state = ", ".join(sorted(cls.tenant_state)) or "-"
        rows.append([f"`{name}`", cls.summary, reads, state, params])
    return markdown_table(["policy", "rule", "reads", "state", "parameters (defaults)"],
                          rows) + "\n"


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
    from desched.policies.learnable import learnable_keys

    return {n: cls for n, cls in REGISTRY.items() if learnable_keys(cls.Params)}


def learnable_params(name: str) -> type[LearnableParams]:
    """The ``Params`` of registered policy ``name``, refused unless it has learnable keys."""
    from desched.policies.learnable import LearnableParams

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
    from desched.policies.learnable import check_weight_values, learnable_keys, read_card_json

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
    # a Params class that is learnable was defined after its module imported ``learnable``;
    # where that module is not loaded, no Params is learnable (and it need not be loaded)
    learnable = sys.modules.get("desched.policies.learnable")
    raw = dict(raw or {})
    known = cls.Params.model_fields
    for key in raw:
        if key not in known:
            listed = ", ".join(known) or "none"
            raise DeschedError(f"policy {name!r} has no parameter {key!r} (parameters: {listed})")
    if (learnable is not None and issubclass(cls.Params, learnable.LearnableParams)
            and raw.get("weights") not in (None, "")):
        check_card(str(raw["weights"]))
    try:
        return cls.Params(**raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise DeschedError(f"policy {name!r}: parameter {where!r}: {err['msg']}") from None


def check_reads(name: str, has_predictions: bool) -> None:
    """Refuse policy ``name`` where it reads ``predicted_s`` and the tasks lack it."""
    if "predicted_s" in get_policy(name).reads and not has_predictions:
        raise DeschedError(
            f"policy {name!r} ranks on 'predicted_s', which the trace lacks or has NaN in "
            "(run `desched predict` first)"
        )


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
    check_reads(name, tasks.has_predictions)
    impl = cls.naive if naive else cls
    return impl(tasks if impl.clairvoyant() else tasks.without_durations(), params)
