"""Large context items stored once per owner (app/stores/blobs.py), on every store: SQLite,
PostgreSQL (a real server) and memory run the same scenarios."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiosqlite
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.stores import blobs
from app.stores.base import ResponseStore
from app.stores.postgres import PostgresResponseStore
from app.stores.sqlite_responses import SqliteResponseStore
from tests.unit.stores.conftest import fresh

Json = dict[str, Any]
IMAGE = {"type": "message", "role": "user", "content": [
    {"type": "input_text", "text": "What is in it?"},
    {"type": "input_image", "image_url": "data:image/png;base64," + "iVBORw0KGgo" * 20_000}]}


def _response(rid: str, created_at: int = 1) -> Json:
    return {"id": rid, "object": "response", "created_at": created_at, "status": "completed",
            "output": []}


def _turn(n: int) -> list[Json]:
    return [{"type": "message", "role": "user", "content": f"question {n}"},
            {"type": "message", "role": "assistant", "content": [
                {"type": "output_text", "text": f"answer {n}"}]}]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20)
items = st.dictionaries(st.sampled_from(["type", "role", "content", blobs.MARK, "id"]), json_values,
                        min_size=1, max_size=4)


@settings(max_examples=200, deadline=None)
@given(st.lists(items, max_size=8), st.integers(1, 200))
def test_split_then_join_gives_back_the_items(context: list[Json], minimum: int) -> None:
    """Whatever the items (a client's item that looks like a reference included) and the
    threshold, what is read back is what was stored."""
    stored = blobs.split(context, minimum)
    parsed, digests = blobs.references(stored.items)
    assert set(digests) == set(stored.blobs)
    assert blobs.join(parsed, stored.blobs) == context


def test_only_large_items_and_lookalikes_become_blobs() -> None:
    lookalike = {blobs.MARK: "0" * 64}
    stored = blobs.split([*_turn(1), IMAGE, lookalike])
    assert len(stored.blobs) == 2 and len(stored.items) < 500
    parsed, _ = blobs.references(stored.items)
    assert parsed[:2] == _turn(1)
    with pytest.raises(blobs.MissingBlob):
        blobs.join(parsed, {})


async def test_a_chain_stores_its_image_once(responses: ResponseStore) -> None:
    """20 responses continuing each other (each stores the whole context so far, the image of
    the first turn included): the image is kept once; every response reads back whole."""
    context: list[Json] = [IMAGE]
    for n in range(20):
        context = [*context, *_turn(n)]
        await responses.put(_response(f"r{n}"), context, "alice")
    sizes = await responses.blob_sizes("alice")
    assert list(sizes.values()) == [len(blobs.split([IMAGE]).blobs.popitem()[1])]
    for n in (0, 7, 19):
        got = await responses.get(f"r{n}", "alice")
        assert got is not None and got.input_items == [IMAGE, *(i for k in range(n + 1) for i in _turn(k))]


async def test_blobs_belong_to_their_owner(responses: ResponseStore) -> None:
    await responses.put(_response("a1"), [IMAGE], "alice")
    await responses.put(_response("b1"), [IMAGE], "bob")  # the same bytes: a blob of bob's own
    assert (await responses.blob_sizes("alice")).keys() == (await responses.blob_sizes("bob")).keys()
    assert await responses.delete("a1", "alice")
    assert await responses.blob_sizes("alice") == {}
    got = await responses.get("b1", "bob")
    assert got is not None and got.input_items == [IMAGE]


async def test_delete_keeps_blobs_others_still_use(responses: ResponseStore) -> None:
    await responses.put(_response("r1"), [IMAGE, *_turn(1)], "alice")
    await responses.put(_response("r2"), [IMAGE, *_turn(1), *_turn(2)], "alice")
    assert await responses.delete("r1", "alice")
    assert len(await responses.blob_sizes("alice")) == 1  # r2 still holds it
    got = await responses.get("r2", "alice")
    assert got is not None and got.input_items[0] == IMAGE
    assert not await responses.delete("r2", "bob")  # not bob's: nothing happens
    assert len(await responses.blob_sizes("alice")) == 1
    assert await responses.delete("r2", "alice")
    assert await responses.blob_sizes("alice") == {}  # deleted with its last response, at once


async def test_retention_sweeps_blobs_of_expired_responses(responses: ResponseStore,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    other = {**IMAGE, "id": "another image"}
    await responses.put(_response("old", created_at=100), [IMAGE], "alice")
    await responses.put(_response("new", created_at=300), [other], "alice")
    monkeypatch.setattr(blobs, "SWEEP_GRACE", -1.0)  # as if the grace had passed
    assert await responses.expire(200) == 1
    assert len(await responses.blob_sizes("alice")) == 1
    got = await responses.get("new", "alice")
    assert got is not None and got.input_items == [other]


async def test_retention_leaves_blobs_used_within_the_grace(tmp_path: Path) -> None:
    """An unreferenced blob written a moment ago may belong to a put still in flight on
    another connection (another replica): the sweep leaves it until the grace has passed."""
    store = await SqliteResponseStore.open(tmp_path / "s.sqlite3")
    try:
        await store.put(_response("old", created_at=100), [IMAGE], "alice")
        assert await store.expire(200) == 1
        assert len(await store.blob_sizes("alice")) == 1  # used just now
        async with aiosqlite.connect(tmp_path / "s.sqlite3") as db:
            await db.execute("UPDATE blobs SET used_at = 0")
            await db.commit()
        await store.expire(200)
        assert await store.blob_sizes("alice") == {}
    finally:
        await store.close()


async def test_postgres_puts_racing_deletes_never_lose_a_blob(postgres: str) -> None:
    """Two replicas: one keeps storing responses that share the image while the other deletes
    the earlier ones. Every response still stored reads back whole, and the image is gone once
    the last response that holds it is."""
    pool = await fresh(postgres)
    a, b = PostgresResponseStore(pool), PostgresResponseStore(pool)
    written: asyncio.Queue[str] = asyncio.Queue()
    try:
        async def writer() -> None:
            for n in range(60):
                await a.put(_response(f"r{n}"), [IMAGE, *_turn(n)], "alice")
                written.put_nowait(f"r{n}")

        async def deleter() -> None:
            for _ in range(59):
                rid = await written.get()
                assert await b.delete(rid, "alice")

        await asyncio.gather(writer(), deleter())
        got = await a.get("r59", "alice")
        assert got is not None and got.input_items == [IMAGE, *_turn(59)]
        assert len(await a.blob_sizes("alice")) == 1
        assert await a.delete("r59", "alice") and await a.blob_sizes("alice") == {}
    finally:
        await pool.close()


async def test_postgres_delete_waits_for_a_put_in_flight_that_shares_its_blob(postgres: str) -> None:
    """The exact interleaving: replica B's put has upserted the shared blob but not committed
    its reference when replica A deletes the last response that held it. A must wait, then see
    B's reference and keep the blob (deleting it would leave B's response without its image)."""
    pool = await fresh(postgres)
    store = PostgresResponseStore(pool)
    try:
        await store.put(_response("r1"), [IMAGE], "alice")
        stored = blobs.split([IMAGE, *_turn(2)])
        (digest, data), = stored.blobs.items()
        async with pool.acquire() as b, b.transaction():  # replica B, statement by statement
            await b.execute("INSERT INTO blobs (owner, digest, data, used_at) VALUES ($1, $2, $3, 0) "
                            "ON CONFLICT (owner, digest) DO UPDATE SET used_at = excluded.used_at",
                            "alice", digest, data)
            deleting = asyncio.ensure_future(store.delete("r1", "alice"))  # replica A
            await asyncio.sleep(0.3)
            assert not deleting.done()  # waits for B's lock on the blob
            await b.execute("INSERT INTO response_blobs (id, owner, digest) VALUES ('r2', 'alice', $1)",
                            digest)
            await b.execute("INSERT INTO responses (id, owner, created_at, status, resource, input_items, "
                            "updated_at) VALUES ('r2', 'alice', 1, 'completed', $1, $2, 0)",
                            orjson.dumps(_response("r2")), stored.items)
        assert await deleting
        got = await store.get("r2", "alice")
        assert got is not None and got.input_items == [IMAGE, *_turn(2)]
    finally:
        await pool.close()


async def test_database_size_grows_with_the_turns_not_with_the_image(tmp_path: Path) -> None:
    """The point of it, measured on the SQLite file: a 20-turn chain over a 220 KB image."""
    store = await SqliteResponseStore.open(tmp_path / "s.sqlite3")
    try:
        context: list[Json] = [IMAGE]
        for n in range(20):
            context = [*context, *_turn(n)]
            await store.put(_response(f"r{n}"), context, "alice")
        async with aiosqlite.connect(tmp_path / "s.sqlite3") as db:
            await db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            async with db.execute("SELECT sum(length(input_items)) FROM responses") as cur:
                row = await cur.fetchone()
        assert row is not None and row[0] < 40_000  # the contexts without the image
        assert (tmp_path / "s.sqlite3").stat().st_size < 2 * len(str(IMAGE))  # was ~20x
    finally:
        await store.close()
