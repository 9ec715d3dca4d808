"""The batch tests' stores: each test runs on SQLite (with the local file store) and on
PostgreSQL (one server per module, a fresh database per test)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import aiosqlite
import pytest

from app.batches.model import BatchStore
from app.batches.postgres_batches import PostgresBatchStore
from app.batches.sqlite_batches import SqliteBatchStore
from app.knowledge.files import FileStore
from app.knowledge.local_files import LocalFileStore
from app.knowledge.postgres_files import PostgresFileStore
from tests.support.postgres import fresh_pool, postgres_server


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    with postgres_server() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
async def stores(request: pytest.FixtureRequest) -> AsyncIterator[tuple[BatchStore, FileStore]]:
    if request.param == "sqlite":
        db = await aiosqlite.connect(":memory:")
        yield await SqliteBatchStore.open(db), await LocalFileStore.create(db, None)
        await db.close()
    else:
        pool = await fresh_pool(request.getfixturevalue("postgres"))
        yield PostgresBatchStore(pool), PostgresFileStore(pool)
        await pool.close()
