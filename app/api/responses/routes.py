"""Open Responses routes: create, list, retrieve, delete, input items, cancel, input token
count, compact."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from app.api.responses.dialect import choose
from app.api.responses.encode import ResponsesEncoder
from app.api.responses.service import ResponsesService
from app.api.responses.wire import frame
from app.core.errors import InvalidRequest
from app.http.auth import check_model, principal
from app.http.body import GatewayRoute
from app.http.disconnect import cancel_on_disconnect
from app.http.limits import Lease
from app.http.responses import JSONResponse
from app.http.sse import named_event
from app.http.streaming import json_answer, sse_response
from schemas.responses import CompactBody, CreateResponseBody, InputTokensBody

router = APIRouter(route_class=GatewayRoute)


def _service(request: Request) -> ResponsesService:
    service: ResponsesService = request.app.state.responses
    return service


def _named(payload: dict[str, Any]) -> bytes:
    return named_event(payload["type"], payload)


@router.post("/v1/responses")
async def create_response(body: CreateResponseBody, request: Request) -> Response:
    check_model(request, body.model)
    service = _service(request)
    dialect = choose(service.registry.config.responses.event_dialect, request.headers)
    lease = request.scope.get("state", {}).get("limits_lease") if body.background else None
    # A background run outlives this request: it holds its key's concurrency slot, and its
    # tokens are charged, until it ends (app/http/limits.py).
    on_end = lease.detach() if isinstance(lease, Lease) else None
    try:
        creating = service.create(body, principal(request), dialect, on_end=on_end, wire=True)
        if body.background:
            run = await creating
    except BaseException:
        if on_end is not None:
            on_end(0)  # it never started: the slot is free again
        raise
    if body.background:  # does not wait for the backend, and outlives this request
        assert isinstance(run.encoder, ResponsesEncoder) and run.replay is not None
        if body.stream:  # followed from its start; leaving does not cancel it (resumable)
            return sse_response(run.replay.reader(None, run.stop), _named,
                                service.registry.config.shutdown_grace_seconds)
        return JSONResponse(run.encoder.snapshot())
    if not body.stream:
        return await json_answer(request, creating)
    # Until the first upstream event nothing has been sent: a client that leaves cancels it.
    run = await cancel_on_disconnect(request, creating)  # its deltas pre-encoded (wire.py)
    return sse_response(run, frame, service.registry.config.shutdown_grace_seconds)


@router.post("/v1/responses/input_tokens")
async def count_input_tokens(body: InputTokensBody, request: Request) -> Response:
    """``{"object": "response.input_tokens", "input_tokens": N}``: what a create with these
    fields would send; ``"ocm:estimated": true`` where only an estimate is possible."""
    counted = await _service(request).count(body, principal(request))
    headers = {} if counted.exact else {"ocm-token-count": "estimated"}
    return JSONResponse(counted.body(), headers=headers)


@router.post("/v1/responses/compact")
async def compact_response(body: CompactBody, request: Request) -> Response:
    check_model(request, body.model)
    return JSONResponse(await _service(request).compact(body, principal(request)))


@router.get("/v1/responses")
async def list_responses(request: Request, limit: int = Query(20, ge=1, le=100),
                         after: str | None = None,
                         order: Literal["asc", "desc"] = "desc") -> Response:
    """The caller's stored responses, newest first (``order=asc`` for oldest first), paged
    with ``limit`` and ``after`` (the last id of the previous page)."""
    data, more = await _service(request).page(principal(request), limit=limit, after=after,
                                              ascending=order == "asc")
    return JSONResponse({"object": "list", "data": data,
                         "first_id": data[0]["id"] if data else None,
                         "last_id": data[-1]["id"] if data else None, "has_more": more})


@router.get("/v1/responses/{response_id}")
async def get_response(response_id: str, request: Request, stream: bool = False,
                       starting_after: int | None = Query(None, ge=-1)) -> Response:
    """The response; with ``stream=true`` (background responses) its events after
    ``starting_after``, then live until it ends: a dropped stream resumes where it broke."""
    service = _service(request)
    if stream:
        reader = await service.follow(response_id, principal(request), starting_after)
        return sse_response(reader, _named, service.registry.config.shutdown_grace_seconds)
    if starting_after is not None:
        raise InvalidRequest("starting_after is only for stream=true.", param="starting_after")
    return JSONResponse(await service.get(response_id, principal(request)))


@router.delete("/v1/responses/{response_id}")
async def delete_response(response_id: str, request: Request) -> Response:
    await _service(request).delete(response_id, principal(request))
    return JSONResponse({"id": response_id, "object": "response.deleted", "deleted": True})


@router.get("/v1/responses/{response_id}/input_items")
async def input_items(response_id: str, request: Request) -> Response:
    items = await _service(request).input_items(response_id, principal(request))
    return JSONResponse({"object": "list", "data": items,
                         "first_id": items[0]["id"] if items else None,
                         "last_id": items[-1]["id"] if items else None, "has_more": False})


@router.post("/v1/responses/{response_id}/cancel")
async def cancel_response(response_id: str, request: Request) -> Response:
    return JSONResponse(await _service(request).cancel(response_id, principal(request)))
