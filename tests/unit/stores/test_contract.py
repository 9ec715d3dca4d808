"""The store contract of app/stores/base.py, held by every implementation: SQLite (a file),
PostgreSQL (a real server, tests/support/postgres.py) and memory run the same scenarios
(owners, upserts in place, paging both ways, events, conversation items, concurrency)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import orjson
import pytest

from app.stores.base import ConversationStore, ResponseStore
from app.stores.postgres import MIGRATIONS, PostgresResponseStore, migrate, open_pool
from tests.unit.stores.conftest import fresh

Json = dict[str, Any]


def response(rid: str, status: str = "completed") -> Json:
    return {"id": rid, "object": "response", "created_at": 1, "status": status, "output": []}


async def test_responses_owners_upserts_and_pages(responses: ResponseStore) -> None:
    for rid in ("r1", "r2", "r3"):
        await responses.put(response(rid, "in_progress"), [{"id": f"i{rid}"}], "alice")
    await responses.put(response("x1"), [], "bob")
    await responses.put(response("r1", "completed"), [{"id": "changed"}], "alice")  # in place
    got = await responses.get("r1", "alice")
    assert got is not None and got.resource["status"] == "completed"
    assert got.input_items == [{"id": "changed"}] and got.updated_at > 0
    assert await responses.get("r1", "bob") is None and await responses.get("nope", "alice") is None
    ids = lambda page: [r["id"] for r in page]  # noqa: E731
    assert ids(await responses.page("alice", limit=10, after=None, ascending=True)) == ["r1", "r2", "r3"]
    assert ids(await responses.page("alice", limit=10, after=None, ascending=False)) == ["r3", "r2", "r1"]
    assert ids(await responses.page("alice", limit=1, after="r1", ascending=True)) == ["r2"]
    assert ids(await responses.page("alice", limit=10, after="r2", ascending=False)) == ["r1"]
    assert await responses.page("alice", limit=10, after="x1", ascending=True) is None  # bob's
    assert not await responses.delete("r2", "bob")
    assert await responses.delete("r2", "alice") and await responses.get("r2", "alice") is None
    assert not await responses.delete("r2", "alice")


async def test_responses_events_and_heartbeats(responses: ResponseStore) -> None:
    await responses.put(response("r1", "in_progress"), [], "alice")
    first = await responses.get("r1", "alice")
    assert first is not None
    await responses.touch(["r1", "missing"])
    again = await responses.get("r1", "alice")
    assert again is not None and again.updated_at >= first.updated_at
    events = [{"type": "response.created", "sequence_number": 0}, {"type": "response.completed"}]
    await responses.put_events("r1", "alice", events)
    assert await responses.get_events("r1", "alice") == events
    assert await responses.get_events("r1", "bob") is None
    assert await responses.delete("r1", "alice") and await responses.get_events("r1", "alice") is None


async def test_stored_objects_are_copies(responses: ResponseStore) -> None:
    resource = response("r1")
    await responses.put(resource, [], "alice")
    resource["status"] = "mutated"
    got = await responses.get("r1", "alice")
    assert got is not None and got.resource["status"] == "completed"
    got.resource["status"] = "mutated again"
    again = await responses.get("r1", "alice")
    assert again is not None and again.resource["status"] == "completed"


async def test_conversations(conversations: ConversationStore) -> None:
    made = await conversations.create("c1", "alice", 7, {"k": "v"}, [{"id": "a"}, {"id": "b"}])
    assert made == {"id": "c1", "object": "conversation", "created_at": 7, "metadata": {"k": "v"}}
    assert await conversations.get("c1", "bob") is None
    assert await conversations.append("c1", "alice", [{"id": "c"}, {"id": "b", "v": 2}])
    assert not await conversations.append("c1", "bob", [{"id": "z"}])
    assert not await conversations.append("nope", "alice", [{"id": "z"}])
    assert await conversations.append("c1", "alice", [])  # an empty append of an existing one
    assert [i["id"] for i in await conversations.items("c1", "alice")] == ["a", "b", "c", "b"]
    assert await conversations.items("c1", "bob") == []
    assert await conversations.item("c1", "alice", "b") == {"id": "b", "v": 2}  # the latest
    page = await conversations.page("c1", "alice", limit=2, after="a", ascending=True)
    assert page is not None and [i["id"] for i in page] == ["b", "c"]
    page = await conversations.page("c1", "alice", limit=10, after=None, ascending=False)
    assert page is not None and [i["id"] for i in page] == ["b", "c", "b", "a"]
    assert await conversations.page("c1", "alice", limit=10, after="zz", ascending=True) is None
    assert await conversations.delete_item("c1", "alice", "b")
    assert [i["id"] for i in await conversations.items("c1", "alice")] == ["a", "c"]
    assert not await conversations.delete_item("c1", "alice", "b")
    meta = await conversations.set_metadata("c1", "alice", {"x": "y"})
    assert meta is not None and meta["metadata"] == {"x": "y"}
    assert await conversations.set_metadata("c1", "bob", {}) is None
    assert not await conversations.delete("c1", "bob")
    assert await conversations.delete("c1", "alice") and await conversations.get("c1", "alice") is None
    assert not await conversations.append("c1", "alice", [{"id": "late"}])


async def test_concurrent_appends_and_a_racing_delete(conversations: ConversationStore) -> None:
    await conversations.create("c1", "alice", 1, {}, [])

    async def writer(w: int) -> None:
        for n in range(10):
            assert await conversations.append("c1", "alice", [{"id": f"w{w}-{n}-a"}, {"id": f"w{w}-{n}-b"}])

    await asyncio.gather(*(writer(w) for w in range(4)))
    items = await conversations.items("c1", "alice")
    assert len(items) == 80 and len({i["id"] for i in items}) == 80
    for w in range(4):  # each batch whole and in order
        ids = [i["id"] for i in items if i["id"].startswith(f"w{w}-")]
        assert ids == [f"w{w}-{n}-{x}" for n in range(10) for x in "ab"]
    late = (conversations.append("c1", "alice", [{"id": f"late{k}"}]) for k in range(5))
    results = await asyncio.gather(conversations.delete("c1", "alice"), *late)
    assert results[0] is True
    assert await conversations.items("c1", "alice") == []  # nothing orphaned


async def test_postgres_migrations_are_safe_to_run_concurrently(postgres: str) -> None:
    """Several replicas starting at once: each step applied once, every pool usable."""
    name = f"m{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(postgres)
    await admin.execute(f"CREATE DATABASE {name}")
    await admin.close()
    url = postgres.rsplit("/", 1)[0] + f"/{name}"
    pools = await asyncio.gather(*(open_pool(url, max_size=2) for _ in range(4)))
    try:
        steps = len(MIGRATIONS)
        assert await asyncio.gather(*(migrate(p) for p in pools)) == [steps] * 4
        rows = await pools[0].fetch("SELECT version FROM ocm_schema ORDER BY version")
        assert [r[0] for r in rows] == list(range(1, steps + 1))
    finally:
        await asyncio.gather(*(p.close() for p in pools))


async def test_postgres_a_database_of_an_older_version_is_upgraded(postgres: str) -> None:
    """A database made by an older release (step 1 only, with data written as that release
    wrote it) gets step 2 (keys and usage), step 3 (blobs) and step 4 (stored chat
    completions), step 5 (files) at the next start, its data untouched and readable."""

    name = f"u{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(postgres)
    await admin.execute(f"CREATE DATABASE {name}")
    await admin.close()
    url = postgres.rsplit("/", 1)[0] + f"/{name}"
    old = await asyncpg.connect(url)
    await old.execute(MIGRATIONS[0])
    await old.execute("CREATE TABLE ocm_schema (version INT PRIMARY KEY, "
                      "applied_at DOUBLE PRECISION NOT NULL); INSERT INTO ocm_schema VALUES (1, 0)")
    big = {"type": "message", "role": "user", "content": "x" * 20_000}  # inline, as stored then
    await old.execute("INSERT INTO responses (id, owner, created_at, status, resource, input_items, "
                      "updated_at) VALUES ($1, $2, 1, 'completed', $3, $4, 0)", "r-old", "alice",
                      orjson.dumps(response("r-old")), orjson.dumps([big]))
    await old.close()
    pool = await open_pool(url, max_size=2)
    try:
        versions = await pool.fetch("SELECT version FROM ocm_schema ORDER BY version")
        assert [r[0] for r in versions] == list(range(1, len(MIGRATIONS) + 1))
        got = await PostgresResponseStore(pool).get("r-old", "alice")
        assert got is not None and got.input_items == [big]
        assert await pool.fetchval("SELECT count(*) FROM api_keys") == 0
    finally:
        await pool.close()


async def test_postgres_down_is_a_503_not_a_miss(postgres: str) -> None:
    from app.stores.postgres import StoreUnavailable

    store = PostgresResponseStore(await fresh(postgres), owns_pool=True)
    await store.put(response("r1"), [], "alice")
    await store._pool.close()  # as if the server went away under the pool
    with pytest.raises(StoreUnavailable) as failure:
        await store.get("r1", "alice")
    assert failure.value.status == 503


async def test_response_retention_deletes_what_is_older(responses: ResponseStore) -> None:
    for rid, created in (("old1", 100), ("old2", 199), ("new", 300)):
        await responses.put({**response(rid), "created_at": created}, [], "alice")
    await responses.put_events("old1", "alice", [{"type": "x"}])
    assert await responses.expire(200) == 2
    assert await responses.get("old1", "alice") is None
    assert await responses.get_events("old1", "alice") is None
    assert await responses.get("new", "alice") is not None
    assert await responses.expire(200) == 0


async def test_conversation_retention_deletes_what_is_older(conversations: ConversationStore) -> None:
    await conversations.create("c-old", "alice", 100, {}, [{"id": "a"}])
    await conversations.create("c-new", "alice", 300, {}, [{"id": "b"}])
    assert await conversations.expire(200) == 1
    assert await conversations.get("c-old", "alice") is None
    assert await conversations.items("c-old", "alice") == []
    assert await conversations.get("c-new", "alice") is not None


async def test_postgres_retention_runs_once_across_replicas(postgres: str) -> None:
    pool = await fresh(postgres)
    stores = [PostgresResponseStore(pool) for _ in range(4)]  # four replicas' stores
    for n in range(200):
        await stores[0].put({**response(f"r{n}"), "created_at": 100}, [], "alice")
    deleted = await asyncio.gather(*(s.expire(200) for s in stores))
    assert sum(deleted) == 200  # each row deleted once; busy replicas skipped the round
    await pool.close()
