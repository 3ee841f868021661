"""Document enrichment: what the enrichment workers run on a receipt.

``documents`` reads SROIE receipts and resolves a task's ``document_ref``; ``embedding`` loads
the sentence-embedding model (all-MiniLM-L6-v2, pinned by SHA-256; a tiny built-in model when
the package is absent); ``extract`` finds company, date and total; ``classify`` files a
receipt under a merchant category; ``memory`` measures a task's peak memory; ``pipeline``
runs a batch of tasks; ``results`` stores results in the DuckDB warehouse; ``client`` is the
worker's side of the service's HTTP API; ``evaluate`` scores all of it on SROIE. The model
that predicts a task's peak memory from the measured peaks is in the model layer
(``desched.models.memory``).

No Prefect import here; torch, sentence-transformers and duckdb are imported inside the
functions that use them.
"""
