"""What the deployment judge holds back for the final verdict (issue 19), fixed before any run.

Two of the six bundled SWF logs and one DES scenario seed are never used to choose a default,
a grid or a rule: every tuning path of the bench (``desched.bench.lolo``, the judge's
``tune`` hook) leaves them out, and only ``desched judge --set held-back`` runs them, once,
for the verdict. They were chosen by the rule below before any result of issue 19 existed
(the rule reads only names, never a figure):

- the logs: the ``HELD_BACK_COUNT`` bundled logs with the smallest
  ``sha256("desched-holdout:" + log name)`` hex digest;
- the scenario seed: ``3 + int(sha256("desched-holdout:scenario-seed")) % 1000`` (seeds 1
  and 2 are the judge's test and training seeds, so the rule starts at 3).

The constants below are what the rule gives on the bundled logs; a test recomputes them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

SALT = "desched-holdout:"
HELD_BACK_COUNT = 2
HELD_BACK_LOGS: tuple[str, ...] = ("NASA-iPSC-1993-3.1-cln", "LLNL-Atlas-2006-2.1-cln")
"""The held-back bundled logs (``judge_cases.log_name`` of each file)."""
HELD_BACK_SCENARIO_SEED = 500
"""The held-back seed of the DES scenarios' test trace (the judge's own is 1, its model's 2)."""


def _digest(text: str) -> str:
    return hashlib.sha256((SALT + text).encode()).hexdigest()


def held_back_by_rule(log_names: Iterable[str], count: int = HELD_BACK_COUNT) -> tuple[str, ...]:
    """The ``count`` names with the smallest salted digest (module docstring), in that order."""
    return tuple(sorted(log_names, key=_digest)[:count])


def scenario_seed_by_rule() -> int:
    """The held-back scenario seed by the rule of the module docstring."""
    return 3 + int(_digest("scenario-seed"), 16) % 1000


def is_held_back(log_name: str) -> bool:
    """Whether ``log_name`` (a case name) is one of the held-back logs."""
    return log_name in HELD_BACK_LOGS


def development(names: Sequence[str]) -> list[str]:
    """``names`` without the held-back logs, order kept: what tuning may see."""
    return [n for n in names if not is_held_back(n)]
