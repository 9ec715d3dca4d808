"""Background ingestion (app/knowledge/ingest.py) on the real SQLite catalog and file store, with
the test fakes of the index and the embedder (tests/support/knowledge_fakes.py): files become
chunks with vectors and statuses as OpenAI reports them; bad files fail alone; transient
embedder failures are tried again; removed files, cancelled batches and shutdowns stop the
work cleanly; a restart resumes what a dead process left; CPU work runs off the event loop."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiosqlite
import pytest

from app.core.errors import InvalidRequest, UpstreamError
from app.formats.harmony.vocab import harmony_encoding
from app.knowledge import extract as extract_module
from app.knowledge import ingest
from app.knowledge.catalog import FileRecord, NewStore
from app.knowledge.files import NewFile
from app.knowledge.local_files import LocalFileStore
from app.knowledge.service import Knowledge
from app.knowledge.sqlite_catalog import SqliteCatalog
from app.knowledge.vectors import EmbeddingModelChanged, EmbeddingSpace
from tests.support.knowledge_fakes import FAKE_DIMENSIONS, FakeHashEmbedder, MemoryChunkIndex
from tests.support.pdf import make_pdf

OWNER = "alice"


class World:
    def __init__(self, db: aiosqlite.Connection, files: LocalFileStore, catalog: SqliteCatalog) -> None:
        self.db, self.files, self.catalog = db, files, catalog
        self.index = MemoryChunkIndex()
        self.embedder: FakeHashEmbedder | None = FakeHashEmbedder()

    def knowledge(self, **kw: Any) -> Knowledge:
        return Knowledge(self.catalog, self.files, self.index, self.embedder, poll_seconds=0.05, **kw)

    async def upload(self, data: bytes, name: str = "a.md") -> str:
        async def body() -> AsyncIterator[bytes]:
            yield data

        made = await self.files.put(OWNER, body(), lambda: NewFile(name, "assistants", "text/plain"),
                                    max_bytes=1 << 24)
        return made.id

    async def ingest(self, data: bytes) -> tuple[Knowledge, str, FileRecord]:
        """``data`` uploaded, a store made of it and ingested: the service (closed), the store's
        id and the file as it settled."""
        fid = await self.upload(data)
        k = self.knowledge()
        store = await k.create_store(OWNER, file_ids=[fid])
        k.start()
        try:
            return k, store.id, await settled(k, store.id, fid)
        finally:
            await k.close()


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    db = await aiosqlite.connect(tmp_path / "s.sqlite3")
    files = await LocalFileStore.create(db, tmp_path / "files")
    yield World(db, files, await SqliteCatalog.create(db))
    await db.close()


async def settled(k: Knowledge, store_id: str, file_id: str, within: float = 20) -> FileRecord:
    deadline = time.monotonic() + within
    while True:
        found = await k.get_file(OWNER, store_id, file_id)
        if found.status != "in_progress" or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.02)


async def embedding(embedder: FakeHashEmbedder) -> None:
    """Until the embedder has been called."""
    for _ in range(2000):
        if embedder.calls:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the embedder was never called")


async def test_files_become_chunks_with_vectors(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[str] = []
    real = extract_module.extract

    def spy(*args: Any) -> str:
        threads.append(threading.current_thread().name)
        return real(*args)

    monkeypatch.setattr(extract_module, "extract", spy)
    text = "Refunds take 14 days. " * 400
    md = await world.upload(text.encode(), "policy.md")
    pdf = await world.upload(make_pdf("The warranty code is ZX-42."), "warranty.pdf")
    k = world.knowledge()
    k.start()
    try:
        store = await k.create_store(OWNER, name="docs", file_ids=[md, pdf],
                                     chunking_strategy={"type": "static", "static": {
                                         "max_chunk_size_tokens": 300, "chunk_overlap_tokens": 100}})
        done = [await settled(k, store.id, f) for f in (md, pdf)]
    finally:
        await k.close()
    assert [d.status for d in done] == ["completed", "completed"]
    assert all(name.startswith("ocm-ingest") for name in threads) and len(threads) == 2
    chunks = world.index.stored[(store.id, md)]
    assert len(chunks) > 5
    assert all(len(c.vector) == FAKE_DIMENSIONS and c.filename == "policy.md" for c in chunks)
    assert [c.index for c in chunks] == list(range(len(chunks)))
    assert done[0].usage_bytes == sum(len(c.text.encode()) + 4 * FAKE_DIMENSIONS for c in chunks)
    assert "ZX-42" in world.index.stored[(store.id, pdf)][0].text
    got = await k.get_store(OWNER, store.id)
    assert got.status == "completed" and got.usage_bytes == sum(d.usage_bytes for d in done)
    assert got.space == EmbeddingSpace("fake-hash-embedder", FAKE_DIMENSIONS)
    assert all(len(call) <= ingest.EMBED_GROUP for call in world.embedder.calls)  # type: ignore[union-attr]


async def test_bad_files_fail_alone(world: World) -> None:
    good = await world.upload(b"fine text", "ok.txt")
    docx = await world.upload(b"PK\x03\x04 not supported", "report.docx")
    latin = await world.upload(b"caf\xe9", "latin.txt")
    gone = await world.upload(b"deleted before it was read", "gone.txt")
    k = world.knowledge()
    store = await k.create_store(OWNER, file_ids=[good, docx, latin, gone])
    assert await world.files.delete(gone, OWNER)  # OpenAI keeps the vector-store file: it fails
    k.start()
    try:
        found = {f: await settled(k, store.id, f) for f in (good, docx, latin, gone)}
    finally:
        await k.close()
    assert found[good].status == "completed"
    assert found[docx].resource()["last_error"]["code"] == "unsupported_file"
    assert found[latin].resource()["last_error"] == {"code": "invalid_file",
                                                      "message": "The file is not UTF-8 text."}
    assert found[gone].last_error == ("invalid_file", "The file was deleted before it was processed.")
    assert set(world.index.stored) == {(store.id, good)}
    counts = (await k.get_store(OWNER, store.id)).counts.resource()
    assert counts == {"in_progress": 0, "completed": 1, "failed": 3, "cancelled": 0, "total": 4}


async def test_transient_embedder_failures_are_tried_again(world: World, monkeypatch: pytest.MonkeyPatch,
                                                           ) -> None:
    monkeypatch.setattr(ingest, "RETRY_SECONDS", 0.1)
    assert world.embedder is not None
    world.embedder.fail_with = UpstreamError("the embedding server is restarting", status=503)
    fid = await world.upload(b"some text to embed")
    k = world.knowledge(lease_seconds=2.0)
    store = await k.create_store(OWNER, file_ids=[fid])
    k.start()
    try:
        await embedding(world.embedder)
        world.embedder.fail_with = None
        await asyncio.sleep(0.02)
        assert (await k.get_file(OWNER, store.id, fid)).status == "in_progress"  # given back, not failed
        done = await settled(k, store.id, fid)
    finally:
        await k.close()
    assert done.status == "completed" and len(world.embedder.calls) == 2


async def test_a_refusing_embedder_fails_the_file(world: World) -> None:
    assert world.embedder is not None
    world.embedder.fail_with = UpstreamError("input too long", status=400)
    _, _, done = await world.ingest(b"some text")
    assert done.status == "failed" and done.last_error is not None
    assert done.last_error[0] == "server_error" and "input too long" in done.last_error[1]


async def test_without_an_embedder_chunks_are_keyword_only(world: World) -> None:
    world.embedder = None
    k, store_id, done = await world.ingest(b"keyword only")
    assert done.status == "completed" and world.index.stored[(store_id, done.file_id)][0].vector == []
    assert (await k.get_store(OWNER, store_id)).space is None


async def test_removing_a_file_mid_ingestion_stops_it(world: World) -> None:
    assert world.embedder is not None
    world.embedder.gate = asyncio.Event()
    fid = await world.upload(b"slow to embed")
    k = world.knowledge(lease_seconds=0.3)
    store = await k.create_store(OWNER, file_ids=[fid])
    k.start()
    try:
        await embedding(world.embedder)
        await k.remove_file(OWNER, store.id, fid)
        await asyncio.sleep(0.4)  # the next renewal is refused: the work stops
        world.embedder.gate.set()
        await asyncio.sleep(0.2)
    finally:
        await k.close()
    assert world.index.stored == {}
    assert (await k.get_store(OWNER, store.id)).counts.total == 0


async def test_a_cancelled_batch_leaves_no_chunks(world: World) -> None:
    assert world.embedder is not None
    world.embedder.gate = asyncio.Event()
    fid = await world.upload(b"batch member")
    k = world.knowledge(lease_seconds=0.3)
    store = await k.create_store(OWNER)
    k.start()
    try:
        batch = await k.create_batch(OWNER, store.id, file_ids=[fid])
        await embedding(world.embedder)
        cancelled = await k.cancel_batch(OWNER, store.id, batch.id)
        world.embedder.gate.set()
        await asyncio.sleep(0.5)
    finally:
        await k.close()
    assert cancelled.status == "cancelled" and cancelled.counts.cancelled == 1
    assert (await k.get_file(OWNER, store.id, fid)).status == "cancelled"
    assert world.index.stored == {}


async def test_a_shutdown_gives_the_job_back_and_a_restart_resumes(world: World, tmp_path: Path) -> None:
    assert world.embedder is not None
    world.embedder.gate = asyncio.Event()
    fid = await world.upload(b"interrupted")
    k = world.knowledge()
    store = await k.create_store(OWNER, file_ids=[fid])
    k.start()
    await embedding(world.embedder)
    await k.close()  # shutting down mid-job
    assert (await k.get_file(OWNER, store.id, fid)).status == "in_progress"
    world.embedder.gate = None
    again = world.knowledge()
    again.start()
    try:
        done = await settled(again, store.id, fid)
    finally:
        await again.close()
    assert done.status == "completed"
    # a process that died holding a job: its lease is dropped when the catalog opens again
    other = await world.upload(b"claimed by a process that died")
    await k.add_file(OWNER, store.id, other)
    dead = await world.catalog.claim(time.time(), lease=3600)
    assert dead is not None and dead.file_id == other
    reopened = World(world.db, world.files, await SqliteCatalog.create(world.db))
    third = reopened.knowledge()
    third.start()
    try:
        assert (await settled(third, store.id, other)).status == "completed"
    finally:
        await third.close()


async def test_another_embedding_model_is_refused(world: World) -> None:
    fid = await world.upload(b"text")
    made = await world.catalog.create_store(NewStore(OWNER, "old", space=EmbeddingSpace("old-model", 8)),
                                            [], int(time.time()))
    k = world.knowledge()
    with pytest.raises(EmbeddingModelChanged):
        await k.add_file(OWNER, made.id, fid)
    with pytest.raises(EmbeddingModelChanged):
        await k.search(OWNER, [made.id], "text")


async def test_expired_stores_lose_their_chunks(world: World) -> None:
    fid = await world.upload(b"short lived")
    k = world.knowledge(sweep_seconds=0.05)
    store = await k.create_store(OWNER, file_ids=[fid], expires_after_days=1)
    k.start()
    try:
        await settled(k, store.id, fid)
        assert (store.id, fid) in world.index.stored
        await world.db.execute("UPDATE vector_stores SET expires_at = 1 WHERE id = ?", (store.id,))
        await world.db.commit()
        for _ in range(250):
            if (store.id, fid) not in world.index.stored:
                break
            await asyncio.sleep(0.02)
    finally:
        await k.close()
    assert world.index.stored == {}
    assert (await k.get_store(OWNER, store.id)).status == "expired"
    for refused in (k.search(OWNER, [store.id], "short"), k.add_file(OWNER, store.id, fid)):
        with pytest.raises(InvalidRequest) as bad:
            await refused
        assert bad.value.code == "vector_store_expired" and bad.value.status == 400


async def test_a_large_file_never_stalls_the_event_loop(world: World) -> None:
    """Extraction and chunking of a 1.3 MB file run in the ingestion's threads: a ticker on the
    event loop keeps ticking (no embedder here: the fake's hashing would run on the loop)."""
    text = "\n".join(f"line {i}: the refund policy covers parcel {i % 97} shipped to Norway."
                     for i in range(20000))
    fid = await world.upload(text.encode(), "big.md")
    harmony_encoding()  # loaded at start-up, as the app's lifespan does (0.7 s holding the GIL)
    world.embedder = None
    k = world.knowledge()
    gaps: list[float] = []

    async def tick() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.005)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    store = await k.create_store(OWNER, file_ids=[fid])
    k.start()
    try:
        done = await settled(k, store.id, fid, within=60)
    finally:
        await k.close()
        ticker.cancel()
    assert done.status == "completed" and len(world.index.stored[(store.id, fid)]) > 100
    assert max(gaps) < 0.25, sorted(gaps)[-5:]
