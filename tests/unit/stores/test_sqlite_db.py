"""Stores under concurrent writers on one SQLite file (app/stores/sqlite_db.py): every batch whole,
the API up afterwards."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest

from app.stores.sqlite_conversations import SqliteConversationStore as ConversationStore
from app.stores.sqlite_db import transaction
from app.stores.sqlite_responses import SqliteResponseStore as ResponseStore

pytestmark = pytest.mark.asyncio


def _resource(i: int) -> dict[str, object]:
    return {"id": f"resp_{i}", "created_at": int(time.time()), "status": "completed", "output": []}


async def test_appends_and_response_writes_race_and_every_batch_is_whole(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    conversations = [await ConversationStore.open(path) for _ in range(2)]  # two connections
    responses = await ResponseStore.open(path)
    await conversations[0].create("conv_1", "t", 0, {}, [])

    async def appender(store: ConversationStore, worker: int) -> int:
        done = 0
        for batch in range(40):
            items = [{"id": f"msg_{worker}_{batch}_{k}", "type": "message"} for k in range(5)]
            assert await store.append("conv_1", "t", items)
            done += 1
        return done

    async def writer(offset: int) -> None:
        for i in range(60):
            await responses.put(_resource(offset * 1000 + i), [{"role": "user"}], "t")

    async def other_process() -> None:
        """Another process writing to the file: it holds the write lock for a while, often."""
        db = await asyncio.to_thread(sqlite3.connect, path, check_same_thread=False)
        try:
            for _ in range(5):
                await asyncio.to_thread(db.execute, "BEGIN IMMEDIATE")
                await asyncio.sleep(0.05)
                await asyncio.to_thread(db.commit)
                await asyncio.sleep(0.01)
        finally:
            db.close()

    results = await asyncio.gather(*(appender(conversations[w % 2], w) for w in range(4)),
                                   *(writer(o) for o in range(6)), other_process())
    items = await conversations[1].items("conv_1", "t")
    assert len(items) == 5 * sum(r for r in results if isinstance(r, int)) == 800
    by_batch: dict[str, int] = {}
    for item in items:
        key = str(item["id"]).rsplit("_", 1)[0]
        by_batch[key] = by_batch.get(key, 0) + 1
    assert set(by_batch.values()) == {5}  # no batch stored in part
    page = await responses.page("t", limit=500, after=None, ascending=True)
    assert page is not None and len(page) == 360
    for store in (*conversations, responses):
        await store.close()


async def test_a_failed_write_rolls_back_and_leaves_the_connection_usable(tmp_path: Path) -> None:
    store = await ConversationStore.open(tmp_path / "s.sqlite3")
    await store.create("conv_1", "t", 0, {}, [{"id": "a", "type": "message"}])
    with pytest.raises(sqlite3.OperationalError):
        async with transaction(store._db) as db:
            await db.execute("INSERT INTO conversation_items (conversation_id, owner, item_id, item) "
                             "VALUES ('conv_1', 't', 'b', x'7b7d')")
            await db.execute("INSERT INTO no_such_table VALUES (1)")
    assert [i["id"] for i in await store.items("conv_1", "t")] == ["a"]  # the first insert undone
    assert await store.append("conv_1", "t", [{"id": "c", "type": "message"}])
    assert [i["id"] for i in await store.items("conv_1", "t")] == ["a", "c"]
    await store.close()


async def test_a_cancelled_write_never_leaves_the_connection_inside_a_transaction(tmp_path: Path) -> None:
    """A client that leaves mid-write (its task cancelled while BEGIN or an INSERT is queued on
    the connection's thread) left a transaction open: every later write on the shared
    connection failed ("cannot start a transaction within a transaction")."""
    import contextlib

    store = await ConversationStore.open(tmp_path / "s.sqlite3")
    await store.create("conv_1", "t", 0, {}, [])
    for steps in range(12):  # cancel at every point of the write
        task = asyncio.ensure_future(store.append("conv_1", "t", [{"id": f"c{steps}", "type": "message"}]))
        for _ in range(steps):
            await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert await store.append("conv_1", "t", [{"id": f"ok{steps}", "type": "message"}])
        assert not store._db.in_transaction
    ids = [i["id"] for i in await store.items("conv_1", "t")]
    assert [i for i in ids if i.startswith("ok")] == [f"ok{n}" for n in range(12)]
    await store.close()
