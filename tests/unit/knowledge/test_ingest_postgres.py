"""Ingestion with N replicas on one PostgreSQL (a real server, tests/support/postgres.py): two
knowledge facades, each with its own pool, workers and (fake) embedder, sharing the database and
one index — every file is embedded by exactly one replica, and a replica that dies holding a job
(it stops renewing its lease) has it taken over by the other."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest

from app.knowledge.catalog import Job
from app.knowledge.files import NewFile
from app.knowledge.postgres_catalog import PostgresCatalog
from app.knowledge.postgres_files import PostgresFileStore
from app.knowledge.service import Knowledge
from tests.support.knowledge_fakes import FakeHashEmbedder, MemoryChunkIndex
from tests.support.postgres import fresh_database, postgres_server

OWNER = "alice"


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    with postgres_server() as url:
        yield url


class DeadCatalog(PostgresCatalog):
    """A replica that died after claiming: it never renews nor gives anything back."""

    async def renew(self, job: Job, now: float, lease: float = 60.0) -> bool:
        return True

    async def release(self, job: Job) -> None:
        return None


@pytest.fixture
async def pools(postgres: str) -> AsyncIterator[tuple[asyncpg.Pool, asyncpg.Pool]]:
    from app.stores.postgres import open_pool

    url = await fresh_database(postgres)
    a, b = await open_pool(url, max_size=4), await open_pool(url, max_size=4)
    yield a, b
    await a.close()
    await b.close()


async def upload(files: PostgresFileStore, text: str) -> str:
    async def body() -> AsyncIterator[bytes]:
        yield text.encode()

    made = await files.put(OWNER, body(), lambda: NewFile(f"{text[:8]}.txt", "assistants", "text/plain"),
                           max_bytes=1 << 20)
    return made.id


async def settled(k: Knowledge, store_id: str, file_ids: list[str], within: float = 30) -> list[str]:
    deadline = time.monotonic() + within
    while True:
        found = [(await k.get_file(OWNER, store_id, f)).status for f in file_ids]
        if "in_progress" not in found or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.05)


async def test_each_file_is_embedded_by_one_replica(pools: tuple[asyncpg.Pool, asyncpg.Pool]) -> None:
    index = MemoryChunkIndex()
    embedders = [FakeHashEmbedder(), FakeHashEmbedder()]
    replicas = [Knowledge(PostgresCatalog(pool), PostgresFileStore(pool), index, e, concurrency=2,
                          poll_seconds=0.05) for pool, e in zip(pools, embedders, strict=True)]
    texts = [f"document number {i} about topic {i * 7}" for i in range(10)]
    file_ids = [await upload(PostgresFileStore(pools[0]), t) for t in texts]
    for k in replicas:
        k.start()
    try:
        store = await replicas[0].create_store(OWNER, file_ids=file_ids)
        assert await settled(replicas[1], store.id, file_ids) == ["completed"] * 10
    finally:
        for k in replicas:
            await k.close()
    embedded = Counter(text for e in embedders for call in e.calls for text in call)
    assert embedded == Counter(texts)  # each exactly once, whichever replica took it
    hits = await replicas[1].search(OWNER, [store.id], "document number 3 topic 21")
    assert hits[0].file_id == file_ids[3]


async def test_a_dead_replicas_job_is_taken_over(pools: tuple[asyncpg.Pool, asyncpg.Pool]) -> None:
    index = MemoryChunkIndex()
    dying = FakeHashEmbedder()
    dying.gate = asyncio.Event()  # it never gets past embedding: it "died" there
    a = Knowledge(DeadCatalog(pools[0]), PostgresFileStore(pools[0]), index, dying, poll_seconds=0.05,
                  lease_seconds=0.6)
    b = Knowledge(PostgresCatalog(pools[1]), PostgresFileStore(pools[1]), index, FakeHashEmbedder(),
                  poll_seconds=0.05, lease_seconds=0.6)
    fid = await upload(PostgresFileStore(pools[0]), "orphaned by a dead replica")
    store = await a.create_store(OWNER, file_ids=[fid])
    a.start()
    try:
        for _ in range(500):
            if dying.calls:
                break
            await asyncio.sleep(0.01)
        assert dying.calls
        b.start()
        assert await settled(b, store.id, [fid], within=10) == ["completed"]
        dying.gate.set()  # the zombie wakes up: its finish is refused, it changes nothing
        await asyncio.sleep(0.3)
    finally:
        await a.close()
        await b.close()
    assert (await b.get_file(OWNER, store.id, fid)).status == "completed"
    assert index.stored[(store.id, fid)][0].text == "orphaned by a dead replica"
