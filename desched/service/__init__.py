"""``desched serve``: the live orchestrator over HTTP.

Modules: ``settings`` (the one settings model), ``store`` (durable state in SQLite or
PostgreSQL, tokens), ``scheduler`` (the single writer: the in-memory policy index, leases and
the group-committing writer thread over the store), ``decision_log`` (the JSON-lines log the
ingestion flow reads), ``models`` (request and response bodies), ``app`` (the FastAPI
application factory). Nothing here runs at import time.
"""
