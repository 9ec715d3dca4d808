"""How the vector-store catalog's rows are laid out in SQLite (:mod:`app.knowledge.sqlite_catalog`
and its ingestion queue, :mod:`app.knowledge.sqlite_jobs`): the schema, the column lists the
queries read, and the decoders from a row to the catalog's records
(:mod:`app.knowledge.catalog`).

Tables: ``vector_stores``, ``vector_store_files`` (one row per file of a store: status,
error, attributes, chunking), ``vector_store_batches`` + ``vector_store_batch_files`` (a
batch's members; their statuses are the files' rows), ``ingest_jobs`` (one per in-progress
file: its claim ``token``, ``lease_until`` and ``attempts``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from app.knowledge.catalog import FileCounts, FileRecord, StoreRecord, chunking_of
from app.knowledge.vectors import EmbeddingSpace

SCHEMA = """
CREATE TABLE IF NOT EXISTS vector_stores (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, owner TEXT NOT NULL,
    created_at INTEGER NOT NULL, name TEXT NOT NULL, description TEXT, metadata TEXT,
    expires_after_days INTEGER, expires_at INTEGER, last_active_at INTEGER NOT NULL,
    expired INTEGER NOT NULL DEFAULT 0, embedding_model TEXT, embedding_dimensions INTEGER);
CREATE INDEX IF NOT EXISTS vector_stores_owner ON vector_stores (owner, seq);
CREATE INDEX IF NOT EXISTS vector_stores_expiry ON vector_stores (expires_at)
    WHERE expires_at IS NOT NULL AND expired = 0;
CREATE TABLE IF NOT EXISTS vector_store_files (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, vector_store_id TEXT NOT NULL, file_id TEXT NOT NULL,
    owner TEXT NOT NULL, created_at INTEGER NOT NULL, status TEXT NOT NULL,
    usage_bytes INTEGER NOT NULL DEFAULT 0, error_code TEXT, error_message TEXT,
    attributes TEXT NOT NULL, chunking TEXT NOT NULL, filename TEXT NOT NULL,
    UNIQUE (vector_store_id, file_id));
CREATE TABLE IF NOT EXISTS vector_store_batches (
    id TEXT PRIMARY KEY, vector_store_id TEXT NOT NULL, owner TEXT NOT NULL,
    created_at INTEGER NOT NULL, cancelled INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS vector_store_batch_files (
    batch_id TEXT NOT NULL, vector_store_id TEXT NOT NULL, file_id TEXT NOT NULL,
    PRIMARY KEY (batch_id, file_id));
CREATE TABLE IF NOT EXISTS ingest_jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, vector_store_id TEXT NOT NULL, file_id TEXT NOT NULL,
    token TEXT, lease_until REAL NOT NULL DEFAULT 0, attempts INTEGER NOT NULL DEFAULT 0,
    UNIQUE (vector_store_id, file_id));
CREATE INDEX IF NOT EXISTS ingest_jobs_lease ON ingest_jobs (lease_until, seq)
"""
STORE_COLUMNS = ("id, owner, created_at, name, metadata, expires_after_days, expires_at, last_active_at, "
          "expired, embedding_model, embedding_dimensions")
FILE_COLUMNS = ("f.vector_store_id, f.file_id, f.owner, f.created_at, f.status, f.usage_bytes, f.error_code, "
         "f.error_message, f.attributes, f.chunking, f.filename")


def space_columns(space: EmbeddingSpace | None) -> tuple[str | None, int | None]:
    return (None, None) if space is None else (space.model, space.dimensions)


def as_json(value: Any) -> str:
    return orjson.dumps(value).decode()


def file_row(row: Sequence[Any]) -> FileRecord:
    vs, fid, owner, created, status, usage, code, message, attributes, chunking, filename = row
    return FileRecord(str(vs), str(fid), str(owner), int(created), status, int(usage),
                      None if code is None else (str(code), str(message or "")),
                      orjson.loads(attributes), chunking_of(orjson.loads(chunking)), str(filename))


def store_row(row: Sequence[Any], counts: FileCounts, usage: int) -> StoreRecord:
    sid, owner, created, name, metadata, days, expires_at, active, expired, model, dims = row
    return StoreRecord(str(sid), str(owner), int(created), str(name),
                       None if metadata is None else orjson.loads(metadata),
                       None if days is None else int(days), None if expires_at is None else int(expires_at),
                       int(active), bool(expired), counts, usage, space_of(model, dims))


def space_of(model: Any, dimensions: Any) -> EmbeddingSpace | None:
    if model is None:
        return None
    return EmbeddingSpace(str(model), None if dimensions is None else int(dimensions))
