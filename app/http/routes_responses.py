"""Open Responses routes: create, retrieve, delete, input items, cancel."""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from sse_starlette import EventSourceResponse
from starlette.responses import Response

from app.encode.sse import DONE, named_event
from app.errors import GatewayError
from app.http.auth import check_model, principal
from app.http.body import GatewayRoute
from app.http.disconnect import cancel_on_disconnect
from app.http.responses import JSONResponse
from app.http.shutdown import Drain, drained
from app.responses_service import ResponsesService, Run
from schemas.responses import CreateResponseBody

router = APIRouter(route_class=GatewayRoute)


def _service(request: Request) -> ResponsesService:
    service: ResponsesService = request.app.state.responses
    return service


async def _sse(run: Run) -> AsyncIterator[bytes]:
    try:
        async for event in run.events():
            yield named_event(event["type"], event)
        yield DONE
    finally:
        run.cancel()  # a no-op when the run has finished; stops generation on disconnect


@router.post("/v1/responses")
async def create_response(body: CreateResponseBody, request: Request) -> Response:
    check_model(request, body.model)
    # Until the first upstream event nothing has been sent: a client that leaves cancels it
    # (a background response does not wait for the backend, so it is not affected).
    creating = _service(request).create(body, principal(request))
    run = await (creating if body.background else cancel_on_disconnect(request, creating))
    if body.stream:
        drain = Drain(request.app.state.registry.config.shutdown_grace_seconds)

        async def farewell() -> list[bytes]:
            run.cancel()  # the run ends itself with response.failed (status cancelled)
            return [named_event(e["type"], e) async for e in run.events()] + [DONE]

        return EventSourceResponse(drained(_sse(run), drain, farewell), ping=15, sep="\n",
                                   shutdown_event=drain.event, shutdown_grace_period=drain.grace + 5,
                                   headers={"x-accel-buffering": "no", "cache-control": "no-cache"})
    if body.background:
        return JSONResponse(run.encoder.snapshot())
    try:
        resource = await cancel_on_disconnect(request, run.wait())
    except BaseException:
        run.cancel()
        raise
    if resource["status"] == "failed" and resource.get("error"):
        err = resource["error"]
        raise GatewayError(err["message"], code=err["code"], status=502)
    return JSONResponse(resource)


@router.get("/v1/responses/{response_id}")
async def get_response(response_id: str, request: Request) -> Response:
    return JSONResponse(await _service(request).get(response_id, principal(request)))


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
