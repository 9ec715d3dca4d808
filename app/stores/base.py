"""The stores the APIs keep state in: the contract every implementation keeps.

Implementations: :mod:`.sqlite_responses` / :mod:`.sqlite_conversations` (the embedded
default: one SQLite file, WAL, no other server), :mod:`.memory` (a process's memory, for
tests; ``tests/unit/stores/test_contract.py`` runs the same scenarios on every
implementation).  The APIs, the WebSocket session and the engine's hooks talk only to these
protocols; a shared store for N replicas (PostgreSQL, issue 28) goes beside them.

Contract (both stores):

* **Owners.** Every object belongs to the owner (tenant) that wrote it.  Every read, write
  and delete names an owner; an object of another owner is indistinguishable from a missing
  one (``None`` / ``False``), never an error that tells it exists.
* **Atomic writes.** A call either happens whole or not at all; a reader never sees half of
  one.  Failures of the store itself raise (the HTTP layer answers 503); they are never
  reported as "missing".
* **Order.** Listing follows creation order (a response keeps its place when it is written
  again); ``after`` names an object of the same owner (else the page is ``None``), and the
  page starts just past it in the direction asked.

:class:`ResponseStore`: ``put`` is an upsert of a response's resource (``id``,
``created_at``, ``status`` inside it) and its input context; it also stamps the time, which
``touch`` renews for runs still in flight in this process (a run whose process died is told
by its stale time).  ``request_cancel`` records that a client asked to cancel an owner's
response still in flight (another replica runs it and Redis cannot carry the signal); ``touch``
answers which of the runs it renewed carry that request, so their process cancels them at its
next heartbeat.  The request stays with the response (a cancel is idempotent).  Context
items of :data:`app.stores.blobs.BLOB_MIN` bytes or more are kept once per owner and shared
by every response whose context holds them (the rules:
:mod:`app.stores.blobs`).  ``put_events`` / ``get_events`` keep a background response's streamed
events for readers after its end.  ``delete`` removes the response and its events.

:class:`ConversationStore`: ``create`` makes a conversation with its first items; ``append``
adds items after its last one, all or none, and is safe against concurrent appends (no item
is lost) and against a concurrent delete (no orphans); ``items`` is the whole list oldest
first; ``item`` the latest item with that id; ``delete_item`` removes every item with it.

Retention: ``expire`` deletes what was created before a time (``[store]
response_ttl_seconds`` / ``conversation_ttl_seconds``); every replica may run it at once
without doing the work twice (PostgreSQL: one of them at a time, under an advisory lock).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class StoredResponse:
    resource: Json
    input_items: list[Json]
    updated_at: float = 0.0  # wall clock of the last write or heartbeat (runs in flight)


def conversation_resource(conversation_id: str, created_at: int, metadata: dict[str, str]) -> Json:
    """The ``conversation`` object the API returns."""
    return {"id": conversation_id, "object": "conversation", "created_at": created_at,
            "metadata": metadata}


class ResponseStore(Protocol):
    async def put(self, resource: Json, input_items: list[Json], owner: str) -> None: ...

    async def touch(self, response_ids: list[str]) -> set[str]:
        """Heartbeat of runs in flight here; which of them have a cancel requested."""
        ...

    async def request_cancel(self, response_id: str, owner: str) -> bool:
        """Record a cancel of ``owner``'s response if it is still ``queued`` / ``in_progress``
        (whether it was recorded: False for an ended, missing or another owner's one)."""
        ...

    async def get(self, response_id: str, owner: str) -> StoredResponse | None: ...

    async def delete(self, response_id: str, owner: str) -> bool: ...

    async def put_events(self, response_id: str, owner: str, events: list[Json]) -> None: ...

    async def get_events(self, response_id: str, owner: str) -> list[Json] | None: ...

    async def page(self, owner: str, *, limit: int, after: str | None, ascending: bool,
                   ) -> list[Json] | None: ...

    async def expire(self, created_before: int) -> int:
        """Delete every response (and its events) created before this Unix time; how many."""
        ...

    async def blob_sizes(self, owner: str) -> dict[str, int]:
        """The large context items ``owner``'s responses share, stored once each
        (:mod:`app.stores.blobs`): digest -> bytes."""
        ...

    async def close(self) -> None: ...


class ConversationStore(Protocol):
    async def create(self, conversation_id: str, owner: str, created_at: int,
                     metadata: dict[str, str], items: list[Json]) -> Json: ...

    async def get(self, conversation_id: str, owner: str) -> Json | None: ...

    async def set_metadata(self, conversation_id: str, owner: str, metadata: dict[str, str],
                           ) -> Json | None: ...

    async def delete(self, conversation_id: str, owner: str) -> bool: ...

    async def append(self, conversation_id: str, owner: str, items: list[Json]) -> bool: ...

    async def items(self, conversation_id: str, owner: str) -> list[Json]: ...

    async def page(self, conversation_id: str, owner: str, *, limit: int, after: str | None,
                   ascending: bool) -> list[Json] | None: ...

    async def item(self, conversation_id: str, owner: str, item_id: str) -> Json | None: ...

    async def delete_item(self, conversation_id: str, owner: str, item_id: str) -> bool: ...

    async def expire(self, created_before: int) -> int:
        """Delete every conversation (and its items) created before this Unix time; how many."""
        ...

    async def close(self) -> None: ...
