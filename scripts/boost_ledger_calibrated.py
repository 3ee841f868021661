"""``boost-ledger-rescue`` and ``boost-ledger-calibrated``: candidates for issue 19 (not
registered): ``boost-ledger`` whose labels each tenant's own completions correct. Run

    .venv/bin/python -m scripts.boost_ledger_calibrated --out data/judge-ledger-calibrated

to register both in this process and run ``desched judge --set dev --jobs 1`` on them beside
``boost-ledger`` (its own judge options may follow).

The study first (development logs only, the judge's cached test parts and ``boost-ledger``'s
outcomes in ``desched judge --set dev``): under ``boost-ledger`` Jain's index falls because a
few tenants keep a large mean bounded slowdown while the others gain, and those tenants' tasks
are mostly *over*-predicted, so they are never boosted and wait as under first-come order:
Sandia-Ross ``u24`` (381 test tasks, median duration 367 s, median prediction 14,972 s, mean
``ln(duration / p50)`` −1.84), ``u146`` (−0.59), ``u35`` (−0.79); SDSC-Par ``u19`` (−1.18),
LANL-CM5 ``u86`` (−1.77). ``boost-calibrated`` (``scripts/boost_calibrated.py``) corrected
only the other side (labels scaled up after overruns, never down) and broke more promises.

The rule, fixed and committed before its first run on any log (both variants):

- *Calibration.* Each tenant keeps ``ln(duration_s / m)`` of its last ``WINDOW = 16``
  completed tasks, ``m`` the task's label median (``predicted_p50_s``, or ``predicted_s``
  where that is missing or not positive; a non-finite or non-positive ``m`` or duration adds
  nothing). Its factor is ``k = exp(min(0, mean))`` in ``boost-ledger-rescue`` (labels only
  ever scaled *down*: a tenant whose tasks ran shorter than predicted gets its boost) and
  ``k = exp(mean)`` in ``boost-ledger-calibrated`` (both ways); 1 before any completion.
- *Where it applies.* A task's label ``(c, θ)`` is multiplied by its tenant's ``k`` at the
  moment it is labelled, as in ``boost-calibrated``: at its push (its boost), at its
  dispatch (the γ estimator's window and, here, the ledger's charge ``c + θ`` to the tenants
  it overtakes). Everything else is ``boost-ledger``'s at its defaults (``ALPHA = 1/2``,
  scale 10, the first-come lane at half the workers); the ledger's correction at completion
  is the real duration minus the charge, as there.
- *Expectation, written before the run.* Jain's index rises against ``boost-ledger`` on
  Sandia-Ross and SDSC-Par for ``boost-ledger-rescue``; LLNL-Thunder's Jain's index is
  not repaired (84 % of its sum of squares is ``u249``, one task: nothing to learn from);
  the tail may suffer where a boosted tenant's long task overtakes (the lane bounds it).

The real duration reaches the policies only in a completion record (``complete``);
``tests/test_boost_ledger_calibrated_script.py`` holds each to a naive twin that shares no
rule code with it and runs the poisoning check of ``tests/test_duration_withheld.py``.
State: ``boost-ledger``'s plus each tenant's window. Cost: ``boost-ledger``'s plus O(1) per
completion and per label.
"""

from __future__ import annotations

import math
from typing import ClassVar

from desched.policies.base import PolicyParams
from desched.policies.boost_ledger import BoostLedger, BoostLedgerNaive
from desched.policies.boost_predicted import (
    BoostEstimator,
    BoostEstimatorParams,
    naive_label,
    shifted_exponential,
)
from desched.trace import TaskTable
from scripts.boost_calibrated import CALIBRATION_WINDOW as WINDOW
from scripts.boost_calibrated import (
    Calibrated,
    Calibration,
    NaiveCalibrated,
    NaiveCalibratedHistory,
)

__all__ = ["VARIANTS", "WINDOW", "BoostLedgerCalibrated", "BoostLedgerCalibratedNaive",
           "BoostLedgerRescue", "BoostLedgerRescueNaive", "main"]


class Windows(Calibration):
    """``boost-calibrated``'s windows of log-ratios (the last ``WINDOW``, the same 16) with
    this module's factor: ``exp(min(0, mean))`` where ``down_only``, else ``exp(mean)``."""

    def __init__(self, tasks: TaskTable, down_only: bool) -> None:
        super().__init__(tasks)
        self.down_only = down_only

    def factor(self, tenant: int) -> float:
        window = self.ratios.get(tenant)
        if not window:
            return 1.0
        mean = self.sums[tenant] / len(window)
        return math.exp(min(0.0, mean) if self.down_only else mean)


