"""OpenAI's Conversations API routes: ``/v1/conversations`` (create, retrieve, update, delete)
and its items (add, list, retrieve, delete), each scoped to the caller's API key."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from app.api.conversations.service import ConversationsService
from app.http.auth import principal
from app.http.body import GatewayRoute
from app.http.responses import JSONResponse
from schemas.conversations import AddItemsBody, CreateConversationBody, UpdateConversationBody

router = APIRouter(route_class=GatewayRoute)


def _service(request: Request) -> ConversationsService:
    service: ConversationsService = request.app.state.conversations
    return service


def _include(request: Request) -> list[str]:
    """``include`` as a query list: ``include=a&include=b`` or the SDK's ``include[]=a``."""
    return request.query_params.getlist("include") + request.query_params.getlist("include[]")


def _list(data: list[dict[str, object]], more: bool) -> Response:
    return JSONResponse({"object": "list", "data": data,
                         "first_id": data[0]["id"] if data else None,
                         "last_id": data[-1]["id"] if data else None, "has_more": more})


@router.post("/v1/conversations")
async def create_conversation(body: CreateConversationBody, request: Request) -> Response:
    return JSONResponse(await _service(request).create(body, principal(request)))


@router.get("/v1/conversations/{conversation_id}")
async def get_conversation(conversation_id: str, request: Request) -> Response:
    return JSONResponse(await _service(request).get(conversation_id, principal(request)))


@router.post("/v1/conversations/{conversation_id}")
async def update_conversation(conversation_id: str, body: UpdateConversationBody,
                              request: Request) -> Response:
    return JSONResponse(await _service(request).update(conversation_id, body, principal(request)))


@router.delete("/v1/conversations/{conversation_id}")
async def delete_conversation(conversation_id: str, request: Request) -> Response:
    return JSONResponse(await _service(request).delete(conversation_id, principal(request)))


@router.post("/v1/conversations/{conversation_id}/items")
async def add_items(conversation_id: str, body: AddItemsBody, request: Request) -> Response:
    items = await _service(request).add_items(conversation_id, body, _include(request),
                                               principal(request))
    return _list(items, False)


@router.get("/v1/conversations/{conversation_id}/items")
async def list_items(conversation_id: str, request: Request, limit: int = Query(20, ge=1, le=100),
                     after: str | None = None, order: Literal["asc", "desc"] = "desc") -> Response:
    """The conversation's items, newest first (``order=asc``: oldest first), paged with
    ``limit`` and ``after`` (the last id of the previous page)."""
    data, more = await _service(request).page(conversation_id, principal(request), limit=limit,
                                              after=after, ascending=order == "asc",
                                              include=_include(request))
    return _list(data, more)


@router.get("/v1/conversations/{conversation_id}/items/{item_id}")
async def get_item(conversation_id: str, item_id: str, request: Request) -> Response:
    return JSONResponse(await _service(request).item(conversation_id, item_id, principal(request),
                                                     _include(request)))


@router.delete("/v1/conversations/{conversation_id}/items/{item_id}")
async def delete_item(conversation_id: str, item_id: str, request: Request) -> Response:
    """Removes the item; answers the conversation (as OpenAI does)."""
    return JSONResponse(await _service(request).delete_item(conversation_id, item_id,
                                                            principal(request)))
