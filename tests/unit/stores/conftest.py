"""The stores' fixtures: one store of each kind (SQLite file, fresh PostgreSQL database, memory)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from app.stores.base import ConversationStore, ResponseStore
from app.stores.memory import MemoryConversationStore, MemoryResponseStore
from app.stores.postgres import PostgresConversationStore, PostgresResponseStore
from app.stores.sqlite_conversations import SqliteConversationStore
from app.stores.sqlite_responses import SqliteResponseStore
from tests.support.postgres import fresh_pool, postgres_server

KINDS = ["sqlite", "postgres", "memory"]


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    with postgres_server() as url:
        yield url


async def fresh(url: str) -> asyncpg.Pool:
    """A pool on a database of its own (each test starts empty)."""
    pool: asyncpg.Pool = await fresh_pool(url)
    return pool


async def _open(kind: str, request: pytest.FixtureRequest, tmp_path: Path, sqlite: Any, postgres: Any,
                memory: Any) -> Any:
    """One store of ``kind``: a SQLite file, a fresh PostgreSQL database, or memory."""
    if kind == "sqlite":
        return await sqlite.open(tmp_path / "s.sqlite3")
    if kind == "postgres":
        return postgres(await fresh(request.getfixturevalue("postgres")), owns_pool=True)
    return memory()


@pytest.fixture(params=KINDS)
async def responses(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ResponseStore]:
    store: ResponseStore = await _open(request.param, request, tmp_path, SqliteResponseStore,
                                       PostgresResponseStore, MemoryResponseStore)
    yield store
    await store.close()


@pytest.fixture(params=KINDS)
async def conversations(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ConversationStore]:
    store: ConversationStore = await _open(request.param, request, tmp_path, SqliteConversationStore,
                                           PostgresConversationStore, MemoryConversationStore)
    yield store
    await store.close()
