"""The conversation store on SQLite (WAL) through aiosqlite, next to the response store (the
contract: :mod:`app.stores.base`).

A conversation is a row (id, owner, created_at, metadata); its items are rows of their own in
``conversation_items``, ordered by an autoincrement sequence number. Appending is a plain
``INSERT`` of new rows (never a read-modify-write of a list), so two requests appending to one
conversation at the same time, in one process or in several sharing the file, both keep every
item; each row is inserted only while its conversation exists (``INSERT ... SELECT ... WHERE
EXISTS``), so an append racing a delete leaves no orphans. Every read and write is scoped to
the owner (the API key's tenant): another tenant's conversation looks missing.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiosqlite
import orjson

from app.stores.base import conversation_resource as resource
from app.stores.sqlite_db import configure, transaction

Json = dict[str, Any]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    metadata BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS conversation_items (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    item_id TEXT NOT NULL,
    item BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS conversation_items_order ON conversation_items (conversation_id, seq);
CREATE INDEX IF NOT EXISTS conversation_items_id ON conversation_items (conversation_id, item_id)
"""

_APPEND = ("INSERT INTO conversation_items (conversation_id, owner, item_id, item) "
           "SELECT ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM conversations WHERE id = ? AND owner = ?)")


def _prepare(path: Path) -> Path:
    path = path.expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


class SqliteConversationStore:
    """:class:`~app.stores.base.ConversationStore` on SQLite."""

    def __init__(self, db: aiosqlite.Connection) -> None:
        self._db = db

    @classmethod
    async def open(cls, path: str | Path) -> SqliteConversationStore:
        if str(path) != ":memory:":
            path = await asyncio.to_thread(_prepare, Path(path))
        db = await aiosqlite.connect(str(path))
        await configure(db)  # other connections and processes write to the same file
        await db.executescript(_SCHEMA)
        await db.commit()
        return cls(db)

    async def close(self) -> None:
        await self._db.close()

    async def create(self, conversation_id: str, owner: str, created_at: int,
                     metadata: dict[str, str], items: list[Json]) -> Json:
        async with transaction(self._db) as db:
            await db.execute(
                "INSERT INTO conversations (id, owner, created_at, metadata) VALUES (?, ?, ?, ?)",
                (conversation_id, owner, created_at, orjson.dumps(metadata)))
            await db.executemany(_APPEND, self._rows(conversation_id, owner, items))
        return resource(conversation_id, created_at, metadata)

    async def get(self, conversation_id: str, owner: str) -> Json | None:
        async with self._db.execute(
                "SELECT created_at, metadata FROM conversations WHERE id = ? AND owner = ?",
                (conversation_id, owner)) as cur:
            row = await cur.fetchone()
        if row is None:
            return None
        return resource(conversation_id, int(row[0]), orjson.loads(row[1]))

    async def set_metadata(self, conversation_id: str, owner: str, metadata: dict[str, str],
                           ) -> Json | None:
        async with transaction(self._db) as db:
            cur = await db.execute("UPDATE conversations SET metadata = ? WHERE id = ? AND owner = ?",
                                   (orjson.dumps(metadata), conversation_id, owner))
        if (cur.rowcount or 0) == 0:
            return None
        return await self.get(conversation_id, owner)

    async def delete(self, conversation_id: str, owner: str) -> bool:
        async with transaction(self._db) as db:
            cur = await db.execute("DELETE FROM conversations WHERE id = ? AND owner = ?",
                                   (conversation_id, owner))
            await db.execute("DELETE FROM conversation_items WHERE conversation_id = ? AND owner = ?",
                             (conversation_id, owner))
        return (cur.rowcount or 0) > 0

    @staticmethod
    def _rows(conversation_id: str, owner: str, items: list[Json],
              ) -> list[tuple[str, str, str, bytes, str, str]]:
        return [(conversation_id, owner, str(item["id"]), orjson.dumps(item), conversation_id, owner)
                for item in items]

    async def append(self, conversation_id: str, owner: str, items: list[Json]) -> bool:
        """Add ``items`` after the conversation's last item; False if it does not exist (then
        nothing is added)."""
        if not items:
            return await self.get(conversation_id, owner) is not None
        async with transaction(self._db) as db:  # the whole batch or nothing
            cur = await db.executemany(_APPEND, self._rows(conversation_id, owner, items))
        return (cur.rowcount or 0) > 0

    async def items(self, conversation_id: str, owner: str) -> list[Json]:
        """Every item of the conversation, oldest first (the context of a response)."""
        async with self._db.execute(
                "SELECT item FROM conversation_items WHERE conversation_id = ? AND owner = ? "
                "ORDER BY seq", (conversation_id, owner)) as cur:
            rows = await cur.fetchall()
        return [orjson.loads(row[0]) for row in rows]

    async def _seq(self, conversation_id: str, owner: str, item_id: str) -> int | None:
        async with self._db.execute(
                "SELECT MAX(seq) FROM conversation_items WHERE conversation_id = ? AND owner = ? "
                "AND item_id = ?", (conversation_id, owner, item_id)) as cur:
            row = await cur.fetchone()
        return None if row is None or row[0] is None else int(row[0])

    async def page(self, conversation_id: str, owner: str, *, limit: int, after: str | None,
                   ascending: bool) -> list[Json] | None:
        """Up to ``limit`` items in order (newest first unless ``ascending``) after the item
        ``after``; None when ``after`` is not an item of this conversation."""
        sign, order = (">", "ASC") if ascending else ("<", "DESC")
        where = "conversation_id = ? AND owner = ?"
        args: list[object] = [conversation_id, owner]
        if after is not None:
            seq = await self._seq(conversation_id, owner, after)
            if seq is None:
                return None
            where += f" AND seq {sign} ?"
            args.append(seq)
        async with self._db.execute(
                f"SELECT item FROM conversation_items WHERE {where} ORDER BY seq {order} LIMIT ?",
                (*args, limit)) as cur:
            rows = await cur.fetchall()
        return [orjson.loads(row[0]) for row in rows]

    async def item(self, conversation_id: str, owner: str, item_id: str) -> Json | None:
        """The item ``item_id`` (the latest, should a client have sent one id twice)."""
        async with self._db.execute(
                "SELECT item FROM conversation_items WHERE conversation_id = ? AND owner = ? "
                "AND item_id = ? ORDER BY seq DESC LIMIT 1", (conversation_id, owner, item_id)) as cur:
            row = await cur.fetchone()
        return None if row is None else dict(orjson.loads(row[0]))

    async def expire(self, created_before: int) -> int:
        async with transaction(self._db) as db:
            await db.execute("DELETE FROM conversation_items WHERE conversation_id IN "
                             "(SELECT id FROM conversations WHERE created_at < ?)", (created_before,))
            cur = await db.execute("DELETE FROM conversations WHERE created_at < ?", (created_before,))
        return cur.rowcount or 0

    async def delete_item(self, conversation_id: str, owner: str, item_id: str) -> bool:
        async with transaction(self._db) as db:
            cur = await db.execute(
                "DELETE FROM conversation_items WHERE conversation_id = ? AND owner = ? AND item_id = ?",
                (conversation_id, owner, item_id))
        return (cur.rowcount or 0) > 0
