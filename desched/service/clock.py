"""The service's time: epoch seconds that never decrease, not even across a restart.

Policies, leases and records see only this clock's ``now``; tests inject ``source``.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Clock:
    """Epoch seconds that never decrease, starting no lower than ``floor``."""

    def __init__(self, floor: float = 0.0, source: Callable[[], float] = time.time) -> None:
        self.source = source
        self.last = floor

    def raise_floor(self, floor: float) -> None:
        """Never answer below ``floor`` from now on (the latest time the database records)."""
        self.last = max(self.last, floor)

    def __call__(self) -> float:
        t = self.source()
        self.last = max(self.last, t)
        return self.last
