"""The file store contract of app/knowledge/files.py, held by every implementation: SQLite +
a directory (a file, and ``:memory:`` with a temporary directory) and PostgreSQL (a real
server, tests/support/postgres.py) run the same scenarios (owners, streamed puts bounded as
they stream, metadata after the bytes, pages, deletes, the expiry sweep)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiosqlite
import pytest

from app.core.errors import InvalidRequest
from app.knowledge.files import CHUNK, FileStore, FileTooLarge, NewFile, read_all
from app.knowledge.local_files import LocalFileStore
from app.knowledge.postgres_files import PostgresFileStore
from app.stores.postgres import migrate
from tests.support.postgres import fresh_pool, postgres_server


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    with postgres_server() as url:
        yield url


@pytest.fixture(params=["sqlite", "memory", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[FileStore]:
    if request.param == "postgres":
        pool = await fresh_pool(request.getfixturevalue("postgres"))
        await migrate(pool)
        made: FileStore = PostgresFileStore(pool, owns_pool=True)
        yield made
        await made.close()
        return
    db = await aiosqlite.connect(":memory:" if request.param == "memory" else tmp_path / "s.sqlite3")
    local = await LocalFileStore.create(db, None if request.param == "memory" else tmp_path / "files")
    yield local
    await local.close()
    await db.close()


async def chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        await asyncio.sleep(0)
        yield part


def described(name: str = "a.txt", purpose: str = "user_data", expires_at: int | None = None,
              ) -> NewFile:
    return NewFile(name, purpose, "text/plain", expires_at)


async def put(store: FileStore, owner: str, data: bytes, **kw: object) -> str:
    made = await store.put(owner, chunks(data), lambda: described(**kw),  # type: ignore[arg-type]
                           max_bytes=10 * CHUNK)
    return made.id


async def test_owners_reads_and_deletes(store: FileStore) -> None:
    big = bytes(range(256)) * (CHUNK // 128 + 17)  # several chunks, not a multiple of CHUNK
    made = await store.put("alice", chunks(big[:1000], big[1000:]), lambda: described("big.bin"),
                           max_bytes=10 * CHUNK)
    assert (made.bytes, made.filename, made.owner) == (len(big), "big.bin", "alice")
    assert await store.get(made.id, "alice") == made
    assert await store.get(made.id, "bob") is None and await store.open(made.id, "bob") is None
    whole = await read_all(store, made.id, "alice", 10 * CHUNK)
    assert whole is not None and whole[1] == big
    with pytest.raises(FileTooLarge):
        await read_all(store, made.id, "alice", 100)
    assert not await store.delete(made.id, "bob") and await store.get(made.id, "alice") is not None
    assert await store.delete(made.id, "alice") and await store.get(made.id, "alice") is None
    assert not await store.delete(made.id, "alice") and await store.open(made.id, "alice") is None


async def test_empty_file(store: FileStore) -> None:
    fid = await put(store, "alice", b"")
    whole = await read_all(store, fid, "alice", 10)
    assert whole is not None and whole[0].bytes == 0 and whole[1] == b""


async def test_a_put_past_the_limit_stops_reading_and_keeps_nothing(store: FileStore) -> None:
    read = 0

    async def endless() -> AsyncIterator[bytes]:
        nonlocal read
        while True:
            read += 65536
            yield b"x" * 65536

    with pytest.raises(FileTooLarge):
        await store.put("alice", endless(), described, max_bytes=3 * CHUNK)
    assert read <= 3 * CHUNK + 65536
    assert await store.page("alice", purpose=None, limit=10, after=None, ascending=True) == []


async def test_describe_failing_keeps_nothing(store: FileStore) -> None:
    def refuse() -> NewFile:
        raise InvalidRequest("no purpose", param="purpose")

    with pytest.raises(InvalidRequest):
        await store.put("alice", chunks(b"abc"), refuse, max_bytes=100)
    assert await store.page("alice", purpose=None, limit=10, after=None, ascending=True) == []
    if isinstance(store, LocalFileStore):
        assert sorted(p.name for p in store.root.iterdir()) == ["tmp"]
        assert list((store.root / "tmp").iterdir()) == []


async def test_pages_both_ways_and_by_purpose(store: FileStore) -> None:
    ids = [await put(store, "alice", b"x", purpose=p) for p in ("batch", "user_data", "batch")]
    await put(store, "bob", b"y")

    async def page(**kw: object) -> list[str] | None:
        found = await store.page("alice", **{"purpose": None, "limit": 10, "after": None,  # type: ignore[arg-type]
                                             "ascending": True, **kw})
        return None if found is None else [f.id for f in found]

    assert await page() == ids and await page(ascending=False) == ids[::-1]
    assert await page(purpose="batch") == [ids[0], ids[2]]
    assert await page(limit=1, after=ids[0]) == [ids[1]]
    assert await page(after=ids[1], ascending=False) == [ids[0]]
    assert await page(after="file-missing") is None
    bobs = await store.page("bob", purpose=None, limit=10, after=None, ascending=True)
    assert bobs is not None and len(bobs) == 1
    assert await page(after=bobs[0].id) is None  # bob's file is no cursor for alice


async def test_sweep_deletes_only_the_expired(store: FileStore) -> None:
    old = await put(store, "alice", b"old", expires_at=100)
    later = await put(store, "alice", b"later", expires_at=10**10)
    kept = await put(store, "bob", b"kept")
    assert await store.sweep(1000) == 1
    assert await store.get(old, "alice") is None and await store.open(old, "alice") is None
    assert await store.get(later, "alice") is not None and await store.get(kept, "bob") is not None
    assert await store.sweep(1000) == 0


async def test_concurrent_puts(store: FileStore) -> None:
    made = await asyncio.gather(*(put(store, "alice", str(i).encode() * 1000) for i in range(8)))
    assert len(set(made)) == 8
    for i, fid in enumerate(made):
        whole = await read_all(store, fid, "alice", 10**6)
        assert whole is not None and whole[1] == str(i).encode() * 1000


async def test_postgres_down_is_503_never_missing() -> None:
    from app.stores.postgres import StoreUnavailable, open_pool
    from tests.support.postgres import postgres_cluster

    with postgres_cluster() as cluster:
        pool = await open_pool(cluster.url, max_size=2)
        store = PostgresFileStore(pool, owns_pool=True)
        fid = await put(store, "alice", b"kept")
        cluster.stop()
        for call in (store.get(fid, "alice"), store.delete(fid, "alice"), store.sweep(10**10),
                     store.page("alice", purpose=None, limit=1, after=None, ascending=True),
                     store.put("alice", chunks(b"x"), described, max_bytes=10)):
            with pytest.raises(StoreUnavailable):
                await call
        cluster.start()
        assert await store.get(fid, "alice") is not None  # nothing was lost
        pool.terminate()
