"""The service's tables, for both engines (``desched.service.store`` creates and migrates
them; it and this module hold every SQL statement of the service)."""

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS principals (
        token_sha256 TEXT PRIMARY KEY,
        role TEXT NOT NULL,
        name TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        expires_at DOUBLE PRECISION,
        revoked_at DOUBLE PRECISION,
        UNIQUE (role, name)
    )""",
    """CREATE TABLE IF NOT EXISTS tasks (
        seq BIGINT PRIMARY KEY,
        task_id TEXT NOT NULL UNIQUE,
        tenant TEXT NOT NULL,
        task_type TEXT NOT NULL,
        document_ref TEXT NOT NULL,
        doc_bytes BIGINT,
        pages BIGINT,
        mem_mb DOUBLE PRECISION,
        predicted_mem_mb DOUBLE PRECISION,
        submit_s DOUBLE PRECISION NOT NULL,
        predicted_s DOUBLE PRECISION,
        batch_key TEXT,
        batch_index INTEGER,
        request_sha256 TEXT,
        state TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        worker TEXT,
        worker_id TEXT,
        lease_id TEXT,
        lease_expires_at DOUBLE PRECISION,
        start_s DOUBLE PRECISION,
        end_s DOUBLE PRECISION,
        duration_s DOUBLE PRECISION,
        peak_mem_mb DOUBLE PRECISION,
        result_ref TEXT,
        error TEXT,
        priority INTEGER NOT NULL DEFAULT 0,
        predicted_p50_s DOUBLE PRECISION,
        predicted_p90_s DOUBLE PRECISION,
        UNIQUE (tenant, batch_key, batch_index)
    )""",
    "CREATE INDEX IF NOT EXISTS tasks_live ON tasks (seq) WHERE state IN ('queued', 'leased')",
    """CREATE TABLE IF NOT EXISTS config (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS tenant_controls (
        tenant TEXT PRIMARY KEY,
        weight DOUBLE PRECISION NOT NULL,
        cap INTEGER,
        rate DOUBLE PRECISION,
        burst DOUBLE PRECISION,
        updated_at DOUBLE PRECISION NOT NULL
    )""",
)
