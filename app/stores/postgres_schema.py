"""The PostgreSQL schema: numbered SQL steps (:data:`MIGRATIONS`) recorded in ``ocm_schema``,
applied at start-up (:func:`migrate`) inside one transaction that holds an advisory lock, so
replicas starting together apply each step once and the others wait, then see it done.  A step
is never edited once shipped; a change is a new step appended at the end.

Steps: 1 responses, events, conversations; 2 keys and usage (:mod:`.postgres_accounts`);
3 blobs; 4 stored chat completions (:mod:`.postgres_chat`); 5 files
(:mod:`app.knowledge.postgres_files`); 6 batches (:mod:`app.batches.postgres_batches`);
7 vector stores and ingestion jobs (:mod:`app.knowledge.postgres_catalog`); 8
``responses.cancel_requested``; 9 ``batches.claimed_by`` / ``claim_until``.  (The chunk
index's tables and the ``vector`` extension are created by :mod:`app.knowledge.postgres_index`,
which must tolerate a server without pgvector.)
"""

from __future__ import annotations

import time

import asyncpg

MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE responses (
        id TEXT PRIMARY KEY,
        seq BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
        owner TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        status TEXT NOT NULL,
        resource BYTEA NOT NULL,
        input_items BYTEA NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX responses_owner_seq ON responses (owner, seq);
    CREATE TABLE response_events (id TEXT PRIMARY KEY, owner TEXT NOT NULL, events BYTEA NOT NULL);
    CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        metadata BYTEA NOT NULL
    );
    CREATE TABLE conversation_items (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        conversation_id TEXT NOT NULL,
        owner TEXT NOT NULL,
        item_id TEXT NOT NULL,
        item BYTEA NOT NULL
    );
    CREATE INDEX conversation_items_order ON conversation_items (conversation_id, seq);
    CREATE INDEX conversation_items_id ON conversation_items (conversation_id, item_id);
    """,
    """
    CREATE TABLE api_keys (
        id TEXT PRIMARY KEY,
        sha256 TEXT NOT NULL UNIQUE,
        created_at BIGINT NOT NULL,
        record BYTEA NOT NULL
    );
    CREATE TABLE usage (
        grain TEXT NOT NULL, bucket BIGINT NOT NULL, key TEXT NOT NULL, model TEXT NOT NULL,
        requests BIGINT NOT NULL, errors BIGINT NOT NULL, input_tokens BIGINT NOT NULL,
        cached_tokens BIGINT NOT NULL, output_tokens BIGINT NOT NULL,
        reasoning_tokens BIGINT NOT NULL, tool_rounds BIGINT NOT NULL,
        cost DOUBLE PRECISION NOT NULL, latency TEXT NOT NULL, error_codes TEXT NOT NULL,
        PRIMARY KEY (grain, bucket, key, model)
    );
    CREATE INDEX usage_key ON usage (grain, key, bucket);
    """,
    """
    CREATE TABLE blobs (
        owner TEXT NOT NULL,
        digest TEXT NOT NULL,
        data BYTEA NOT NULL,
        used_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (owner, digest)
    );
    CREATE TABLE response_blobs (
        id TEXT NOT NULL,
        owner TEXT NOT NULL,
        digest TEXT NOT NULL,
        PRIMARY KEY (id, digest)
    );
    CREATE INDEX response_blobs_digest ON response_blobs (owner, digest);
    """,
    """
    CREATE TABLE chat_completions (id TEXT PRIMARY KEY, seq BIGINT GENERATED ALWAYS AS IDENTITY
        UNIQUE, owner TEXT NOT NULL, model TEXT NOT NULL, created_at BIGINT NOT NULL,
        completion BYTEA NOT NULL, messages BYTEA NOT NULL, metadata BYTEA NOT NULL);
    CREATE INDEX chat_completions_owner ON chat_completions (owner, seq);
    """,
    """CREATE TABLE files (id TEXT PRIMARY KEY, seq BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
        owner TEXT NOT NULL, created_at BIGINT NOT NULL, expires_at BIGINT, bytes BIGINT NOT NULL,
        filename TEXT NOT NULL, purpose TEXT NOT NULL, content_type TEXT NOT NULL);
    CREATE INDEX files_owner ON files (owner, seq); CREATE INDEX files_expiry ON files (expires_at);
    CREATE TABLE file_chunks (file_id TEXT NOT NULL, n INT NOT NULL, data BYTEA NOT NULL,
        PRIMARY KEY (file_id, n)); ALTER TABLE file_chunks ALTER COLUMN data SET STORAGE EXTERNAL;
    """,  # step 5: /v1/files (app/knowledge/postgres_files.py)
    """
