"""The stores on PostgreSQL (asyncpg and its pool), for N replicas sharing one state (the
contract: :mod:`app.stores.base`).  Selected by ``[store] url = "postgresql://..."``.

* **Migrations**: :mod:`.postgres_schema` (numbered SQL steps applied once under an
  advisory lock, whichever replica starts first).
* **Tables**: ``responses`` (creation order: an identity column an upsert keeps),
  ``response_events``, ``conversations``, ``conversation_items`` (an identity sequence per
  row; appends are row inserts), ``chat_completions`` (step 4, :mod:`.postgres_chat`),
  ``files`` + ``file_chunks`` (step 5, :mod:`app.knowledge.postgres_files`); step 8 adds
  ``responses.cancel_requested`` (a cancel the owner's heartbeat reads: Redis down).
  Objects are stored as orjson bytes (events zlib-compressed), never parsed by the server.
* **Blobs** (step 3; :mod:`app.stores.blobs`): a put upserts its blobs in digest order (the
  upsert locks each row), a delete locks the blobs of its response in the same order before it
  looks for other references in a new statement; so a put racing a delete either lands first
  (its reference is seen and the blob stays) or after (it writes the blob again).  The
  retention sweep deletes only blobs unused for ``SWEEP_GRACE`` (a put re-marks ``used_at``).
* **Concurrency**: an append locks its conversation's row ``FOR KEY SHARE`` and a delete
  takes it exclusively, so an append racing a delete either lands before it (and is deleted
  with it) or finds no conversation (no orphans); concurrent appends never lose an item.
* **Failures**: a connection that cannot be had or is lost is :class:`StoreUnavailable`
  (503, ``Retry-After``), never a "missing" answer.
"""

from __future__ import annotations

import contextlib
import time
import zlib
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import orjson

from app.core.errors import Overloaded
from app.stores import blobs
from app.stores.base import Json, StoredResponse, conversation_resource
from app.stores.postgres_schema import LOCK_KEY, MIGRATIONS, migrate

__all__ = ["MIGRATIONS", "migrate"]  # the schema's own module; also importable from here



class StoreUnavailable(Overloaded):
    """503 with ``Retry-After``, like the gateway's own overload."""

    code = "store_unavailable"

    def __init__(self, message: str, *, retry_after: float = 1.0) -> None:
        super().__init__(message, retry_after=retry_after)


@contextlib.asynccontextmanager
async def guard() -> AsyncIterator[None]:
    try:
        yield
    except (OSError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError, asyncpg.InternalClientError,
            asyncpg.exceptions.CannotConnectNowError, asyncpg.TooManyConnectionsError, TimeoutError) as exc:
        # InternalClientError: a pooled connection left mid-operation when the server went away
        raise StoreUnavailable(f"The store (PostgreSQL) is unavailable ({type(exc).__name__}); "
                               "try again.") from None


async def open_pool(url: str, *, min_size: int = 1, max_size: int = 10) -> asyncpg.Pool:
    async with guard():
        pool = await asyncpg.create_pool(url, min_size=min_size, max_size=max_size, timeout=10,
                                         command_timeout=30)
        await migrate(pool)
    return pool


_RESPONSES_LOCK, _CONVERSATIONS_LOCK = LOCK_KEY + 1, LOCK_KEY + 2
_PUT = (  # $1 id, $2 owner, $3 created_at, $4 status, $5 resource, $6 items, $7 now, $8 digests, $9 data
    "WITH stored_blobs AS (INSERT INTO blobs (owner, digest, data, used_at) SELECT $2, d, x, $7 "
    "FROM unnest($8::text[], $9::bytea[]) WITH ORDINALITY AS b(d, x, n) ORDER BY n "
    "ON CONFLICT (owner, digest) DO UPDATE SET used_at = excluded.used_at), "
    "unreferenced AS (DELETE FROM response_blobs WHERE id = $1 AND NOT (digest = ANY($8::text[]))), "
    "referenced AS (INSERT INTO response_blobs (id, owner, digest) SELECT $1, $2, unnest($8::text[]) "
    "ON CONFLICT (id, digest) DO UPDATE SET owner = excluded.owner) "
    "INSERT INTO responses (id, owner, created_at, status, resource, input_items, updated_at) "
    "VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, "
    "created_at = excluded.created_at, status = excluded.status, resource = excluded.resource, "
    "input_items = excluded.input_items, updated_at = excluded.updated_at")


