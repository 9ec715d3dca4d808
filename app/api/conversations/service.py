"""Conversations on the conversation store: objects, items, and the ``conversation`` of a
response.

Items enter a conversation in the form the response store keeps (:mod:`app.items.resolve`):
files read into text, sealed reasoning opened, compaction items expanded, so a conversation is
usable as a response's context without the file or the key again. ``include:
["reasoning.encrypted_content"]`` seals reasoning items on the way out (sealed for the caller's
tenant); without it they come back without ``encrypted_content``, as OpenAI returns them.

A response created with ``conversation`` reads every item of the conversation before its own
input, and :class:`ConversationHooks` appends its input and output items when it ends
``completed`` or ``incomplete`` (a failed or cancelled response adds nothing).
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from app.core.access import Principal
from app.core.errors import InvalidRequest, NotFound
from app.core.ids import random_id
from app.core.media import check_image_url
from app.engine.run import Run, RunHooks
from app.items import file_jobs
from app.items.file_ids import inline_file_ids
from app.items.messages import stored_items
from app.items.resolve import INCLUDE, has_files, resolve, seal_reasoning
from app.items.sealing import Sealer
from app.knowledge.files import FileStore
from app.stores.base import ConversationStore
from schemas.conversations import AddItemsBody, CreateConversationBody, UpdateConversationBody

Json = dict[str, Any]
log = logging.getLogger(__name__)

_ID = re.compile(r"conv_[A-Za-z0-9_-]{1,124}")
# OpenAI's ResponseIncludable; the tool-output ones concern items this gateway never makes.
INCLUDABLE = frozenset({
    "file_search_call.results", "web_search_call.results", "web_search_call.action.sources",
    "message.input_image.image_url", "computer_call_output.output.image_url",
    "code_interpreter_call.outputs", INCLUDE, "message.output_text.logprobs"})
_WITH_STATUS = frozenset({"message", "function_call", "function_call_output"})
APPENDED = frozenset({"completed", "incomplete"})


def check_id(conversation_id: str, param: str) -> str:
    if not _ID.fullmatch(conversation_id):
        shown = conversation_id[:64] + ("..." if len(conversation_id) > 64 else "")
        raise InvalidRequest(f"Invalid {param!r}: {shown!r}. Expected an ID that begins with 'conv_' "
                             "(letters, digits, '_' and '-', at most 129 characters).",
                             param=param, code="invalid_value")
    return conversation_id


def not_found(conversation_id: str, param: str = "conversation_id") -> NotFound:
    code = "conversation_not_found" if param == "conversation" else "not_found"
    return NotFound(f"Conversation with id {conversation_id!r} not found.", param=param, code=code)


def check_include(include: list[str]) -> list[str]:
    for i, name in enumerate(include):
        if name not in INCLUDABLE:
            raise InvalidRequest(f"include[{i}] {name[:80]!r} is not one of: "
                                 f"{', '.join(sorted(INCLUDABLE))}.", param="include",
                                 code="invalid_value")
    return include


def with_status(item: Json) -> Json:
    """Messages and function calls / outputs in a conversation carry a ``status`` (OpenAI's)."""
    if item.get("type") in _WITH_STATUS and not item.get("status"):
        return {**item, "status": "completed"}
    return item


def _reasoning_text(item: Json) -> str:
    parts = item.get("content") or item.get("summary") or []
    return "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))


def _check_images(item: Json, at: str) -> None:
    """An image a response could never send (an http(s) URL, a file id) is a 400 at the door."""
    for key in ("content", "output"):
        parts = item.get(key)
        if not isinstance(parts, list):
            continue
        for j, part in enumerate(parts):
            if isinstance(part, dict) and part.get("type") == "input_image":
                where = f"{at}.{key}[{j}]"
                if not part.get("image_url"):
                    raise InvalidRequest("input_image needs image_url or file_id.",
                                         param=where)
                check_image_url(str(part["image_url"]), where)


class ConversationsService:
    files: FileStore | None = None  # the Files API's store: file_id inputs (app/items/file_ids.py)

    def __init__(self, store: ConversationStore, sealer: Sealer) -> None:
        self.store = store
        self.sealer = sealer

    # -- items in and out ------------------------------------------------------------
    async def _incoming(self, items: list[Any], who: Principal) -> list[Json]:
        """Request items (``items[i]``) as stored: ids, resolved files / reasoning / compaction."""
        new = await inline_file_ids(stored_items(items, "items"), self.files, who.tenant, "items")
        try:
            if has_files(new):
                resolved = await file_jobs.run(lambda: resolve([], new, self.sealer, who.tenant))
            else:
                resolved = resolve([], new, self.sealer, who.tenant)
        except InvalidRequest as exc:  # resolve names the request's items input[i]
            if exc.param and exc.param.startswith("input["):
                exc.param = "items" + exc.param[len("input"):]
                exc.message = exc.message.replace("input[", "items[")
            raise
        for i, item in enumerate(resolved.items):  # refused now, not on every later response
            _check_images(item, f"items[{i}]")
        return [with_status(item) for item in resolved.items]

    def _outgoing(self, item: Json, include: list[str], who: Principal) -> Json:
        if item.get("type") != "reasoning":
            return item
        out = {k: v for k, v in item.items() if k != "encrypted_content"}
        if INCLUDE in include:
            out["encrypted_content"] = seal_reasoning(self.sealer, who.tenant, _reasoning_text(item))
        return out

    # -- conversations ---------------------------------------------------------------
    async def create(self, body: CreateConversationBody, who: Principal) -> Json:
        items = await self._incoming(list(body.items or []), who)
        return await self.store.create(random_id("conv_"), who.tenant, int(time.time()),
                                       body.metadata or {}, items)

    async def get(self, conversation_id: str, who: Principal, param: str = "conversation_id") -> Json:
        found = await self.store.get(check_id(conversation_id, param), who.tenant)
        if found is None:
            raise not_found(conversation_id, param)
        return found

    async def update(self, conversation_id: str, body: UpdateConversationBody, who: Principal) -> Json:
        check_id(conversation_id, "conversation_id")
        found = await self.store.set_metadata(conversation_id, who.tenant, body.metadata or {})
        if found is None:
            raise not_found(conversation_id)
        return found

    async def delete(self, conversation_id: str, who: Principal) -> Json:
        check_id(conversation_id, "conversation_id")
        if not await self.store.delete(conversation_id, who.tenant):
            raise not_found(conversation_id)
        return {"id": conversation_id, "object": "conversation.deleted", "deleted": True}

    # -- items -----------------------------------------------------------------------
    async def add_items(self, conversation_id: str, body: AddItemsBody, include: list[str],
                        who: Principal) -> list[Json]:
        await self.get(conversation_id, who)
        check_include(include)
        items = await self._incoming(list(body.items), who)
        if not await self.store.append(conversation_id, who.tenant, items):
            raise not_found(conversation_id)  # deleted meanwhile
        return [self._outgoing(item, include, who) for item in items]

    async def page(self, conversation_id: str, who: Principal, *, limit: int, after: str | None,
                   ascending: bool, include: list[str]) -> tuple[list[Json], bool]:
        await self.get(conversation_id, who)
        check_include(include)
        batch = await self.store.page(conversation_id, who.tenant, limit=limit + 1, after=after,
                                      ascending=ascending)
        if batch is None:
            raise NotFound(f"No item with id {str(after)[:64]!r} in conversation {conversation_id!r}.",
                           param="after")
        return [self._outgoing(item, include, who) for item in batch[:limit]], len(batch) > limit

    async def item(self, conversation_id: str, item_id: str, who: Principal,
                   include: list[str]) -> Json:
        await self.get(conversation_id, who)
        check_include(include)
        found = await self.store.item(conversation_id, who.tenant, item_id)
        if found is None:
            raise NotFound(f"Item with id {item_id[:64]!r} not found.", param="item_id")
        return self._outgoing(found, include, who)

    async def delete_item(self, conversation_id: str, item_id: str, who: Principal) -> Json:
        conversation = await self.get(conversation_id, who)
        if not await self.store.delete_item(conversation_id, who.tenant, item_id):
            raise NotFound(f"Item with id {item_id[:64]!r} not found.", param="item_id")
        return conversation

    # -- the ``conversation`` of a response ------------------------------------------
    async def context(self, conversation_id: str, who: Principal) -> list[Json]:
        """The conversation's items, oldest first; 404 naming ``conversation`` if it is not
        the caller's."""
        await self.get(conversation_id, who, "conversation")
        return await self.store.items(conversation_id, who.tenant)

    def hooks(self, conversation_id: str, who: Principal, new_items: list[Json],
              inner: RunHooks | None) -> ConversationHooks:
        return ConversationHooks(self.store, conversation_id, who.tenant, new_items, inner)


class ConversationHooks:
    """Run hooks of a response in a conversation: the response store's (``inner``, when the
    response is stored), then its input and output items appended to the conversation."""

    def __init__(self, store: ConversationStore, conversation_id: str, tenant: str,
                 new_items: list[Json], inner: RunHooks | None) -> None:
        self._store = store
        self._id = conversation_id
        self._tenant = tenant
        self._new = [with_status(item) for item in new_items]
        self._inner = inner
        self._appended = False

    async def started(self, run: Run) -> None:
        if self._inner is not None:
            await self._inner.started(run)

    async def ended(self, run: Run) -> None:
        # The response first: retried until both are stored, the items are appended once.
        if self._inner is not None:
            await self._inner.ended(run)
        resource: Json = run.encoder.result()
        if resource.get("status") in APPENDED and not self._appended:
            output = [item for item in resource.get("output", []) if isinstance(item, dict)]
            if not await self._store.append(self._id, self._tenant, self._new + output):
                log.warning("response %s: conversation %s was deleted before it ended",
                            run.id, self._id)
            self._appended = True
