"""``desched serve``: the live orchestrator over HTTP.

The request paths: ``app`` (the FastAPI application factory and its routes, the reference),
``hot_path`` (the ASGI fast path for polls and completions), ``asgi`` (body limit and
replay), ``answers`` (the responses both paths share), ``schemas`` (request and response
bodies), ``settings`` (the one settings model).

The coordinator: ``scheduler`` (the single writer, which decides every state change under one
lock) over its rooms: ``records`` (what is passed around), ``errors`` (refusals and their
HTTP status), ``clock``, ``leases`` (the lease book), ``policy_host`` (install, persist,
restore the live policy), ``dispatch`` (what a poll gets), ``idempotency``, ``tokens``,
``predictions``, ``writer`` (group commit), ``telemetry`` (counters and ``/metrics``),
``decision_log`` (the JSON-lines log the ingestion flow reads) and ``store`` (every SQL
statement of the request path, over SQLite or PostgreSQL).

The operator page: ``overview`` (what ``GET /ui/state`` answers, read off the hot path:
the scheduler's memory under its lock, the database on a connection of its own) and
``operator.html`` (the static page, ``GET /ui``).

The service depends on models only through ``desched.models.interfaces``. Nothing here runs
at import time.
"""