async def _expire(pool: asyncpg.Pool, lock: int, statements: list[str], created_before: int,
                  after: tuple[tuple[str, Any], ...] = ()) -> int:
    """Run the retention deletes unless another replica is running them right now (then 0);
    how many the last of ``statements`` deleted (``after``: more, with their own argument)."""
    async with guard(), pool.acquire() as conn, conn.transaction():
        if not await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", lock):
            return 0
        status = ""
        for statement in statements:
            status = await conn.execute(statement, created_before)
        for statement, argument in after:
            await conn.execute(statement, argument)
        return int(status.rsplit(" ", 1)[-1] or 0)


class PostgresResponseStore:
    """:class:`~app.stores.base.ResponseStore` on PostgreSQL."""

    def __init__(self, pool: asyncpg.Pool, *, owns_pool: bool = False) -> None:
        self._pool = pool
        self._owns = owns_pool

    async def put(self, resource: Json, input_items: list[Json], owner: str) -> None:
        # One statement (one round trip, atomic on its own) instead of a transaction of four to
        # six: its blobs upserted in digest order (see the module's docstring), its references
        # made those digests exactly, the response upserted.
        stored, now, rid = blobs.split(input_items), time.time(), resource["id"]
        digests = sorted(stored.blobs)
        async with guard():
            await self._pool.execute(
                _PUT, rid, owner, int(resource["created_at"]), resource["status"],
                orjson.dumps(resource), stored.items, now, digests, [stored.blobs[d] for d in digests])

    async def touch(self, response_ids: list[str]) -> set[str]:
        """Heartbeat; which of these have a cancel requested (:meth:`request_cancel`)."""
        if not response_ids:
            return set()
        async with guard():
            rows = await self._pool.fetch("UPDATE responses SET updated_at = $1 WHERE id = "
                                          "ANY($2::text[]) RETURNING id, cancel_requested",
                                          time.time(), response_ids)
        return {str(row[0]) for row in rows if row[1]}

    async def request_cancel(self, response_id: str, owner: str) -> bool:
        """Record a cancel of ``owner``'s response still in flight, for its replica's heartbeat."""
        async with guard():
            status = await self._pool.execute(
                "UPDATE responses SET cancel_requested = TRUE WHERE id = $1 AND owner = $2 AND "
                "status IN ('queued', 'in_progress')", response_id, owner)
        return str(status) != "UPDATE 0"

    async def get(self, response_id: str, owner: str) -> StoredResponse | None:
        async with guard():
            row = await self._pool.fetchrow(
                "SELECT resource, input_items, updated_at FROM responses WHERE id = $1 AND owner = $2",
                response_id, owner)
            if row is None:
                return None
            items, digests = blobs.references(row[1])
            found = {} if not digests else {digest: data for digest, data in await self._pool.fetch(
                "SELECT digest, data FROM blobs WHERE owner = $1 AND digest = ANY($2::text[])",
                owner, digests)}
        return blobs.stored(orjson.loads(row[0]), items, found, float(row[2]))

    async def delete(self, response_id: str, owner: str) -> bool:
        """The response, its events, and the blobs only it referenced (see the module's docstring)."""
        async with guard(), self._pool.acquire() as conn, conn.transaction():
            digests = [row[0] for row in await conn.fetch(
                "SELECT digest FROM response_blobs WHERE id = $1 AND owner = $2 ORDER BY digest",
                response_id, owner)]
            if digests:
                await conn.execute("SELECT 1 FROM blobs WHERE owner = $1 AND digest = ANY($2::text[]) "
                                   "ORDER BY digest FOR UPDATE", owner, digests)
            status = await conn.execute("DELETE FROM responses WHERE id = $1 AND owner = $2",
                                        response_id, owner)
            await conn.execute("DELETE FROM response_events WHERE id = $1 AND owner = $2", response_id, owner)
            if digests:
                await conn.execute("DELETE FROM response_blobs WHERE id = $1 AND owner = $2",
                                   response_id, owner)
                await conn.execute(  # a new statement: it sees every reference committed meanwhile
                    "DELETE FROM blobs b WHERE owner = $1 AND digest = ANY($2::text[]) AND NOT EXISTS "
                    "(SELECT 1 FROM response_blobs r WHERE r.owner = b.owner AND r.digest = b.digest)",
                    owner, digests)
        return status != "DELETE 0"

    async def blob_sizes(self, owner: str) -> dict[str, int]:
        """``owner``'s stored blobs: digest -> bytes."""
        async with guard():
            rows = await self._pool.fetch("SELECT digest, length(data) FROM blobs WHERE owner = $1", owner)
        return {digest: int(size) for digest, size in rows}

    async def put_events(self, response_id: str, owner: str, events: list[Json]) -> None:
        async with guard():
            await self._pool.execute(
                "INSERT INTO response_events (id, owner, events) VALUES ($1, $2, $3) "
                "ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, events = excluded.events",
                response_id, owner, zlib.compress(orjson.dumps(events), 1))

    async def get_events(self, response_id: str, owner: str) -> list[Json] | None:
        async with guard():
            blob = await self._pool.fetchval(
                "SELECT events FROM response_events WHERE id = $1 AND owner = $2", response_id, owner)
        if blob is None:
            return None
        events: list[Json] = orjson.loads(zlib.decompress(blob))
        return events

    async def expire(self, created_before: int) -> int:
        return await _expire(self._pool, _RESPONSES_LOCK, [
            "DELETE FROM response_events WHERE id IN (SELECT id FROM responses WHERE created_at < $1)",
            "DELETE FROM response_blobs WHERE id IN (SELECT id FROM responses WHERE created_at < $1)",
            "DELETE FROM responses WHERE created_at < $1"], created_before,
            after=(("DELETE FROM blobs b WHERE used_at < $1 AND NOT EXISTS (SELECT 1 FROM "
                    "response_blobs r WHERE r.owner = b.owner AND r.digest = b.digest)",
                    time.time() - blobs.SWEEP_GRACE),))

    async def page(self, owner: str, *, limit: int, after: str | None, ascending: bool,
                   ) -> list[Json] | None:
        sign, order = (">", "ASC") if ascending else ("<", "DESC")
        async with guard():
            if after is None:
                rows = await self._pool.fetch(
                    f"SELECT resource FROM responses WHERE owner = $1 ORDER BY seq {order} LIMIT $2",
                    owner, limit)
            else:
                seq = await self._pool.fetchval("SELECT seq FROM responses WHERE id = $1 AND owner = $2",
                                                after, owner)
                if seq is None:
                    return None
                rows = await self._pool.fetch(
                    f"SELECT resource FROM responses WHERE owner = $1 AND seq {sign} $2 "
                    f"ORDER BY seq {order} LIMIT $3", owner, seq, limit)
        return [orjson.loads(row[0]) for row in rows]

    async def close(self) -> None:
        if self._owns:
            await self._pool.close()