CREATE TABLE batches (id TEXT PRIMARY KEY, seq BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    owner TEXT NOT NULL, key_digest TEXT, endpoint TEXT NOT NULL, input_file_id TEXT NOT NULL,
    created_at BIGINT NOT NULL, expires_at BIGINT NOT NULL, status TEXT NOT NULL, doc BYTEA NOT NULL,
    total INT NOT NULL DEFAULT 0, completed INT NOT NULL DEFAULT 0, failed INT NOT NULL DEFAULT 0,
    usage TEXT NOT NULL DEFAULT '{}');
CREATE INDEX batches_owner ON batches (owner, seq);
CREATE INDEX batches_active ON batches (status) WHERE status IN
    ('validating', 'in_progress', 'finalizing', 'cancelling');
CREATE TABLE batch_lines (batch_id TEXT NOT NULL, line INT NOT NULL, custom_id TEXT NOT NULL,
    body BYTEA NOT NULL, state TEXT NOT NULL DEFAULT 'pending', worker TEXT,
    lease_until DOUBLE PRECISION, not_before DOUBLE PRECISION NOT NULL DEFAULT 0,
    attempts INT NOT NULL DEFAULT 0, ok BOOLEAN, result BYTEA, PRIMARY KEY (batch_id, line));
CREATE INDEX batch_lines_todo ON batch_lines (batch_id, state, not_before);
""",  # step 6: /v1/batches (app/batches/postgres_batches.py)
    """
CREATE TABLE vector_stores (id TEXT PRIMARY KEY, seq BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    owner TEXT NOT NULL, created_at BIGINT NOT NULL, name TEXT NOT NULL, description TEXT, metadata TEXT,
    expires_after_days INT, expires_at BIGINT, last_active_at BIGINT NOT NULL,
    expired BOOLEAN NOT NULL DEFAULT FALSE, embedding_model TEXT, embedding_dimensions INT);
CREATE INDEX vector_stores_owner ON vector_stores (owner, seq);
CREATE INDEX vector_stores_expiry ON vector_stores (expires_at) WHERE expires_at IS NOT NULL AND NOT expired;
CREATE TABLE vector_store_files (seq BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    vector_store_id TEXT NOT NULL, file_id TEXT NOT NULL, owner TEXT NOT NULL, created_at BIGINT NOT NULL,
    status TEXT NOT NULL, usage_bytes BIGINT NOT NULL DEFAULT 0, error_code TEXT, error_message TEXT,
    attributes TEXT NOT NULL, chunking TEXT NOT NULL, filename TEXT NOT NULL,
    PRIMARY KEY (vector_store_id, file_id));
CREATE TABLE vector_store_batches (id TEXT PRIMARY KEY, vector_store_id TEXT NOT NULL, owner TEXT NOT NULL,
    created_at BIGINT NOT NULL, cancelled BOOLEAN NOT NULL DEFAULT FALSE);
CREATE TABLE vector_store_batch_files (batch_id TEXT NOT NULL, vector_store_id TEXT NOT NULL,
    file_id TEXT NOT NULL, PRIMARY KEY (batch_id, file_id));
CREATE INDEX vector_store_batch_files_file ON vector_store_batch_files (vector_store_id, file_id);
CREATE TABLE ingest_jobs (seq BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE, vector_store_id TEXT NOT NULL,
    file_id TEXT NOT NULL, token TEXT, lease_until DOUBLE PRECISION NOT NULL DEFAULT 0,
    attempts INT NOT NULL DEFAULT 0, PRIMARY KEY (vector_store_id, file_id));
CREATE INDEX ingest_jobs_lease ON ingest_jobs (lease_until, seq);
""",  # step 7: vector stores and their ingestion jobs (app/knowledge/postgres_catalog.py)
    "ALTER TABLE responses ADD COLUMN cancel_requested BOOLEAN NOT NULL DEFAULT FALSE",
    # step 8: a cancel recorded for the owning replica's heartbeat (Redis down)
    "ALTER TABLE batches ADD COLUMN claimed_by TEXT, ADD COLUMN claim_until DOUBLE PRECISION",
    # step 9: the one worker validating a batch, under a lease (app/batches/postgres_batches.py)
)
LOCK_KEY = 0x6F636D  # "ocm": the advisory lock migrations run under


async def migrate(pool: asyncpg.Pool) -> int:
    """Apply the steps not applied yet; the schema version after (step 2: keys and usage,
    :mod:`app.stores.postgres_accounts`)."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", LOCK_KEY)
        await conn.execute("CREATE TABLE IF NOT EXISTS ocm_schema (version INT PRIMARY KEY, "
                           "applied_at DOUBLE PRECISION NOT NULL)")
        done = await conn.fetchval("SELECT COALESCE(MAX(version), 0) FROM ocm_schema")
        for version, step in enumerate(MIGRATIONS, 1):
            if version > done:
                await conn.execute(step)
                await conn.execute("INSERT INTO ocm_schema VALUES ($1, $2)", version, time.time())
        return len(MIGRATIONS)
