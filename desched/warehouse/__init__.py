"""The DuckDB warehouse of decision logs, and the incremental, idempotent load into it.

Modules, lowest first (each imports only modules above it in this list):

- ``rules``: the rules every decision-log record keeps, as polars expressions that route rows;
- ``schema``: the tables (``decisions``, ``completions``, ``quarantine``, ``ingested_files``)
  and ``open_warehouse``;
- ``settings``: ``IngestSettings``;
- ``ledger``: what each log file held when last read, and the plan of a run (new, grown,
  replaced, truncated or touched files);
- ``readers``: Parquet and JSON-lines files in batches of raw records;
- ``staging``: raw records cast to their types, with the context the rules read;
- ``audit``: the same rules as a Great Expectations suite, run over samples, failing where GX
  and polars disagree;
- ``load``: one file read, checked and loaded (or quarantined) in one transaction;
- ``report``: the run's totals and its report.

The ``ingest-logs`` flow (``desched/flows/ingest.py``) composes them; ``desched ingest`` runs it once.
duckdb, pyarrow and great_expectations are imported inside the functions that use them.
"""
