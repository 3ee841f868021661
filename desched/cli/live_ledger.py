"""What ``desched live-demo``'s submitters were told, and whether the service kept its word.

``SubmitLedger.submit`` sends one batch with an ``Idempotency-Key`` and retries it with the
same key after a 503 or 429 (waiting the ``Retry-After`` it was given) or when no answer
came; it counts every HTTP answer per tenant and keeps the ids of every acknowledged task
(201, or 200 for a replay). At the end ``outcomes`` compares them with the service's
database: an acknowledged task that is not done is lost, and the demo exits non-zero.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NO_ANSWER = 0
"""The code counted when the request got no HTTP answer (connection refused, timeout)."""


@dataclass(frozen=True, slots=True)
class TenantOutcome:
    tenant: str
    acknowledged: int
    done: int
    lost: tuple[str, ...]
    """Ids acknowledged to the tenant and not done in the database (missing or not done)."""
    codes: tuple[tuple[int, int], ...]
    """``(HTTP status, how many)`` of the tenant's submit answers, ``0`` for none."""

    def line(self) -> str:
        codes = " ".join(f"{'none' if c == NO_ANSWER else c}x{n}" for c, n in self.codes)
        return (
            f"  {self.tenant:8s} {self.acknowledged:5d} {self.done:5d} {len(self.lost):5d}"
            f"   {codes}"
        )


class SubmitLedger:
    """Thread-safe: the flood and the steady submitter share one."""

    def __init__(self, retries: int = 8, max_wait_s: float = 5.0) -> None:
        self.retries = retries
        self.max_wait_s = max_wait_s
        self.lock = threading.Lock()
        self.codes: dict[str, Counter[int]] = {}
        self.acknowledged: dict[str, set[str]] = {}

    def _count(self, tenant: str, code: int) -> None:
        with self.lock:
            self.codes.setdefault(tenant, Counter())[code] += 1

    def submit(
        self, http: Any, tenant: str, token: str, items: Sequence[dict[str, Any]], key: str
    ) -> int:
        """Submit ``items`` for ``tenant`` (``http``: an ``httpx.Client`` on the service) until
        acknowledged or refused for good; the last status (``NO_ANSWER`` when none came)."""
        import httpx

        headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": key}
        code = NO_ANSWER
        for _ in range(self.retries + 1):
            try:
                r = http.post("/v1/tasks", json=list(items), headers=headers)
            except httpx.TransportError:
                self._count(tenant, NO_ANSWER)
                time.sleep(1.0)
                continue
            code = int(r.status_code)
            self._count(tenant, code)
            if code in (200, 201):
                with self.lock:
                    self.acknowledged.setdefault(tenant, set()).update(r.json()["task_ids"])
                return code
            if code not in (429, 503):
                return code
            time.sleep(min(self.max_wait_s, float(r.headers.get("Retry-After", "1"))))
        return code

    def outcomes(self, db: Path, tenants: Sequence[str]) -> list[TenantOutcome]:
        """Per tenant: acknowledged, done, lost, from the service's SQLite database."""
        con = sqlite3.connect(db)
        try:
            state = dict(con.execute("SELECT task_id, state FROM tasks").fetchall())
        finally:
            con.close()
        out = []
        for tenant in tenants:
            with self.lock:
                acked = sorted(self.acknowledged.get(tenant, set()))
                codes = tuple(sorted(self.codes.get(tenant, Counter()).items()))
            lost = tuple(t for t in acked if state.get(t) != "done")
            out.append(TenantOutcome(tenant, len(acked), len(acked) - len(lost), lost, codes))
        return out
