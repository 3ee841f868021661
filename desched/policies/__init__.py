"""The policy registry: one line per policy; contract tests run over all of them."""

from __future__ import annotations

from pydantic import ValidationError

from desched.errors import DeschedError
from desched.policies.base import Policy, PolicyParams
from desched.policies.fair_sjf import FairSjf
from desched.policies.fifo import Fifo
from desched.policies.hrrn_predicted import HrrnPredicted
from desched.policies.ifs_counter import IfsCounter
from desched.policies.ifs_memoryless import IfsMemoryless
from desched.policies.ifs_predicted import IfsPredicted
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
        FairSjf,
        IfsCounter,
        SjfOracle,
        SjfPredicted,
        HrrnPredicted,
        IfsPredicted,
    )
}


def get_policy(name: str) -> type[Policy]:
    """The fast policy class registered as ``name``."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise DeschedError(
            f"unknown policy {name!r} (known: {', '.join(sorted(REGISTRY))})"
        ) from None


def parse_params(name: str, raw: dict[str, str] | None) -> PolicyParams:
    """Validate ``raw`` (strings from ``--param k=v`` or values) against the policy's model."""
    cls = get_policy(name)
    raw = dict(raw or {})
    known = cls.Params.model_fields
    for key in raw:
        if key not in known:
            listed = ", ".join(known) or "none"
            raise DeschedError(f"policy {name!r} has no parameter {key!r} (parameters: {listed})")
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

    Refuses a policy that reads a column the tasks lack (``predicted_s``).
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
    return impl(tasks, params)
