"""``boost-calibrated``, a candidate judged and rejected (docs/deploy-policy.md, "What would
close the gap"): γ-Boost on predicted sizes whose labels each tenant's own overruns correct
(``boost-predicted`` plus one rule, fixed before it was judged). Not registered: run

    .venv/bin/python -m scripts.boost_calibrated --out data/judge-calibrated

to register it in this process and run ``desched judge --set dev --jobs 1`` on it beside
``boost-predicted`` (its own judge options may follow).

``boost-predicted`` trusts every label as the model gives it; on the development logs the harm
it does to tenants comes from a few tenants' long tasks predicted short, which overtake and
then block (docs/deploy-policy.md, "What would close the gap"). A completion tells at once
how far a task ran past its prediction. Here each tenant keeps the log-ratios
``ln(duration_s / median)`` of its last ``CALIBRATION_WINDOW`` completed tasks (``median`` the
task's label median: ``predicted_p50_s``, or ``predicted_s`` where that is absent or not
positive); its factor is ``k = exp(max(0, mean of them))`` (1 before any completion). A task's
label ``(c, θ)`` (``boost_predicted.shifted_exponential``) is scaled by its tenant's ``k`` at
the moment it is labelled: at its push, for its boost, and at its dispatch, for the
estimator's window. A tenant whose tasks ran long gets labels that long, so smaller boosts
(nearer first-come) and a γ that counts them; a tenant whose tasks ran short keeps the
model's labels (over-estimates hurt only the task itself, so they are never rewarded). The
window (16) and the one-sided mean were fixed before the first run; ``scale`` and the other
estimator settings are ``boost-predicted``'s.

Everything else (the estimator, the boost, the sympathy guard, the heaps) is
``boost-predicted``'s; the state adds each tenant's window of log-ratios.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from desched.policies.base import PolicyParams
from desched.policies.boost_predicted import (
    BoostEstimator,
    BoostParams,
    BoostPredicted,
    BoostPredictedNaive,
    NaiveBoostHistory,
    naive_label,
    shifted_exponential,
)
from desched.trace import TaskTable

CALIBRATION_WINDOW = 16
"""Completed tasks per tenant whose log-ratios give its factor (fixed before any run)."""


class Calibration:
    """Each tenant's last ``CALIBRATION_WINDOW`` log-ratios of duration to label median, and
    its factor ``exp(max(0, mean))``. O(1) per completion and per factor."""

    def __init__(self, tasks: TaskTable) -> None:
        self.tasks = tasks
        self.ratios: dict[int, deque[float]] = {}
        self.sums: dict[int, float] = {}

    def median(self, i: int) -> float:
        t = self.tasks
        p50 = t.predicted_p50_s[i]
        return p50 if p50 > 0 and math.isfinite(p50) else t.predicted_s[i]

    def observe(self, i: int, duration_s: float) -> None:
        m = self.median(i)
        if not (m > 0 and math.isfinite(m) and duration_s > 0 and math.isfinite(duration_s)):
            return
        tenant = self.tasks.tenant[i]
        window = self.ratios.get(tenant)
        if window is None:
            window = self.ratios[tenant] = deque()
        window.append(math.log(duration_s / m))
        if len(window) > CALIBRATION_WINDOW:
            window.popleft()
        # the sum is recomputed (not updated) so that it is exactly the window's: no drift
        self.sums[tenant] = math.fsum(window)

    def factor(self, tenant: int) -> float:
        window = self.ratios.get(tenant)
        if not window:
            return 1.0
        return math.exp(max(0.0, self.sums[tenant] / len(window)))

    def state(self) -> dict[str, Any]:
        names = self.tasks.tenant_names
        return {names[k]: list(self.ratios[k]) for k in sorted(self.ratios, key=names.__getitem__)}

    def restore(self, state: dict[str, Any]) -> None:
        self.ratios.clear()
        self.sums.clear()
        for name, values in state.items():
            k = self.tasks.tenant_code(name)
            window = deque(float(x) for x in values[-CALIBRATION_WINDOW:])
            if window:
                self.ratios[k] = window
                self.sums[k] = math.fsum(window)


class CalibratedEstimator(BoostEstimator):
    """``BoostEstimator`` whose labels are scaled by their tenant's factor."""

    def __init__(self, tasks: TaskTable, params: BoostParams, calibration: Calibration) -> None:
        super().__init__(tasks, params)
        self.calibration = calibration

    def label(self, i: int) -> tuple[float, float]:
        t = self.tasks
        c, theta = shifted_exponential(t.predicted_s[i], t.predicted_p50_s[i],
                                       t.predicted_p90_s[i])
        k = self.calibration.factor(t.tenant[i])
        return c * k, theta * k


