"""Where the APIs keep state: the store protocols and their contract (:mod:`.base`), the
SQLite implementations (the embedded default) and an in-memory one (:mod:`.memory`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import aiosqlite

from app.stores.base import ConversationStore, ResponseStore
from app.stores.sqlite_conversations import SqliteConversationStore
from app.stores.sqlite_responses import SqliteResponseStore


@dataclass
class Stores:
    """The application's stores; ``local`` is the SQLite file's connection (what stays per
    process: stored chat completions)."""

    responses: ResponseStore
    conversations: ConversationStore
    local: aiosqlite.Connection
    _closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    async def close(self) -> None:
        for close in self._closers:
            await close()


async def open_stores(path: str, url: str | None = None) -> Stores:
    """SQLite at ``path`` (the embedded default), or PostgreSQL at ``url`` for the responses
    and conversations (``pip install 'ocm-gateway[postgres]'``)."""
    local = await SqliteResponseStore.open(path)
    if url is None:
        conversations = await SqliteConversationStore.open(path)  # same file, own tables
        return Stores(local, conversations, local.connection, [local.close, conversations.close])
    try:
        from app.stores.postgres import PostgresConversationStore, PostgresResponseStore, open_pool
    except ImportError as exc:  # pragma: no cover - the extra is part of the test install
        raise RuntimeError("[store] url names PostgreSQL: pip install 'ocm-gateway[postgres]' "
                           "(asyncpg)") from exc
    pool = await open_pool(url)
    return Stores(PostgresResponseStore(pool), PostgresConversationStore(pool), local.connection,
                  [pool.close, local.close])