class _Estimator(BoostEstimator):
    """``BoostEstimator`` whose labels are scaled by their tenant's factor."""

    def __init__(self, tasks: TaskTable, params: BoostEstimatorParams, windows: Windows) -> None:
        super().__init__(tasks, params)
        self.windows = windows

    def label(self, i: int) -> tuple[float, float]:
        t = self.tasks
        c, theta = shifted_exponential(t.predicted_s[i], t.predicted_p50_s[i],
                                       t.predicted_p90_s[i])
        k = self.windows.factor(t.tenant[i])
        return c * k, theta * k


class BoostLedgerRescue(Calibrated, BoostLedger):
    """``boost-ledger`` whose labels are scaled down by how much shorter its tenant's last 16
    tasks ran than predicted (module docstring)."""

    name = "boost-ledger-rescue"
    summary = ("boost-ledger; each tenant's labels scaled down by how much shorter than "
               "predicted its last 16 tasks ran")
    DOWN_ONLY: ClassVar[bool] = True

    def __init__(self, tasks: TaskTable, params: PolicyParams | None = None) -> None:
        super().__init__(tasks, params)
        self.calibration = Windows(self.tasks, self.DOWN_ONLY)
        self.estimator = _Estimator(self.tasks, self.params, self.calibration)


class BoostLedgerCalibrated(BoostLedgerRescue):
    """``boost-ledger`` whose labels are scaled both ways by its tenant's last 16 tasks'
    mean log-ratio of duration to prediction (module docstring)."""

    name = "boost-ledger-calibrated"
    summary = ("boost-ledger; each tenant's labels scaled by how far its last 16 tasks ran "
               "from their predictions, either way")
    DOWN_ONLY: ClassVar[bool] = False


# -- the naive twins: the calibration written again from the module docstring, on the naive
# -- twin of boost-ledger (sharing no code above) --------------------------------------------


class _NaiveHistory(NaiveCalibratedHistory):
    """``boost-calibrated``'s naive history (every log-ratio of a tenant in a plain list)
    with this module's factor: the mean of the last 16, clipped at 0 where ``down_only``."""

    def __init__(self, tasks: TaskTable, params: BoostEstimatorParams, down_only: bool) -> None:
        super().__init__(tasks, params)
        self.down_only = down_only

    def label_of(self, i: int) -> tuple[float, float]:
        c, theta = naive_label(self.tasks, i)
        last = self.overruns.get(self.tasks.tenant_names[self.tasks.tenant[i]], [])[-16:]
        if not last:
            return c, theta
        mean = math.fsum(last) / len(last)
        if self.down_only and mean > 0:
            mean = 0.0
        k = math.exp(mean)
        return c * k, theta * k


class BoostLedgerRescueNaive(NaiveCalibrated, BoostLedgerNaive):
    """Reference: ``boost-ledger``'s naive twin on ``_NaiveHistory`` (whose scaled label is
    also the ledger's charge: the twin charges ``est.label_of``)."""

    name = "boost-ledger-rescue"
    summary = BoostLedgerRescue.summary
    DOWN_ONLY: ClassVar[bool] = True

    def __init__(self, tasks: TaskTable, params: PolicyParams | None = None) -> None:
        super().__init__(tasks, params)
        self.history = _NaiveHistory(self.tasks, self.params, self.DOWN_ONLY)
        self.est = self.history


class BoostLedgerCalibratedNaive(BoostLedgerRescueNaive):
    name = "boost-ledger-calibrated"
    summary = BoostLedgerCalibrated.summary
    DOWN_ONLY: ClassVar[bool] = False


BoostLedgerRescue.naive = BoostLedgerRescueNaive
BoostLedgerCalibrated.naive = BoostLedgerCalibratedNaive

VARIANTS = (BoostLedgerRescue, BoostLedgerCalibrated)


def main(argv: list[str]) -> None:
    from desched.cli import cli
    from desched.policies import REGISTRY

    for cls in VARIANTS:
        REGISTRY[cls.name] = cls
    cli.main(["judge", "--set", "dev", "--jobs", "1", "--policies",
              "boost-ledger,boost-ledger-rescue,boost-ledger-calibrated", *argv])


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
