"""``POST /v1/chat/completions``: ingest → the run engine → the chat encoder."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.api.chat.encode import ChatEncoder
from app.api.chat.ingest import ingest_chat
from app.core.ids import random_id
from app.engine.engine import Engine, Plan, RunRequest
from app.http.auth import check_model, principal
from app.http.body import GatewayRoute
from app.http.disconnect import cancel_on_disconnect
from app.http.sse import data_event, json_line
from app.http.streaming import json_answer, jsonlines_response, sse_response
from schemas.chat import ChatCompletionRequest

router = APIRouter(route_class=GatewayRoute)


async def run_chat(body: ChatCompletionRequest, request: Request, *, jsonlines: bool = False) -> Response:
    """The chat completion flow; ``jsonlines`` streams JSON lines instead of SSE (SageMaker)."""
    engine: Engine = request.app.state.engine
    ingest = ingest_chat(body)
    check_model(request, ingest.model)
    response_id = random_id("chatcmpl-")
    created = int(time.time())

    def encoder(plan: Plan) -> ChatEncoder:
        return ChatEncoder(response_id, ingest.model, created, include_usage=ingest.include_usage,
                           logprobs=plan.params.logprobs, top_logprobs=plan.params.top_logprobs,
                           stream=ingest.stream)

    starting = engine.start(
        RunRequest(ingest.model, ingest.conversation, ingest.params), encoder, run_id=response_id,
        mode="stream" if ingest.stream else "wait", owner=principal(request))
    if not ingest.stream:
        return await json_answer(request, starting)
    # Until the first upstream event nothing has been sent: a client that leaves cancels it.
    run = await cancel_on_disconnect(request, starting)
    if jsonlines:
        return jsonlines_response(run, json_line)
    return sse_response(run, data_event, engine.registry.config.shutdown_grace_seconds)


@router.post("/v1/chat/completions")
async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
    return await run_chat(body, request)
