"""The policy host: installs the live policy, persists its per-tenant state, restores it.

The live policy is the one recorded in the ``config`` table (``Store.set_policy``; the
scheduler records the one it was started with). The host builds it over the scheduler's task
table (the very policy objects the simulator drives), switches to a newly recorded one, and
saves and restores its per-tenant state (VTC's counters, ifs-counter's decayed service, the
round-robin ring) so that a restart does not forgive a flooding tenant. It does no I/O: the
scheduler reads the config rows and hands them over, and queues the ``Write`` that
``state_write`` returns; it calls the host under its lock.

Invariants:

- With no policy recorded, the host runs ``default``: ``desched.policies.RECOMMENDED`` when a
  duration predictor is loaded, else a policy that needs no prediction (``default_reason``
  says which and why; the scheduler logs it at start and ``/healthz`` reports it).
- A policy that ranks on ``predicted_s`` is installed only with a duration predictor loaded;
  otherwise (or when unknown, or its parameters are bad) it is refused, the running policy
  stays, and ``error`` says why. A refused config row is not tried again until it changes.
- Saved state is applied only to the same policy with the same parameters
  (``PolicySpec.identity``); a switch starts with fresh state. It is saved at most every
  ``state_save_s`` and only when it changed, so after a crash it is at most that old.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from desched.errors import DeschedError
from desched.policies import (
    WITHOUT_PREDICTION,
    default_policy,
    get_policy,
    make_policy,
    parse_params,
)
from desched.policies.base import Policy
from desched.service.store import Write, policy_state_write
from desched.trace import TaskTable

logger = logging.getLogger("desched.service")

DEFAULT_POLICY = WITHOUT_PREDICTION
"""The policy that runs without a duration model when none is recorded (``default_policy``)."""


@dataclass(frozen=True, slots=True)
class PolicySpec:
    """A policy to run: its name, its parameters, and the config row they were read from
    (None for the default, which nobody recorded)."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)
    config: str | None = None

    def identity(self) -> str:
        """What saved state is tied to: name and parameters, as canonical JSON."""
        return json.dumps({"name": self.name, "params": self.params}, sort_keys=True, default=str)

    @classmethod
    def recorded(cls, config: str | None, default: str = DEFAULT_POLICY) -> PolicySpec:
        """The policy of the config row ``config`` (``default`` when there is none); a row
        that cannot be read is a ``DeschedError``."""
        if config is None:
            return cls(default)
        try:
            value = json.loads(config)
            return cls(str(value["name"]), dict(value.get("params") or {}), config)
        except (ValueError, KeyError, TypeError):
            raise DeschedError(
                f"the recorded live policy is unreadable: {config[:200]!r}"
            ) from None


class PolicyHost:
    """Holds the live ``policy`` and the ``spec`` it was built from; see the module docstring."""

    def __init__(self, *, has_predictor: bool, state_save_s: float) -> None:
        self.has_predictor = has_predictor
        self.state_save_s = state_save_s
        name, self.default_reason = default_policy(has_predictor)
        self.default = PolicySpec(name)
        """The policy run when none is recorded: the recommended one with a duration model,
        one that needs no prediction without (``desched.policies.default_policy``)."""
        self.spec = self.default
        self.policy: Policy
        self.error: str | None = None
        """Why the last recorded policy was refused, until one is installed."""
        self.rejected: str | None = None
        self._saved: tuple[float, Any] = (float("-inf"), None)
        self._installed: tuple[TaskTable, list[int], float]
        """What the policy was last installed over (tasks, queue, time): a failed restore
        installs it again."""

    def check(self, name: str, params: dict[str, Any] | None = None) -> None:
        """Refuse (``DeschedError``) a policy that cannot run here; with ``params``, check
        them too."""
        if params is not None:
            parse_params(name, params)
        if "predicted_s" in get_policy(name).reads and not self.has_predictor:
            raise DeschedError(
                f"policy {name!r} ranks on 'predicted_s' but no duration predictor is loaded "
                "(train one, or point DESCHED_PREDICTOR_REGISTRY at a registry with a champion)"
            )

    def install(
        self, spec: PolicySpec, tasks: TaskTable, queued: Iterable[int], now: float
    ) -> None:
        """Build ``spec``'s policy over ``tasks`` and push every queued position, in order.
        The running policy stays if this raises."""
        self.check(spec.name)
        policy = make_policy(spec.name, tasks, spec.params)
        order = sorted(queued)
        for i in order:
            policy.push(i, now)
        self.policy = policy
        self.spec = spec
        self._installed = (tasks, order, now)

    def model_loaded(self) -> None:
        """A duration model serves now (the registry's champion loaded after the start): the
        policies that rank on predictions may run, and a recorded one refused for want of a
        model is tried again at the next refresh. The default stays the one chosen at start."""
        if not self.has_predictor:
            self.has_predictor = True
            self.rejected = None

    def refuse(self, config: str | None, error: str) -> None:
        """Remember that the config row ``config`` was refused, and why."""
        self.rejected = config
        self.error = error

    def is_new(self, config: str | None) -> bool:
        """Whether ``config`` records a policy neither running nor refused already."""
        return config is not None and config not in (self.spec.config, self.rejected)

    def switch(self, config: str, tasks: TaskTable, queued: Iterable[int], now: float) -> bool:
        """Install the policy ``config`` records; whether it was (else ``error`` says why)."""
        try:
            self.install(PolicySpec.recorded(config), tasks, queued, now)
        except DeschedError as exc:
            self.refuse(config, str(exc))
            return False
        self.error = None
        return True

    def state_write(self, now: float, force: bool = False) -> Write | None:
        """The write saving the policy's per-tenant state (``Policy.state``), or None when it
        is not due (less than ``state_save_s`` since the last save, unless ``force``) or has
        not changed."""
        last_at, last_state = self._saved
        if not force and now - last_at < self.state_save_s:
            return None
        state = self.policy.state()
        self._saved = (now, state)
        if state is None or state == last_state:
            return None
        value = json.dumps(
            {"policy": self.spec.identity(), "saved_at": now, "state": state},
            sort_keys=True,
            allow_nan=False,
        )
        return policy_state_write(value)

    def restore(self, saved: str | None, now: float) -> bool:
        """Give the freshly installed policy the state ``saved`` (a ``state_write`` value) if
        an earlier run of the same policy and parameters saved it; whether it did. A state
        that does not apply is ignored with a warning."""
        if saved is None:
            return False
        try:
            record = json.loads(saved, parse_float=_finite, parse_constant=_no_constant)
            if record["policy"] != self.spec.identity():
                return False
        except (ValueError, KeyError, TypeError) as exc:
            logger.warning("saved policy state not restored: %s", exc)
            return False
        try:
            self.policy.restore(record["state"])
        except (ValueError, KeyError, TypeError, ArithmeticError) as exc:
            # the policy may be half restored: build it afresh over the same queue
            logger.warning("saved policy state not restored: %s", exc)
            self.install(self.spec, *self._installed)
            return False
        self._saved = (now, record["state"])
        return True


def _finite(text: str) -> float:
    """A number of a saved state: finite, as every state is saved (JSON without NaN)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"a number out of range in the saved state: {text[:40]}")
    return value


def _no_constant(text: str) -> float:
    raise ValueError(f"{text} in the saved state (states are saved without NaN or Infinity)")
