"""Who holds a bearer token: tenants and workers, by the SHA-256 of their token.

Tokens are created by admin commands (``desched tenants add``, ``desched workers add``) in
another process, straight into the ``principals`` table; the service only reads it. A token
once found is cached for the life of the process (a dict read on the request path, safe
without the scheduler's lock); an unknown one is looked up every time, since an admin may
have added it since. Tokens themselves are never stored, only their hash.
"""

from __future__ import annotations

import threading

from desched.service.records import Principal
from desched.service.store import Store, hash_token


class TokenBook:
    """The principals known so far; reads ``store`` under ``read_lock``."""

    def __init__(self, store: Store, read_lock: threading.Lock) -> None:
        self.store = store
        self.read_lock = read_lock
        self._known: dict[str, Principal] = {}

    def principal(self, token: str) -> Principal | None:
        """Who holds ``token``, or None. Cost: one SHA-256; one query when not cached."""
        digest = hash_token(token)
        found = self._known.get(digest)
        if found is not None:
            return found
        with self.read_lock:
            row = self.store.principal(digest)
        if row is None:
            return None
        found = self._known[digest] = Principal(row[0], row[1])
        return found
