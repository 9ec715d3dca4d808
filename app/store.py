"""Durable response store: SQLite (WAL) through aiosqlite.

Each stored response keeps its resource (the JSON the API returns) and its full
input context in wire form (previous input + previous output + new input), which is
exactly what ``previous_response_id`` needs to continue from it, and its owner (the
tenant that created it): every read and delete is scoped to the owner.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiosqlite
import orjson

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    created_at INTEGER NOT NULL,
    status TEXT NOT NULL,
    resource BLOB NOT NULL,
    input_items BLOB NOT NULL,
    owner TEXT NOT NULL DEFAULT ''
)
"""


def _prepare(path: Path) -> Path:
    path = path.expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


@dataclass(frozen=True, slots=True)
class StoredResponse:
    resource: dict[str, Any]
    input_items: list[dict[str, Any]]


class ResponseStore:
    def __init__(self, db: aiosqlite.Connection) -> None:
        self._db = db

    @classmethod
    async def open(cls, path: str | Path) -> ResponseStore:
        if str(path) != ":memory:":
            path = await asyncio.to_thread(_prepare, Path(path))
        db = await aiosqlite.connect(str(path))
        await db.execute("PRAGMA journal_mode=WAL")
        await db.execute("PRAGMA synchronous=NORMAL")
        await db.execute(_SCHEMA)
        async with db.execute("PRAGMA table_info(responses)") as cur:
            columns = {row[1] for row in await cur.fetchall()}
        if "owner" not in columns:  # a store from before tenancy: its rows belong to no key
            await db.execute("ALTER TABLE responses ADD COLUMN owner TEXT NOT NULL DEFAULT ''")
        await db.commit()
        return cls(db)

    async def close(self) -> None:
        await self._db.close()

    async def journal_mode(self) -> str:
        async with self._db.execute("PRAGMA journal_mode") as cur:
            row = await cur.fetchone()
        return str(row[0]) if row else ""

    async def put(self, resource: dict[str, Any], input_items: list[dict[str, Any]], owner: str) -> None:
        await self._db.execute(
            "INSERT OR REPLACE INTO responses (id, created_at, status, resource, input_items, owner) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (resource["id"], resource["created_at"], resource["status"], orjson.dumps(resource),
             orjson.dumps(input_items), owner))
        await self._db.commit()

    async def get(self, response_id: str, owner: str) -> StoredResponse | None:
        """The response ``response_id`` if ``owner`` stored it (another tenant's is None)."""
        async with self._db.execute("SELECT resource, input_items FROM responses WHERE id = ? AND owner = ?",
                                    (response_id, owner)) as cur:
            row = await cur.fetchone()
        if row is None:
            return None
        return StoredResponse(orjson.loads(row[0]), orjson.loads(row[1]))

    async def delete(self, response_id: str, owner: str) -> bool:
        cur = await self._db.execute("DELETE FROM responses WHERE id = ? AND owner = ?",
                                     (response_id, owner))
        await self._db.commit()
        return (cur.rowcount or 0) > 0