class Calibrated:
    """What a policy with a ``calibration`` (a ``Calibration``) adds to its parent: each
    completion observed, the windows saved and restored with the parent's state."""

    calibration: Calibration

    def complete(self, i: int, now: float, duration_s: float) -> None:
        super().complete(i, now, duration_s)  # type: ignore[misc]
        self.calibration.observe(i, duration_s)

    def state(self) -> dict[str, Any] | None:
        state = super().state()  # type: ignore[misc]
        assert state is not None
        return {**state, "calibration": self.calibration.state()}

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)  # type: ignore[misc]
        self.calibration.restore(state.get("calibration", {}))


class BoostCalibrated(Calibrated, BoostPredicted):
    """γ-Boost on predicted sizes, each label scaled by its tenant's overrun factor (module
    docstring). Rule, guard, scores and cost: ``boost-predicted``'s, plus O(1) per
    completion. State: ``boost-predicted``'s and each tenant's window of log-ratios."""

    name = "boost-calibrated"
    summary = ("γ-Boost on predicted sizes, each tenant's labels scaled up by how far its "
               "last 16 tasks ran past their predictions")
    tenant_state = frozenset({"clock", "service"})

    def __init__(self, tasks: TaskTable, params: PolicyParams | None = None) -> None:
        super().__init__(tasks, params)
        self.calibration = Calibration(self.tasks)
        self.estimator = CalibratedEstimator(self.tasks, self.params, self.calibration)


# -- the naive twin: the calibration written again from the module docstring, on the naive
# -- twin of boost-predicted (sharing no code above) ----------------------------------------


class NaiveCalibratedHistory(NaiveBoostHistory):
    """``NaiveBoostHistory`` with every label multiplied by its tenant's factor, the factor
    from a plain list of all the tenant's log-ratios."""

    def __init__(self, tasks: TaskTable, params: BoostParams) -> None:
        super().__init__(tasks, params)
        self.overruns: dict[str, list[float]] = {}

    def label_of(self, i: int) -> tuple[float, float]:
        c, theta = naive_label(self.tasks, i)
        seen = self.overruns.get(self.tasks.tenant_names[self.tasks.tenant[i]], [])
        last = seen[-16:]
        if not last:
            return c, theta
        mean = math.fsum(last) / len(last)
        k = math.exp(mean) if mean > 0 else 1.0
        return c * k, theta * k

    def finished(self, i: int, duration_s: float) -> None:
        t = self.tasks
        med = t.predicted_s[i]
        if math.isfinite(t.predicted_p50_s[i]) and t.predicted_p50_s[i] > 0:
            med = t.predicted_p50_s[i]
        ok = [med > 0, math.isfinite(med), duration_s > 0, math.isfinite(duration_s)]
        if all(ok):
            name = t.tenant_names[t.tenant[i]]
            self.overruns.setdefault(name, []).append(math.log(duration_s / med))


class NaiveCalibrated:
    """What a naive twin with a ``history`` (a ``NaiveCalibratedHistory``) adds to its
    parent: each completion's log-ratio kept, the last 16 per tenant saved and restored."""

    history: NaiveCalibratedHistory

    def complete(self, i: int, now: float, duration_s: float) -> None:
        super().complete(i, now, duration_s)  # type: ignore[misc]
        self.history.finished(i, duration_s)

    def state(self) -> dict[str, Any] | None:
        state = super().state()  # type: ignore[misc]
        assert state is not None
        seen = self.history.overruns
        return {**state, "calibration": {k: seen[k][-16:] for k in sorted(seen) if seen[k]}}

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)  # type: ignore[misc]
        self.history.overruns = {k: [float(x) for x in v]
                                 for k, v in state.get("calibration", {}).items()}


class BoostCalibratedNaive(NaiveCalibrated, BoostPredictedNaive):
    """Reference: ``boost-predicted``'s naive twin on ``NaiveCalibratedHistory``."""

    name = "boost-calibrated"
    summary = BoostCalibrated.summary
    tenant_state = frozenset({"clock", "service"})

    def __init__(self, tasks: TaskTable, params: PolicyParams | None = None) -> None:
        super().__init__(tasks, params)
        self.history = NaiveCalibratedHistory(self.tasks, self.params)
        self.est = self.history


BoostCalibrated.naive = BoostCalibratedNaive


def main(argv: list[str]) -> None:
    from desched.cli import cli
    from desched.policies import REGISTRY

    REGISTRY[BoostCalibrated.name] = BoostCalibrated
    cli.main(["judge", "--set", "dev", "--jobs", "1",
              "--policies", "boost-predicted,boost-calibrated", *argv])


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
