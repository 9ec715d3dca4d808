"""Routes of stored chat completions (:mod:`app.api.chat.stored`): list, retrieve, messages,
update metadata, delete; each scoped to the caller's tenant and the models it may use."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from pydantic import ConfigDict, Field
from starlette.responses import Response

from app.api.chat.stored import ChatStore, stored_messages
from app.core.access import Principal
from app.core.errors import InvalidRequest, NotFound
from app.http.auth import principal
from app.http.body import GatewayRoute
from app.http.responses import JSONResponse
from schemas.base import NullMeansDefault

router = APIRouter(route_class=GatewayRoute)
Json = dict[str, Any]


class UpdateBody(NullMeansDefault):
    model_config = ConfigDict(extra="forbid", strict=True)

    metadata: dict[str, str] = Field(max_length=16)


def _store(request: Request) -> ChatStore:
    store: ChatStore | None = getattr(request.app.state, "chat_store", None)
    if store is None:
        raise InvalidRequest("This gateway has no store for chat completions.", param="store")
    return store


async def _stored(request: Request, completion_id: str) -> tuple[Json, list[Json], Principal]:
    who = principal(request)
    found = await _store(request).get(completion_id, who.tenant)
    if found is None or not who.may_use(str(found[0].get("model"))):
        raise NotFound(f"No chat completion with id {completion_id!r} was found.",
                       param="completion_id", code="not_found")
    return found[0], found[1], who


def _listing(data: list[Json], more: bool) -> Json:
    return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None, "has_more": more}


@router.get("/v1/chat/completions")
async def list_completions(request: Request, limit: int = Query(20, ge=1, le=100),
                           after: str | None = None, order: Literal["asc", "desc"] = "asc",
                           model: str | None = None) -> Response:
    who = principal(request)
    wanted = {k[9:-1]: v for k, v in request.query_params.items()
              if k.startswith("metadata[") and k.endswith("]")}
    out: list[Json] = []
    cursor = after
    while len(out) <= limit:  # filtered after reading: read on until the page is full
        batch = await _store(request).page(who.tenant, limit=limit + 1, after=cursor,
                                           ascending=order == "asc", model=model)
        if batch is None:
            raise NotFound(f"No chat completion with id {after!r} was found.", param="after",
                           code="not_found")
        out += [c for c in batch if who.may_use(str(c.get("model")))
                and all(c["metadata"].get(k) == v for k, v in wanted.items())]
        if len(batch) <= limit:
            break
        cursor = str(batch[-1]["id"])
    return JSONResponse(_listing(out[:limit], len(out) > limit))


@router.get("/v1/chat/completions/{completion_id}")
async def get_completion(completion_id: str, request: Request) -> Response:
    return JSONResponse((await _stored(request, completion_id))[0])


@router.get("/v1/chat/completions/{completion_id}/messages")
async def get_messages(completion_id: str, request: Request, limit: int = Query(20, ge=1, le=100),
                       after: str | None = None, order: Literal["asc", "desc"] = "asc") -> Response:
    _, messages, _ = await _stored(request, completion_id)
    items = stored_messages(completion_id, messages)
    if order == "desc":
        items.reverse()
    if after is not None:
        ids = [m["id"] for m in items]
        if after not in ids:
            raise NotFound(f"No message with id {after!r} was found.", param="after", code="not_found")
        items = items[ids.index(after) + 1:]
    return JSONResponse(_listing(items[:limit], len(items) > limit))


@router.post("/v1/chat/completions/{completion_id}")
async def update_completion(completion_id: str, body: UpdateBody, request: Request) -> Response:
    completion, _, who = await _stored(request, completion_id)
    await _store(request).update(completion_id, who.tenant, body.metadata)
    return JSONResponse({**completion, "metadata": body.metadata})


@router.delete("/v1/chat/completions/{completion_id}")
async def delete_completion(completion_id: str, request: Request) -> Response:
    _, _, who = await _stored(request, completion_id)
    await _store(request).delete(completion_id, who.tenant)
    return JSONResponse({"object": "chat.completion.deleted", "id": completion_id, "deleted": True})
