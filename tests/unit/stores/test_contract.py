"""The store contract of app/stores/base.py, held by every implementation: SQLite (a file)
and memory run the same scenarios (owners, upserts in place, paging both ways, events,
conversation items)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from app.stores.base import ConversationStore, ResponseStore
from app.stores.memory import MemoryConversationStore, MemoryResponseStore
from app.stores.sqlite_conversations import SqliteConversationStore
from app.stores.sqlite_responses import SqliteResponseStore

Json = dict[str, Any]


@pytest.fixture(params=["sqlite", "memory"])
async def responses(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ResponseStore]:
    store: ResponseStore = (await SqliteResponseStore.open(tmp_path / "s.sqlite3")
                            if request.param == "sqlite" else MemoryResponseStore())
    yield store
    await store.close()


@pytest.fixture(params=["sqlite", "memory"])
async def conversations(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ConversationStore]:
    store: ConversationStore = (await SqliteConversationStore.open(tmp_path / "s.sqlite3")
                                if request.param == "sqlite" else MemoryConversationStore())
    yield store
    await store.close()


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
