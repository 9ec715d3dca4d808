"""``POST /v1/chat/completions``: ingest → the run engine → the chat encoder.

``n > 1`` runs ``n`` generations of the same prompt (:mod:`app.engine.choices`), one encoder
per choice index: a stream interleaves their chunks as they come (each choice ends with its
own ``finish_reason``; the usage chunk, summed over the choices, comes once after all of
them), a non-streaming answer lists the choices by index.  An SSE stream's common deltas leave
pre-encoded (:mod:`app.api.chat.wire`); JSON lines (SageMaker) get dicts.
"""

from __future__ import annotations

import asyncio
import time

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.api.chat.encode import ChatEncoder, merge_choices, sum_usage, usage_dict
from app.api.chat.files import has_file_parts, read_files
from app.api.chat.ingest import ChatIngest, ingest_chat
from app.api.chat.stored import StoreHooks
from app.api.chat.wire import frame
from app.core.errors import InvalidRequest
from app.core.ids import random_id
from app.core.shed import shed_later
from app.engine.engine import Engine, Plan, RunRequest
from app.engine.run import Json, Run
from app.http.auth import check_model, principal
from app.http.body import GatewayRoute, is_big
from app.http.disconnect import cancel_on_disconnect
from app.http.responses import JSONResponse
from app.http.sse import json_line
from app.http.streaming import json_answer, jsonlines_response, sse_response
from schemas.chat import ChatCompletionRequest

router = APIRouter(route_class=GatewayRoute)
BIG = 256  # messages: a longer conversation is converted (and freed) in a worker thread


def check_n(engine: Engine, n: int) -> None:
    cap = engine.registry.config.limits.max_n
    if n > cap:
        raise InvalidRequest(f"n may be at most {cap} on this gateway (each choice is a generation "
                             f"of its own); got {n}.", param="n", code="invalid_value")


def _plain_ingest(body: ChatCompletionRequest) -> ChatIngest | None:
    """``ingest_chat(body)``, or None when a message has file parts (read first, by
    :func:`read_files`)."""
    return None if has_file_parts(body) else ingest_chat(body)


async def _ingest(body: ChatCompletionRequest, request: Request, big: bool) -> ChatIngest:
    """File parts read, then the body converted; a big one (:data:`BIG` messages, or a body
    over 1 MB) scanned and converted in a worker thread."""
    ingest = await asyncio.to_thread(_plain_ingest, body) if big else None
    if ingest is None:
        await read_files(body, request)  # file parts -> text parts (app/api/chat/files.py)
        ingest = await asyncio.to_thread(ingest_chat, body) if big else ingest_chat(body)
    return ingest


async def run_chat(body: ChatCompletionRequest, request: Request, *, jsonlines: bool = False) -> Response:
    """The chat completion flow; ``jsonlines`` streams JSON lines instead of SSE (SageMaker).
    A big request is converted in a worker thread, and its conversation freed there."""
    big = len(body.messages) > BIG or is_big(request)
    ingest = await _ingest(body, request, big)
    try:
        return await _run(body, request, ingest, big, jsonlines)
    finally:
        if big:  # 100,000 messages dropped at once hold the GIL for tens of ms
            shed_later(ingest.conversation.messages)


async def _run(body: ChatCompletionRequest, request: Request, ingest: ChatIngest, big: bool,
               jsonlines: bool) -> Response:
    engine: Engine = request.app.state.engine
    check_n(engine, ingest.params.n)
    check_model(request, ingest.model)
    if ingest.params.n > 1:
        if body.store:
            raise InvalidRequest("store: true keeps one choice; send n: 1 to store the completion.",
                                 param="store")
        return await _run_choices(engine, ingest, request, jsonlines=jsonlines)
    response_id = random_id("chatcmpl-")
    created = int(time.time())

    def encoder(plan: Plan) -> ChatEncoder:
        return ChatEncoder(response_id, ingest.model, created, include_usage=ingest.include_usage,
                           logprobs=plan.params.logprobs, top_logprobs=plan.params.top_logprobs,
                           stream=ingest.stream, wire=ingest.stream and not jsonlines)

    who = principal(request)
    hooks = None
    if body.store:
        messages = await asyncio.to_thread(_dumped, body) if big else _dumped(body)
        hooks = StoreHooks(request.app.state.chat_store, messages, body.metadata or {}, who.tenant)
    starting = engine.start(
        RunRequest(ingest.model, ingest.conversation, ingest.params), encoder, run_id=response_id,
        mode="stream" if ingest.stream else "wait", owner=who, hooks=hooks)
    if not ingest.stream:
        return await json_answer(request, starting)
    # Until the first upstream event nothing has been sent: a client that leaves cancels it.
    run = await cancel_on_disconnect(request, starting)
    if jsonlines:
        return jsonlines_response(run, json_line)
    return sse_response(run, frame, engine.registry.config.shutdown_grace_seconds)


def _dumped(body: ChatCompletionRequest) -> list[Json]:
    return [m.model_dump(exclude_none=True) for m in body.messages]


async def _run_choices(engine: Engine, ingest: ChatIngest, request: Request, *,
                       jsonlines: bool) -> Response:
    response_id = random_id("chatcmpl-")
    created = int(time.time())
    encoders: list[ChatEncoder] = []

    def encoder(plan: Plan, index: int) -> ChatEncoder:
        enc = ChatEncoder(response_id, ingest.model, created, include_usage=False,
                          logprobs=plan.params.logprobs, top_logprobs=plan.params.top_logprobs,
                          stream=ingest.stream, index=index, wire=ingest.stream and not jsonlines,
                          join=False)  # the choices share one queue: one payload per delta
        encoders.append(enc)
        return enc

    def closing(runs: list[Run]) -> list[Json]:
        if not ingest.include_usage:
            return []
        usage = sum_usage([enc.folded.usage for enc in encoders])
        return [{"id": response_id, "object": "chat.completion.chunk", "created": created,
                 "model": ingest.model, "choices": [], "usage": usage_dict(usage)}]

    starting = engine.start_choices(
        RunRequest(ingest.model, ingest.conversation, ingest.params), encoder, ingest.params.n,
        run_id=response_id, mode="stream" if ingest.stream else "wait", owner=principal(request),
        closing=closing)
    if not ingest.stream:
        async def answer() -> Json:
            bodies = await (await starting).results()
            return merge_choices(bodies, [enc.folded.usage for enc in encoders])

        return JSONResponse(await cancel_on_disconnect(request, answer()))
    choices = await cancel_on_disconnect(request, starting)
    if jsonlines:
        return jsonlines_response(choices, json_line)
    return sse_response(choices, frame, engine.registry.config.shutdown_grace_seconds)


@router.post("/v1/chat/completions")
async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
    return await run_chat(body, request)
