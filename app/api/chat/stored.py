"""Stored chat completions: ``store: true`` on ``POST /v1/chat/completions``, read back by id.

OpenAI's API keeps a chat completion made with ``store: true`` (with its ``metadata`` and its
input messages) and serves it at ``GET /v1/chat/completions/{id}``, lists them
(``GET /v1/chat/completions``, filtered by ``model`` / ``metadata``), their input messages
(``.../{id}/messages``), updates their ``metadata`` (``POST .../{id}``) and deletes them.
Here they live in the store's SQLite file (their own table), or in PostgreSQL with ``[store]
url`` (:mod:`app.stores.postgres_chat`, the same answers), each row owned by the tenant of
the key that made it: every read, update and delete is scoped to it (others get 404).  A
completion is written once its run ended without an error (:class:`StoreHooks`); one
choice per request (``n > 1`` with ``store`` is a 400).
"""

from __future__ import annotations

import time
from typing import Any

import aiosqlite
import orjson

from app.engine.run import Run
from app.stores.sqlite_db import transaction

Json = dict[str, Any]
_SCHEMA = """
CREATE TABLE IF NOT EXISTS chat_completions (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    model TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    completion BLOB NOT NULL,
    messages BLOB NOT NULL,
    metadata BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS chat_completions_owner ON chat_completions (owner, seq)
"""


class ChatStore:
    def __init__(self, db: aiosqlite.Connection) -> None:
        self._db = db

    @classmethod
    async def open(cls, db: aiosqlite.Connection) -> ChatStore:
        """On an open connection of the store's file (the response store's)."""
        await db.executescript(_SCHEMA)
        await db.commit()
        return cls(db)

    async def put(self, completion: Json, messages: list[Json], metadata: dict[str, str],
                  owner: str) -> None:
        async with transaction(self._db) as db:
            await db.execute(
                "INSERT OR REPLACE INTO chat_completions VALUES (?, ?, ?, ?, "
                "(SELECT COALESCE(MAX(seq), 0) + 1 FROM chat_completions), ?, ?, ?)",
                (completion["id"], owner, str(completion.get("model", "")), int(completion["created"]),
                 orjson.dumps(completion), orjson.dumps(messages), orjson.dumps(metadata)))

    async def get(self, completion_id: str, owner: str) -> tuple[Json, list[Json]] | None:
        async with self._db.execute(
                "SELECT completion, messages, metadata FROM chat_completions WHERE id = ? AND owner = ?",
                (completion_id, owner)) as cur:
            row = await cur.fetchone()
        if row is None:
            return None
        return {**orjson.loads(row[0]), "metadata": orjson.loads(row[2])}, orjson.loads(row[1])

    async def page(self, owner: str, *, limit: int, after: str | None, ascending: bool,
                   model: str | None) -> list[Json] | None:
        """Up to ``limit`` completions after ``after`` (None: ``after`` is not one of them)."""
        bound = ""
        args: list[Any] = [owner]
        if after is not None:
            async with self._db.execute("SELECT seq FROM chat_completions WHERE id = ? AND owner = ?",
                                        (after, owner)) as cur:
                row = await cur.fetchone()
            if row is None:
                return None
            bound = f" AND seq {'>' if ascending else '<'} ?"
            args.append(row[0])
        if model is not None:
            bound += " AND model = ?"
            args.append(model)
        order = "ASC" if ascending else "DESC"
        async with self._db.execute(
                f"SELECT completion, metadata FROM chat_completions WHERE owner = ?{bound} "
                f"ORDER BY seq {order} LIMIT ?", (*args, limit)) as cur:
            rows = await cur.fetchall()
        return [{**orjson.loads(c), "metadata": orjson.loads(m)} for c, m in rows]

    async def update(self, completion_id: str, owner: str, metadata: dict[str, str]) -> bool:
        async with transaction(self._db) as db:
            cur = await db.execute("UPDATE chat_completions SET metadata = ? WHERE id = ? AND owner = ?",
                                   (orjson.dumps(metadata), completion_id, owner))
        return cur.rowcount > 0

    async def delete(self, completion_id: str, owner: str) -> bool:
        async with transaction(self._db) as db:
            cur = await db.execute("DELETE FROM chat_completions WHERE id = ? AND owner = ?",
                                   (completion_id, owner))
        return cur.rowcount > 0


def stored_messages(completion_id: str, messages: list[Json]) -> list[Json]:
    """The input messages as OpenAI lists them: an id each, text content as a string."""
    out: list[Json] = []
    for i, message in enumerate(messages):
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        out.append({**message, "id": f"{completion_id}-{i}", "content": content})
    return out


class StoreHooks:
    """Writes the completion when its run ends without an error."""

    def __init__(self, store: ChatStore, messages: list[Json], metadata: dict[str, str],
                 owner: str) -> None:
        self._store = store
        self._messages = messages
        self._metadata = metadata
        self._owner = owner

    async def started(self, run: Run) -> None:
        return None

    async def ended(self, run: Run) -> None:
        folded = getattr(run.encoder, "folded", None)
        if run.error is not None or getattr(folded, "finish_reason", None) is None:
            return  # failed or cancelled: the client got no completion to read back
        completion = run.encoder.result()
        if isinstance(completion, dict) and completion.get("choices"):
            await self._store.put({**completion, "created": completion.get("created") or int(time.time())},
                                  self._messages, self._metadata, self._owner)
