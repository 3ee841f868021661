"""Who holds a bearer token: tenants and workers, by the SHA-256 of their token.

Tokens are created, expired and revoked by admin commands (``desched tenants add --expires``,
``desched tenants revoke``, and the same for workers) in another process, straight into the
``principals`` table; the service only reads it. Tokens themselves are never stored, only
their hash.

A token once found is cached for the life of the process (a dict read on the request path,
safe without the scheduler's lock), with its expiry, which every request checks against the
clock: an expired token gets 401 from its expiry instant on, cached or not. An unknown,
revoked or expired token is looked up every time (an admin may have added it since).
Revocation reaches the cache through the database: ``revoke`` counts every revocation in a
token epoch; the active service reads the epoch once per housekeeping sweep (``refresh``),
drops the whole cache when it moved and acknowledges the epoch it applied
(``TOKEN_EPOCH_SEEN_KEY``); the admin command waits for that acknowledgement, so once it
returns the revoked token gets 401.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from desched.errors import DeschedError
from desched.service.errors import Unauthorized
from desched.service.records import Principal
from desched.service.store import Store, hash_token


def iso(t: float) -> str:
    """Epoch seconds as an ISO 8601 UTC time, to the second."""
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_UNITS_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_LAST_EXPIRY = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()
"""The latest expiry a token may have: later ones have no ISO time to list them by."""


def parse_expiry(text: str, now: float) -> float:
    """When a token given ``--expires text`` at ``now`` expires (epoch seconds): a duration
    (``90s``, ``45m``, ``12h``, ``30d``, ``2w``) from ``now``, or an ISO 8601 time
    (``2031-01-31``, ``2031-01-31T12:00:00Z``; UTC when it names no zone). It must lie after
    ``now``; anything else is a ``DeschedError`` naming the value."""
    value = text.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([smhdw])", value)
    if match:
        seconds = float(match[1]) * _UNITS_S[match[2]]
        if seconds <= 0:
            raise DeschedError(f"--expires {text!r}: must be a positive duration")
        if now + seconds > _LAST_EXPIRY:  # its token had been stored, and `list` then failed
            raise DeschedError(f"--expires {text!r}: past the year 9999")
        return now + seconds
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise DeschedError(
            f"--expires {text!r}: expected a duration (90s, 45m, 12h, 30d, 2w) or an ISO "
            "time (2031-01-31T12:00:00Z)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    at = when.timestamp()
    if at <= now:
        raise DeschedError(f"--expires {text!r}: that time has passed")
    return at


class TokenBook:
    """The principals known so far; reads ``store`` under ``read_lock``. ``now`` is wall-clock
    epoch seconds (expiry is a wall-clock instant)."""

    def __init__(
        self, store: Store, read_lock: threading.Lock, now: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.read_lock = read_lock
        self.now = now
        self.epoch = -1
        """The token epoch the cache reflects (-1: not read yet)."""
        self._known: dict[str, Principal] = {}

    def cached(self, token: str) -> Principal | None:
        """Who holds ``token`` if it is cached, else None; ``Unauthorized`` once it expired.
        No I/O: the request paths call this on the event loop and look a token that is not
        cached up (``principal``) in a worker thread, so a stalled database holds up that
        request alone. Cost: one SHA-256."""
        found = self._known.get(hash_token(token))
        if found is not None and found.expires_at is not None and self.now() >= found.expires_at:
            raise Unauthorized(f"token expired at {iso(found.expires_at)}")
        return found

    def principal(self, token: str) -> Principal:
        """Who holds ``token``; ``Unauthorized`` (with the reason) for an unknown, revoked
        or expired one. Cost: one SHA-256; one query when not cached."""
        digest = hash_token(token)
        found = self._known.get(digest)
        if found is None:
            epoch = self.epoch
            with self.read_lock:
                row = self.store.principal(digest)
            if row is None:
                raise Unauthorized("unknown token")
            role, name, expires_at, revoked_at = row
            if revoked_at is not None:
                raise Unauthorized(f"token revoked at {iso(revoked_at)}")
            found = Principal(role, name, expires_at)
            if self.epoch == epoch:  # else a revocation may have come after the read
                self._known[digest] = found
        if found.expires_at is not None and self.now() >= found.expires_at:
            raise Unauthorized(f"token expired at {iso(found.expires_at)}")
        return found

    def refresh(self, epoch: int) -> bool:
        """Take the token epoch read from the database; whether it moved (then the cache is
        dropped: every token is looked up again on its next use)."""
        if epoch == self.epoch:
            return False
        self._known = {}
        self.epoch = epoch
        return True

    def clear(self) -> None:
        """Forget every cached token and the epoch (memory is being rebuilt)."""
        self._known = {}
        self.epoch = -1
