"""Two gateway replicas (two apps) on one PostgreSQL, through the OpenAI SDK: a file uploaded
and added to a vector store on replica A is ingested once and searched on replica B; replica B
sees A's store, files and counters (the test fakes of the index and embedder stand in for
pgvector, which Debian's PostgreSQL here lacks — the gateway still starts and says so)."""

from __future__ import annotations

import hashlib
import io
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import httpx
import openai
import pytest
from fastapi import FastAPI

from app.config import GatewayConfig
from app.main import create_app
from tests.support.fake_llamacpp import FakeLlamaCpp
from tests.support.gateway import config
from tests.support.knowledge_fakes import FakeHashEmbedder, MemoryChunkIndex
from tests.support.postgres import fresh_database, postgres_server


@asynccontextmanager
async def replica(url: str, index: MemoryChunkIndex) -> AsyncIterator[tuple[openai.AsyncOpenAI, FastAPI]]:
    keys = [{"name": "alice", "sha256": hashlib.sha256(b"alice").hexdigest()}]
    cfg = GatewayConfig.model_validate({**config().model_dump(), "auth": {"keys": keys},
                                        "store": {"path": ":memory:", "url": url}})
    app = create_app(cfg, transport=FakeLlamaCpp("x").transport())
    async with app.router.lifespan_context(app):
        knowledge = app.state.knowledge
        assert knowledge.index is None and knowledge.index_error is not None  # no pgvector here
        knowledge.index, knowledge.embedder, knowledge.poll_seconds = index, FakeHashEmbedder(), 0.05
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
            yield openai.AsyncOpenAI(base_url="http://gw/v1", api_key="alice", http_client=c,
                                     max_retries=0), app


async def test_upload_on_one_replica_search_on_the_other() -> None:
    with postgres_server() as server:
        url = await fresh_database(server)
        index = MemoryChunkIndex()
        async with AsyncExitStack() as stack:
            a, app_a = await stack.enter_async_context(replica(url, index))
            b, app_b = await stack.enter_async_context(replica(url, index))
            store = await a.vector_stores.create(name="shared")
            done = await a.vector_stores.files.upload_and_poll(
                vector_store_id=store.id, file=("faq.md", io.BytesIO(b"Parcels to Norway cost 12 EUR.")),
                poll_interval_ms=20)
            assert done.status == "completed"
            seen = await b.vector_stores.retrieve(store.id)
            assert (seen.name, seen.file_counts.completed) == ("shared", 1)
            assert seen.usage_bytes == done.usage_bytes
            page = await b.vector_stores.search(store.id, query="Norway parcels")
            assert [h.file_id for h in page.data] == [done.id]
            embedded = app_a.state.knowledge.embedder.calls + app_b.state.knowledge.embedder.calls
            assert [t for call in embedded for t in call].count("Parcels to Norway cost 12 EUR.") == 1
            assert (await b.vector_stores.delete(store.id)).deleted
            with pytest.raises(openai.NotFoundError):
                await a.vector_stores.retrieve(store.id)
