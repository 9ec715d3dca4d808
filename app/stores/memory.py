"""The stores in a process's memory (:mod:`.base` is the contract), for tests.  Objects are
kept as copies (orjson round trips), so a caller that mutates what it stored or read changes
nothing here."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from app.stores import blobs
from app.stores.base import Json, StoredResponse, conversation_resource

_RUNNING = ("queued", "in_progress")  # a cancel can be requested only for these


def _copy(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value))


def _page(ordered: list[tuple[str, Json]], limit: int, after: str | None, ascending: bool,
          ) -> list[Json] | None:
    """``ordered``: (id, object) oldest first."""
    rows = ordered if ascending else ordered[::-1]
    if after is not None:
        at = next((i for i in range(len(rows) - 1, -1, -1) if rows[i][0] == after), None)
        if at is None:
            return None
        rows = rows[at + 1:]
    return [_copy(obj) for _, obj in rows[:limit]]


@dataclass
class _Response:
    owner: str
    resource: Json
    input_items: bytes  # as :func:`app.stores.blobs.split` stores them
    digests: frozenset[str]
    updated_at: float
    cancel_requested: bool = False


class MemoryResponseStore:
    def __init__(self) -> None:
        self._rows: dict[str, _Response] = {}  # insertion order = creation order
        self._events: dict[str, tuple[str, list[Json]]] = {}
        self._blobs: dict[tuple[str, str], bytes] = {}  # (owner, digest) -> an item's JSON

    async def put(self, resource: Json, input_items: list[Json], owner: str) -> None:
        stored = blobs.split(input_items)
        for digest, data in stored.blobs.items():
            self._blobs[owner, digest] = data
        # an existing id keeps its place (insertion order), and a cancel requested for it
        before = self._rows.get(resource["id"])
        self._rows[resource["id"]] = _Response(owner, _copy(resource), stored.items,
                                               frozenset(stored.blobs), time.time(),
                                               before is not None and before.cancel_requested)

    def _drop_orphans(self, candidates: set[tuple[str, str]]) -> None:
        used = {(row.owner, digest) for row in self._rows.values() for digest in row.digests}
        for key in candidates - used:
            self._blobs.pop(key, None)

    async def blob_sizes(self, owner: str) -> dict[str, int]:
        return {digest: len(data) for (who, digest), data in self._blobs.items() if who == owner}

    async def touch(self, response_ids: list[str]) -> set[str]:
        now = time.time()
        for rid in response_ids:
            if rid in self._rows:
                self._rows[rid].updated_at = now
        return {rid for rid in response_ids if rid in self._rows and self._rows[rid].cancel_requested}

    async def request_cancel(self, response_id: str, owner: str) -> bool:
        row = self._rows.get(response_id)
        if row is None or row.owner != owner or row.resource.get("status") not in _RUNNING:
            return False
        row.cancel_requested = True
        return True

    async def get(self, response_id: str, owner: str) -> StoredResponse | None:
        row = self._rows.get(response_id)
        if row is None or row.owner != owner:
            return None
        items, _ = blobs.references(row.input_items)
        found = {digest: data for (who, digest), data in self._blobs.items() if who == owner}
        return blobs.stored(_copy(row.resource), items, found, row.updated_at)

    async def delete(self, response_id: str, owner: str) -> bool:
        row = self._rows.get(response_id)
        if row is None or row.owner != owner:
            return False
        del self._rows[response_id]
        if self._events.get(response_id, ("",))[0] == owner:
            del self._events[response_id]
        self._drop_orphans({(owner, digest) for digest in row.digests})
        return True

    async def put_events(self, response_id: str, owner: str, events: list[Json]) -> None:
        self._events[response_id] = (owner, _copy(events))

    async def get_events(self, response_id: str, owner: str) -> list[Json] | None:
        found = self._events.get(response_id)
        return None if found is None or found[0] != owner else _copy(found[1])

    async def page(self, owner: str, *, limit: int, after: str | None, ascending: bool,
                   ) -> list[Json] | None:
        mine = [(rid, row.resource) for rid, row in self._rows.items() if row.owner == owner]
        return _page(mine, limit, after, ascending)

    async def expire(self, created_before: int) -> int:
        old = [rid for rid, row in self._rows.items() if int(row.resource["created_at"]) < created_before]
        for rid in old:
            del self._rows[rid]
            self._events.pop(rid, None)
        self._drop_orphans(set(self._blobs))  # in memory no write is ever half-way: no grace
        return len(old)

    async def close(self) -> None:
        return None


@dataclass
class _Conversation:
    owner: str
    created_at: int
    metadata: dict[str, str]
    items: list[Json] = field(default_factory=list)


class MemoryConversationStore:
    def __init__(self) -> None:
        self._rows: dict[str, _Conversation] = {}

    def _mine(self, conversation_id: str, owner: str) -> _Conversation | None:
        row = self._rows.get(conversation_id)
        return row if row is not None and row.owner == owner else None

    async def create(self, conversation_id: str, owner: str, created_at: int,
                     metadata: dict[str, str], items: list[Json]) -> Json:
        if conversation_id in self._rows:
            raise KeyError(f"conversation {conversation_id} exists")
        self._rows[conversation_id] = _Conversation(owner, created_at, dict(metadata), _copy(items))
        return conversation_resource(conversation_id, created_at, dict(metadata))

    async def get(self, conversation_id: str, owner: str) -> Json | None:
        row = self._mine(conversation_id, owner)
        return None if row is None else conversation_resource(conversation_id, row.created_at,
                                                               dict(row.metadata))

    async def set_metadata(self, conversation_id: str, owner: str, metadata: dict[str, str],
                           ) -> Json | None:
        row = self._mine(conversation_id, owner)
        if row is None:
            return None
        row.metadata = dict(metadata)
        return await self.get(conversation_id, owner)

    async def delete(self, conversation_id: str, owner: str) -> bool:
        if self._mine(conversation_id, owner) is None:
            return False
        del self._rows[conversation_id]
        return True

    async def append(self, conversation_id: str, owner: str, items: list[Json]) -> bool:
        row = self._mine(conversation_id, owner)
        if row is None:
            return False
        row.items.extend(_copy(items))
        return True

    async def items(self, conversation_id: str, owner: str) -> list[Json]:
        row = self._mine(conversation_id, owner)
        return [] if row is None else list(_copy(row.items))

    async def page(self, conversation_id: str, owner: str, *, limit: int, after: str | None,
                   ascending: bool) -> list[Json] | None:
        row = self._mine(conversation_id, owner)
        if row is None:
            return None if after is not None else []
        return _page([(str(i["id"]), i) for i in row.items], limit, after, ascending)

    async def item(self, conversation_id: str, owner: str, item_id: str) -> Json | None:
        row = self._mine(conversation_id, owner)
        found = [i for i in row.items if i["id"] == item_id] if row is not None else []
        return dict(_copy(found[-1])) if found else None

    async def delete_item(self, conversation_id: str, owner: str, item_id: str) -> bool:
        row = self._mine(conversation_id, owner)
        if row is None:
            return False
        kept = [i for i in row.items if i["id"] != item_id]
        removed = len(kept) < len(row.items)
        row.items = kept
        return removed

    async def expire(self, created_before: int) -> int:
        old = [cid for cid, row in self._rows.items() if row.created_at < created_before]
        for cid in old:
            del self._rows[cid]
        return len(old)

    async def close(self) -> None:
        return None
