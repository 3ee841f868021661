"""Today's scorer: the DES orchestrator's memoryless rule (DESIGN.md), by its registered name.

Every default that means "what the service runs today" (the bench's baseline and reference,
the fallback without a duration model, the CLI's defaults) is this one constant; the policy
registers under it (``desched.policies.ifs_memoryless``). No import here, so any layer and
any ``--help`` may read it for free.
"""

from __future__ import annotations

from typing import Final

TODAY_SCORER: Final = "ifs-memoryless"
"""``0.1 * normalised tenant backlog + 0.9 * normalised wait``, recomputed on every poll."""
