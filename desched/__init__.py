"""desched: the task orchestrator of a multi-tenant Document Enrichment Service, and its bench."""

__version__ = "0.1.0"