class PostgresConversationStore:
    """:class:`~app.stores.base.ConversationStore` on PostgreSQL."""

    def __init__(self, pool: asyncpg.Pool, *, owns_pool: bool = False) -> None:
        self._pool = pool
        self._owns = owns_pool

    async def create(self, conversation_id: str, owner: str, created_at: int,
                     metadata: dict[str, str], items: list[Json]) -> Json:
        async with guard(), self._pool.acquire() as conn, conn.transaction():
            await conn.execute("INSERT INTO conversations (id, owner, created_at, metadata) "
                               "VALUES ($1, $2, $3, $4)", conversation_id, owner, created_at,
                               orjson.dumps(metadata))
            await self._insert(conn, conversation_id, owner, items)
        return conversation_resource(conversation_id, created_at, metadata)

    @staticmethod
    async def _insert(conn: Any, conversation_id: str, owner: str, items: list[Json]) -> None:
        if items:
            await conn.executemany(
                "INSERT INTO conversation_items (conversation_id, owner, item_id, item) "
                "VALUES ($1, $2, $3, $4)",
                [(conversation_id, owner, str(item["id"]), orjson.dumps(item)) for item in items])

    async def get(self, conversation_id: str, owner: str) -> Json | None:
        async with guard():
            row = await self._pool.fetchrow(
                "SELECT created_at, metadata FROM conversations WHERE id = $1 AND owner = $2",
                conversation_id, owner)
        return None if row is None else conversation_resource(conversation_id, int(row[0]),
                                                              orjson.loads(row[1]))

    async def set_metadata(self, conversation_id: str, owner: str, metadata: dict[str, str],
                           ) -> Json | None:
        async with guard():
            row = await self._pool.fetchrow(
                "UPDATE conversations SET metadata = $1 WHERE id = $2 AND owner = $3 RETURNING created_at",
                orjson.dumps(metadata), conversation_id, owner)
        return None if row is None else conversation_resource(conversation_id, int(row[0]), metadata)

    async def delete(self, conversation_id: str, owner: str) -> bool:
        async with guard(), self._pool.acquire() as conn, conn.transaction():
            status = await conn.execute("DELETE FROM conversations WHERE id = $1 AND owner = $2",
                                        conversation_id, owner)
            await conn.execute("DELETE FROM conversation_items WHERE conversation_id = $1 AND owner = $2",
                               conversation_id, owner)
        return status != "DELETE 0"

    async def append(self, conversation_id: str, owner: str, items: list[Json]) -> bool:
        async with guard(), self._pool.acquire() as conn, conn.transaction():
            found = await conn.fetchval("SELECT 1 FROM conversations WHERE id = $1 AND owner = $2 "
                                        "FOR KEY SHARE", conversation_id, owner)
            if found is None:
                return False
            await self._insert(conn, conversation_id, owner, items)
        return True

    async def items(self, conversation_id: str, owner: str) -> list[Json]:
        async with guard():
            rows = await self._pool.fetch("SELECT item FROM conversation_items WHERE conversation_id = $1 "
                                          "AND owner = $2 ORDER BY seq", conversation_id, owner)
        return [orjson.loads(row[0]) for row in rows]

    async def page(self, conversation_id: str, owner: str, *, limit: int, after: str | None,
                   ascending: bool) -> list[Json] | None:
        sign, order = (">", "ASC") if ascending else ("<", "DESC")
        async with guard():
            if after is None:
                rows = await self._pool.fetch(
                    f"SELECT item FROM conversation_items WHERE conversation_id = $1 AND owner = $2 "
                    f"ORDER BY seq {order} LIMIT $3", conversation_id, owner, limit)
            else:
                seq = await self._pool.fetchval(
                    "SELECT MAX(seq) FROM conversation_items WHERE conversation_id = $1 AND owner = $2 "
                    "AND item_id = $3", conversation_id, owner, after)
                if seq is None:
                    return None
                rows = await self._pool.fetch(
                    f"SELECT item FROM conversation_items WHERE conversation_id = $1 AND owner = $2 "
                    f"AND seq {sign} $3 ORDER BY seq {order} LIMIT $4", conversation_id, owner, seq, limit)
        return [orjson.loads(row[0]) for row in rows]

    async def item(self, conversation_id: str, owner: str, item_id: str) -> Json | None:
        async with guard():
            blob = await self._pool.fetchval(
                "SELECT item FROM conversation_items WHERE conversation_id = $1 AND owner = $2 "
                "AND item_id = $3 ORDER BY seq DESC LIMIT 1", conversation_id, owner, item_id)
        return None if blob is None else dict(orjson.loads(blob))

    async def expire(self, created_before: int) -> int:
        return await _expire(self._pool, _CONVERSATIONS_LOCK, [
            "DELETE FROM conversation_items WHERE conversation_id IN "
            "(SELECT id FROM conversations WHERE created_at < $1)",
            "DELETE FROM conversations WHERE created_at < $1"], created_before)

    async def delete_item(self, conversation_id: str, owner: str, item_id: str) -> bool:
        async with guard():
            status = await self._pool.execute(
                "DELETE FROM conversation_items WHERE conversation_id = $1 AND owner = $2 AND item_id = $3",
                conversation_id, owner, item_id)
        return status != "DELETE 0"

    async def close(self) -> None:
        if self._owns:
            await self._pool.close()
