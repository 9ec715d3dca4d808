"""The Vector Stores API in-process, driven by the official OpenAI SDK over the ASGI transport
(``client.vector_stores.*``, ``files.upload_and_poll``, ``file_batches.create_and_poll``,
``search``), with the test fakes of the index and the embedder swapped into the running app;
tenancy with two keys (404 everywhere, identical to a missing object), bad input (400 naming
the parameter), OpenAI's behaviour when the underlying File is deleted, and one pass on the
gateway's own wiring (the SQLite chunk index, no embedder: keyword ranking)."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI

from app.main import create_app
from tests.support.fake_llamacpp import FakeLlamaCpp
from tests.support.gateway import alice_and_bob
from tests.support.knowledge_fakes import FakeHashEmbedder, MemoryChunkIndex
from tests.support.openresponses import expect_error as error

ALICE = {"authorization": "Bearer alice"}
BOB = {"authorization": "Bearer bob"}
STORE_KEYS = {"id", "object", "created_at", "name", "usage_bytes", "file_counts", "status",
              "last_active_at", "metadata", "expires_after", "expires_at"}
FILE_KEYS = {"id", "object", "created_at", "usage_bytes", "vector_store_id", "status", "last_error",
             "attributes", "chunking_strategy"}


@asynccontextmanager
async def served(fakes: bool = True) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
    upstream = FakeLlamaCpp("<|channel|>final<|message|>Ok.<|return|>").transport()
    app = create_app(alice_and_bob(), transport=upstream)
    async with app.router.lifespan_context(app):
        if fakes:
            app.state.knowledge.index = MemoryChunkIndex()
            app.state.knowledge.embedder = FakeHashEmbedder()
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as c:
            yield c, app


def sdk(c: httpx.AsyncClient, key: str = "alice") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url="http://gateway/v1", api_key=key, http_client=c, max_retries=0)


async def upload(client: openai.AsyncOpenAI, text: str, name: str) -> str:
    return (await client.files.create(file=(name, io.BytesIO(text.encode())), purpose="assistants")).id


async def test_the_sdk_end_to_end() -> None:
    async with served() as (c, app):
        client = sdk(c)
        refunds = await upload(client, "Refunds are paid within 14 days of the return.", "refunds.md")
        store = await client.vector_stores.create(
            name="handbook", file_ids=[refunds], metadata={"team": "support"},
            expires_after={"anchor": "last_active_at", "days": 7},
            chunking_strategy={"type": "static", "static": {"max_chunk_size_tokens": 200,
                                                            "chunk_overlap_tokens": 50}})
        raw = (await c.get(f"/v1/vector_stores/{store.id}", headers=ALICE)).json()
        assert set(raw) == STORE_KEYS and raw["object"] == "vector_store"
        assert (store.name, store.metadata, store.expires_after.days if store.expires_after else None) == \
               ("handbook", {"team": "support"}, 7)
        assert store.expires_at == (store.last_active_at or 0) + 7 * 86400
        vs_file = await client.vector_stores.files.upload_and_poll(
            vector_store_id=store.id, file=("warranty.txt", io.BytesIO(b"The warranty code is ZX-42.")),
            poll_interval_ms=20)
        assert vs_file.status == "completed" and vs_file.usage_bytes > 0 and vs_file.last_error is None
        first = await client.vector_stores.files.poll(refunds, vector_store_id=store.id, poll_interval_ms=20)
        assert first.status == "completed"
        assert first.chunking_strategy is not None and first.chunking_strategy.type == "static"
        listed = [f.id async for f in client.vector_stores.files.list(vector_store_id=store.id,
                                                                       filter="completed")]
        assert sorted(listed) == sorted([refunds, vs_file.id])
        raw_file = (await c.get(f"/v1/vector_stores/{store.id}/files/{refunds}", headers=ALICE)).json()
        assert set(raw_file) == FILE_KEYS and raw_file["object"] == "vector_store.file"
        tagged = await client.vector_stores.files.update(file_id=vs_file.id, vector_store_id=store.id,
                                                         attributes={"kind": "warranty", "year": 2026})
        assert tagged.attributes == {"kind": "warranty", "year": 2026}

        page = await client.vector_stores.search(store.id, query="warranty code", max_num_results=1,
                                                 rewrite_query=True)
        assert [(h.file_id, h.filename) for h in page.data] == [(vs_file.id, "warranty.txt")]
        assert page.data[0].content[0].text == "The warranty code is ZX-42." and 0 < page.data[0].score <= 1
        assert page.data[0].attributes == {"kind": "warranty", "year": 2026}
        raw_page = (await c.post(f"/v1/vector_stores/{store.id}/search", headers=ALICE,
                                 json={"query": ["refunds", "days"]})).json()
        assert [raw_page[k] for k in ("object", "search_query", "has_more", "next_page")] == \
               ["vector_store.search_results.page", ["refunds", "days"], False, None]
        filtered = await client.vector_stores.search(
            store.id, query="warranty refunds", filters={"type": "eq", "key": "kind", "value": "warranty"},
            ranking_options={"ranker": "auto", "score_threshold": 0.0})
        assert [h.file_id for h in filtered.data] == [vs_file.id]
        content = [p.text async for p in client.vector_stores.files.content(file_id=refunds,
                                                                             vector_store_id=store.id)]
        assert content == ["Refunds are paid within 14 days of the return."]

        more = [await upload(client, f"note {i}", f"n{i}.txt") for i in range(3)]
        batch = await client.vector_stores.file_batches.create_and_poll(
            vector_store_id=store.id, file_ids=more, poll_interval_ms=20)
        assert batch.status == "completed"
        assert (batch.file_counts.completed, batch.file_counts.total) == (3, 3)
        assert batch.object == "vector_store.files_batch"
        members = [f.id async for f in client.vector_stores.file_batches.list_files(
            batch_id=batch.id, vector_store_id=store.id, order="asc")]
        assert members == more
        per_file = await client.vector_stores.file_batches.create(
            vector_store_id=store.id, files=[{"file_id": more[0], "attributes": {"n": 0}}])
        assert per_file.file_counts.total == 1
        got = await client.vector_stores.retrieve(store.id)
        assert got.file_counts.total == 5 and got.usage_bytes > 0

        renamed = await client.vector_stores.update(store.id, name="renamed", metadata={"v": "2"})
        assert (renamed.name, renamed.metadata) == ("renamed", {"v": "2"})
        second = await client.vector_stores.create(name="second")
        assert [s.id async for s in client.vector_stores.list(limit=1)] == [second.id, store.id]
        assert (await client.vector_stores.files.delete(file_id=refunds, vector_store_id=store.id)).deleted
        assert refunds not in [f.id async for f in client.vector_stores.files.list(vector_store_id=store.id)]
        index = app.state.knowledge.index
        assert any(key[0] == store.id for key in index.stored)
        gone = await client.vector_stores.delete(store.id)
        assert (gone.id, gone.deleted, gone.object) == (store.id, True, "vector_store.deleted")
        assert not any(key[0] == store.id for key in index.stored)  # its chunks went with it
        with pytest.raises(openai.NotFoundError):
            await client.vector_stores.retrieve(store.id)


async def test_another_key_gets_404_everywhere() -> None:
    async with served() as (c, app):
        client = sdk(c)
        fid = await upload(client, "alice's secret", "secret.txt")
        store = await client.vector_stores.create(name="mine", file_ids=[fid])
        await client.vector_stores.files.poll(fid, vector_store_id=store.id, poll_interval_ms=20)
        batch = await client.vector_stores.file_batches.create(vector_store_id=store.id, file_ids=[fid])
        base = f"/v1/vector_stores/{store.id}"
        for method, path, body in (
                ("GET", base, None), ("POST", base, {"name": "x"}), ("DELETE", base, None),
                ("POST", f"{base}/search", {"query": "secret"}), ("GET", f"{base}/files", None),
                ("POST", f"{base}/files", {"file_id": fid}), ("GET", f"{base}/files/{fid}", None),
                ("POST", f"{base}/files/{fid}", {"attributes": {}}),
                ("DELETE", f"{base}/files/{fid}", None), ("GET", f"{base}/files/{fid}/content", None),
                ("POST", f"{base}/file_batches", {"file_ids": [fid]}),
                ("GET", f"{base}/file_batches/{batch.id}", None),
                ("POST", f"{base}/file_batches/{batch.id}/cancel", None),
                ("GET", f"{base}/file_batches/{batch.id}/files", None)):
            theirs = error(await c.request(method, path, headers=BOB, json=body), 404, "vector_store_id")
            ghost = "vs_doesnotexist0000000000"
            nothing = error(await c.request(method, path.replace(store.id, ghost), headers=BOB, json=body),
                            404, "vector_store_id")
            assert theirs["message"].replace(store.id, "X") == nothing["message"].replace(ghost, "X")
        assert (await c.get("/v1/vector_stores", headers=BOB)).json()["data"] == []
        error(await c.get(f"/v1/vector_stores?after={store.id}", headers=BOB), 404, "after")
        # alice's File given by bob is exactly a missing File
        bobs = sdk(c, "bob")
        with pytest.raises(openai.NotFoundError) as theirs_file:
            await bobs.vector_stores.create(file_ids=[fid])
        with pytest.raises(openai.NotFoundError) as no_file:
            await bobs.vector_stores.create(file_ids=["file-doesnotexist00000000"])
        assert theirs_file.value.body["param"] == no_file.value.body["param"] == "file_ids[0]"  # type: ignore[index]
        assert theirs_file.value.body["message"].replace(fid, "X") == \
               no_file.value.body["message"].replace("file-doesnotexist00000000", "X")  # type: ignore[index]
        own = await bobs.vector_stores.create(name="bob's")
        error(await c.post(f"/v1/vector_stores/{own.id}/files", headers=BOB, json={"file_id": fid}), 404,
              "file_id")
        found = (await c.post(f"/v1/vector_stores/{own.id}/search", headers=BOB,
                              json={"query": "secret"})).json()
        assert found["data"] == []
        assert (await client.vector_stores.retrieve(store.id)).file_counts.completed == 1  # untouched
        assert app.state.knowledge.index.stored  # alice's chunks are still there


@pytest.mark.parametrize(("body", "param"), [
    ({"file_ids": "file-x"}, "file_ids"),
    ({"name": 5}, "name"),
    ({"expires_after": {"anchor": "created_at", "days": 1}}, "expires_after.anchor"),
    ({"expires_after": {"anchor": "last_active_at", "days": 0}}, "expires_after.days"),
    ({"expires_after": {"anchor": "last_active_at", "days": "7"}}, "expires_after.days"),
    ({"metadata": {"k": "v" * 513}}, "metadata"),
    ({"chunking_strategy": {"type": "static", "static": {"max_chunk_size_tokens": 50,
                                                         "chunk_overlap_tokens": 0}}},
     "chunking_strategy.static.max_chunk_size_tokens"),
    ({"chunking_strategy": {"type": "static", "static": {"max_chunk_size_tokens": 800,
                                                         "chunk_overlap_tokens": 401}}},
     "chunking_strategy.static.chunk_overlap_tokens"),
    ({"chunking_strategy": {"type": "fancy"}}, "chunking_strategy.type"),
    ({"colour": "blue"}, "colour"),
])
async def test_bad_creates_name_the_parameter(body: dict[str, Any], param: str) -> None:
    async with served() as (c, _):
        error(await c.post("/v1/vector_stores", headers=ALICE, json=body), 400, param)


async def test_bad_file_search_and_batch_input() -> None:
    async with served() as (c, _):
        store = (await c.post("/v1/vector_stores", headers=ALICE, json={})).json()["id"]
        fid = await upload(sdk(c), "text", "a.txt")
        base = f"/v1/vector_stores/{store}"
        for path, body, param in (
                ("/files", {}, "file_id"),
                ("/files", {"file_id": fid, "attributes": {f"k{i}": i for i in range(17)}}, "attributes"),
                ("/files", {"file_id": fid, "attributes": {"k": "v" * 513}}, "attributes.k"),
                ("/files", {"file_id": fid, "attributes": {"k": [1]}}, "attributes.k"),
                ("/files", {"file_id": "file-nope"}, "file_id"),
                ("/search", {"query": ""}, "query"),
                ("/search", {"query": []}, "query"),
                ("/search", {"query": "x", "max_num_results": 51}, "max_num_results"),
                ("/search", {"query": "x", "max_num_results": 0}, "max_num_results"),
                ("/search", {"query": "x", "filters": {"type": "eq", "key": "k"}}, "filters.value"),
                ("/search", {"query": "x", "filters": {"type": "near", "key": "k", "value": 1}},
                 "filters.type"),
                ("/search", {"query": "x", "ranking_options": {"ranker": "best"}}, "ranking_options.ranker"),
                ("/search", {"query": "x", "ranking_options": {"score_threshold": 2}},
                 "ranking_options.score_threshold"),
                ("/file_batches", {}, "file_ids"),
                ("/file_batches", {"file_ids": [fid], "files": [{"file_id": fid}]}, "file_ids"),
                ("/file_batches", {"files": [{"file_id": fid, "chunking_strategy": {"type": "x"}}]},
                 "files[0].chunking_strategy.type"),
                ("/file_batches", {"files": [{"file_id": fid}, {"file_id": "file-nope"}]},
                 "files[1].file_id"),
                ("/file_batches", {"file_ids": [fid, "file-nope"]}, "file_ids[1]")):
            status = 404 if "nope" in str(body) else 400
            error(await c.post(base + path, headers=ALICE, json=body), status, param)
        error(await c.get(f"{base}/files?filter=done", headers=ALICE), 400, "filter")
        error(await c.get("/v1/vector_stores?limit=101", headers=ALICE), 400, "limit")
        error(await c.post(base, headers=ALICE, json={"expires_after": {"anchor": "x", "days": 1}}), 400,
              "expires_after.anchor")
        assert (await c.get(f"{base}/files", headers=ALICE)).json()["data"] == []  # nothing half-added


async def test_deleting_the_file_leaves_the_vector_store_file() -> None:
    """OpenAI's behaviour: a deleted File stays in the vector stores that hold it (and is found)
    until it is removed from them."""
    async with served() as (c, _):
        client = sdk(c)
        fid = await upload(client, "The launch code is 0000.", "codes.txt")
        store = await client.vector_stores.create(file_ids=[fid])
        await client.vector_stores.files.poll(fid, vector_store_id=store.id, poll_interval_ms=20)
        assert (await client.files.delete(fid)).deleted
        kept = await client.vector_stores.files.retrieve(file_id=fid, vector_store_id=store.id)
        assert kept.status == "completed"
        found = await client.vector_stores.search(store.id, query="launch code")
        assert [h.file_id for h in found.data] == [fid]
        await client.vector_stores.files.delete(file_id=fid, vector_store_id=store.id)
        assert (await client.vector_stores.search(store.id, query="launch code")).data == []


async def test_the_gateway_wiring_without_an_embedder() -> None:
    """No fakes: the app's own SQLite chunk index and no [knowledge] embedding_model."""
    async with served(fakes=False) as (c, app):
        assert app.state.knowledge.embedder is None
        client = sdk(c)
        store = await client.vector_stores.create(name="plain")
        done = await client.vector_stores.files.upload_and_poll(
            vector_store_id=store.id, poll_interval_ms=20,
            file=("faq.md", io.BytesIO(b"# FAQ\nShipping to Norway costs 12 EUR.\n")))
        assert done.status == "completed"
        page = await client.vector_stores.search(store.id, query="Norway shipping")
        assert [h.filename for h in page.data] == ["faq.md"] and "12 EUR" in page.data[0].content[0].text
        assert app.state.responses.knowledge is app.state.knowledge  # file_search uses the same facade
