"""Stored chat completions on PostgreSQL (``[store] url``): the same rows and answers as the
SQLite table of :class:`app.api.chat.stored.ChatStore` (migration 4 of
:mod:`app.stores.postgres`), so a completion stored through one replica is read, listed,
updated and deleted through any other.  Every call is scoped to its owner (tenant)."""

from __future__ import annotations

from typing import Any

import asyncpg
import orjson

from app.stores.postgres import guard

Json = dict[str, Any]


class PostgresChatStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def put(self, completion: Json, messages: list[Json], metadata: dict[str, str],
                  owner: str) -> None:
        async with guard():
            await self._pool.execute(
                "INSERT INTO chat_completions (id, owner, model, created_at, completion, messages, "
                "metadata) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO UPDATE SET "
                "owner = excluded.owner, model = excluded.model, created_at = excluded.created_at, "
                "completion = excluded.completion, messages = excluded.messages, "
                "metadata = excluded.metadata",
                completion["id"], owner, str(completion.get("model", "")), int(completion["created"]),
                orjson.dumps(completion), orjson.dumps(messages), orjson.dumps(metadata))

    async def get(self, completion_id: str, owner: str) -> tuple[Json, list[Json]] | None:
        async with guard():
            row = await self._pool.fetchrow(
                "SELECT completion, messages, metadata FROM chat_completions WHERE id = $1 "
                "AND owner = $2", completion_id, owner)
        if row is None:
            return None
        return {**orjson.loads(row[0]), "metadata": orjson.loads(row[2])}, orjson.loads(row[1])

    async def page(self, owner: str, *, limit: int, after: str | None, ascending: bool,
                   model: str | None) -> list[Json] | None:
        """Up to ``limit`` completions after ``after`` (None: ``after`` is not one of them)."""
        bound = ""
        args: list[Any] = [owner]
        async with guard():
            if after is not None:
                seq = await self._pool.fetchval(
                    "SELECT seq FROM chat_completions WHERE id = $1 AND owner = $2", after, owner)
                if seq is None:
                    return None
                args.append(seq)
                bound = f" AND seq {'>' if ascending else '<'} ${len(args)}"
            if model is not None:
                args.append(model)
                bound += f" AND model = ${len(args)}"
            args.append(limit)
            rows = await self._pool.fetch(
                f"SELECT completion, metadata FROM chat_completions WHERE owner = $1{bound} "
                f"ORDER BY seq {'ASC' if ascending else 'DESC'} LIMIT ${len(args)}", *args)
        return [{**orjson.loads(c), "metadata": orjson.loads(m)} for c, m in rows]

    async def update(self, completion_id: str, owner: str, metadata: dict[str, str]) -> bool:
        async with guard():
            status = await self._pool.execute(
                "UPDATE chat_completions SET metadata = $1 WHERE id = $2 AND owner = $3",
                orjson.dumps(metadata), completion_id, owner)
        return str(status).endswith(" 1")

    async def delete(self, completion_id: str, owner: str) -> bool:
        async with guard():
            status = await self._pool.execute(
                "DELETE FROM chat_completions WHERE id = $1 AND owner = $2", completion_id, owner)
        return str(status).endswith(" 1")
