"""app/stores/sqlite_conversations.py: appends are row inserts, so concurrent appends to one
conversation (one connection, or two as two gateway processes sharing the file) keep every
item in each batch's order; an append to a deleted conversation adds nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path

from app.stores.sqlite_conversations import SqliteConversationStore as ConversationStore


def _batch(writer: str, n: int) -> list[dict[str, object]]:
    return [{"id": f"msg_{writer}_{n}_{k}", "type": "message", "role": "user",
             "content": [{"type": "input_text", "text": f"{writer}{n}.{k}"}]} for k in range(3)]


async def test_two_processes_appending_at_once_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    one, two = await ConversationStore.open(path), await ConversationStore.open(path)
    try:
        await one.create("conv_shared", "alice", 1, {}, [])
        results = await asyncio.gather(*(store.append("conv_shared", "alice", _batch(name, n))
                                         for n in range(40) for name, store in (("a", one), ("b", two))))
        assert all(results)
        items = await two.items("conv_shared", "alice")
        assert len(items) == 2 * 40 * 3
        ids = [str(i["id"]) for i in items]
        assert len(set(ids)) == len(ids)
        for name in "ab":
            for n in range(40):  # a batch is contiguous-in-order (its rows in insertion order)
                mine = [ids.index(f"msg_{name}_{n}_{k}") for k in range(3)]
                assert mine == sorted(mine)
        assert await one.items("conv_shared", "bob") == []  # another owner sees nothing
    finally:
        await one.close()
        await two.close()


async def test_append_after_delete_adds_nothing() -> None:
    store = await ConversationStore.open(":memory:")
    try:
        await store.create("conv_gone", "alice", 1, {"k": "v"}, _batch("a", 0))
        assert not await store.append("conv_gone", "bob", _batch("b", 0))  # not bob's
        assert await store.delete("conv_gone", "alice")
        assert not await store.append("conv_gone", "alice", _batch("a", 1))
        assert await store.items("conv_gone", "alice") == []
        assert await store.page("conv_gone", "alice", limit=10, after=None, ascending=True) == []
    finally:
        await store.close()
