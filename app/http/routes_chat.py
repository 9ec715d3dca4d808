"""``POST /v1/chat/completions``: ingest → pipeline → chat encoder."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Request
from sse_starlette import EventSourceResponse
from starlette.responses import Response, StreamingResponse

from app import events as ev
from app.encode.chat import ChatChunkEncoder, completion_body
from app.encode.fold import Folded
from app.encode.sse import DONE, data_event, json_line
from app.errors import GatewayError
from app.http.auth import check_model
from app.http.body import GatewayRoute
from app.http.disconnect import cancel_on_disconnect
from app.http.responses import JSONResponse
from app.http.shutdown import Drain, drained
from app.ids import random_id
from app.ingest.chat import ingest_chat
from app.pipeline import EventStream, start
from app.registry import Registry
from schemas.chat import ChatCompletionRequest

router = APIRouter(route_class=GatewayRoute)


async def _frames(stream: EventStream, encoder: ChatChunkEncoder, frame: Callable[[Any], bytes],
                  done: bytes | None) -> AsyncIterator[bytes]:
    try:
        for payload in encoder.start():
            yield frame(payload)
        async for event in stream:
            for payload in encoder.encode(event):
                yield frame(payload)
        if done is not None:
            yield done
    finally:
        await stream.aclose()


async def _fold(stream: EventStream) -> Folded:
    folded = Folded()
    try:
        async for event in stream:
            folded.add(event)
    finally:
        await stream.aclose()
    return folded


async def run_chat(body: ChatCompletionRequest, request: Request, *, jsonlines: bool = False) -> Response:
    """The chat completion flow; ``jsonlines`` streams JSON lines instead of SSE (SageMaker)."""
    registry: Registry = request.app.state.registry
    ingest = ingest_chat(body)
    check_model(request, ingest.model)
    route = registry.route(ingest.model)
    params = registry.with_defaults(ingest.model, ingest.params)
    # Until the first upstream event nothing has been sent: a client that leaves cancels it.
    stream = await cancel_on_disconnect(request, start(route, ingest.conversation, params))
    response_id = random_id("chatcmpl-")
    created = int(time.time())
    if ingest.stream:
        encoder = ChatChunkEncoder(response_id, ingest.model, created,
                                   include_usage=ingest.include_usage, logprobs=params.logprobs)
        if jsonlines:
            return StreamingResponse(_frames(stream, encoder, json_line, None),
                                     media_type="application/jsonlines")
        drain = Drain(registry.config.shutdown_grace_seconds)

        async def farewell() -> list[bytes]:
            await stream.aclose()
            error = ev.Error("The gateway is shutting down; the answer was cut short.",
                             code="server_shutdown", status=503)
            return [data_event(payload) for payload in encoder.encode(error)] + [DONE]

        return EventSourceResponse(drained(_frames(stream, encoder, data_event, DONE), drain, farewell),
                                   ping=15, sep="\n", shutdown_event=drain.event,
                                   shutdown_grace_period=drain.grace + 5,
                                   headers={"x-accel-buffering": "no", "cache-control": "no-cache"})
    folded = await cancel_on_disconnect(request, _fold(stream))
    if folded.error is not None:
        raise _as_exception(folded.error)
    return JSONResponse(completion_body(folded, response_id, ingest.model, created,
                                        logprobs=params.logprobs))


@router.post("/v1/chat/completions")
async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
    return await run_chat(body, request)


def _as_exception(error: ev.Error) -> GatewayError:
    exc = GatewayError(error.message, code=error.code, status=error.status)
    exc.type = error.type
    return exc
