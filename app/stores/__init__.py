"""Where the APIs keep state: the store protocols and their contract (:mod:`.base`, and
:mod:`.accounts` for keys and usage), the SQLite implementations (the embedded default),
PostgreSQL ones (``[store] url``) and in-memory ones (:mod:`.memory`, :mod:`.memory_accounts`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import aiosqlite
import asyncpg

from app.config import StoreSettings
from app.core.tracing import traced
from app.stores.accounts import AccountStore
from app.stores.base import ConversationStore, ResponseStore
from app.stores.postgres import PostgresConversationStore, PostgresResponseStore, open_pool
from app.stores.postgres_accounts import PostgresAccountStore
from app.stores.postgres_chat import PostgresChatStore
from app.stores.sqlite_accounts import SqliteAccountStore
from app.stores.sqlite_conversations import SqliteConversationStore
from app.stores.sqlite_responses import SqliteResponseStore

if TYPE_CHECKING:
    from app.knowledge.files import FileStore

log = logging.getLogger("ocm_gateway")


@dataclass
class Stores:
    """The application's stores; ``local`` is the SQLite file's connection (stored chat
    completions when there is no PostgreSQL); ``chat``: their PostgreSQL store, if any."""

    responses: ResponseStore
    conversations: ConversationStore
    local: aiosqlite.Connection
    accounts: AccountStore
    _closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    chat: PostgresChatStore | None = None
    files: FileStore | None = None  # /v1/files (app/knowledge): beside the other tables
    pool: asyncpg.Pool | None = None  # [store] url: the PostgreSQL pool (batches, knowledge)

    async def close(self) -> None:
        for close in self._closers:
            await close()


async def open_stores(path: str, url: str | None = None) -> Stores:
    """SQLite at ``path`` (the embedded default), or PostgreSQL at ``url`` for everything
    stored (responses, conversations, stored chat completions, keys, usage and files)."""
    from app.knowledge.local_files import LocalFileStore, files_dir  # knowledge imports stores
    from app.knowledge.postgres_files import PostgresFileStore

    local = await SqliteResponseStore.open(path)
    if url is None:
        conversations = await SqliteConversationStore.open(path)  # same file, own tables
        accounts = await SqliteAccountStore.open(local.connection)
        files = await LocalFileStore.create(local.connection, files_dir(path))
        return Stores(traced(local, "sqlite"), traced(conversations, "sqlite"), local.connection,
                      traced(accounts, "sqlite"), [local.close, conversations.close, files.close],
                      files=traced(files, "sqlite"))
    pool = await open_pool(url)
    return Stores(traced(PostgresResponseStore(pool), "postgresql"),
                  traced(PostgresConversationStore(pool), "postgresql"), local.connection,
                  traced(PostgresAccountStore(pool), "postgresql"), [pool.close, local.close],
                  traced(PostgresChatStore(pool), "postgresql"),
                  traced(PostgresFileStore(pool), "postgresql"), pool)


async def sweep_files(stores: Stores, every: float) -> None:
    """Run for the life of the process: every ``every`` seconds, delete the files whose
    ``expires_after`` has passed (``[files] sweep_seconds``)."""
    if stores.files is None:
        return
    while True:
        try:
            gone = await stores.files.sweep(int(time.time()))
            if gone:
                log.info("retention: %d expired files deleted", gone)
        except Exception as exc:  # the store is down: next round
            log.warning("retention (files): %s", exc)
        await asyncio.sleep(every)


async def retain(stores: Stores, settings: StoreSettings) -> None:
    """Run for the life of the process: every ``settings.cleanup_seconds``, delete responses and
    conversations older than their TTL (``[store] response_ttl_seconds`` /
    ``conversation_ttl_seconds``; unset: kept)."""
    if settings.response_ttl_seconds is None and settings.conversation_ttl_seconds is None:
        return
    while True:
        now = time.time()
        try:
            if settings.response_ttl_seconds is not None:
                gone = await stores.responses.expire(int(now - settings.response_ttl_seconds))
                if gone:
                    log.info("retention: %d responses deleted", gone)
            if settings.conversation_ttl_seconds is not None:
                gone = await stores.conversations.expire(int(now - settings.conversation_ttl_seconds))
                if gone:
                    log.info("retention: %d conversations deleted", gone)
        except Exception as exc:  # the store is down: next round
            log.warning("retention: %s", exc)
        await asyncio.sleep(settings.cleanup_seconds)
