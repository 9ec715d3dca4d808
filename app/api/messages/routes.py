"""``POST /v1/messages`` and ``POST /v1/messages/count_tokens``: documents read
(:mod:`app.api.messages.documents`) → ingest → the run engine → the Messages encoder
(counting: the same renderer, :mod:`app.engine.count`).  Streams carry Anthropic's ``ping``
events.

Anthropic's server tools (``web_search``, ``code_execution``, ``web_fetch``) run on the engine's agentic loop
over the gateway's own providers (:mod:`app.api.messages.server_tools`), bounded by
``[tools]`` as on Responses; a server tool without a provider is a 400 naming it.  The MCP
connector's ``mcp_servers`` run on Responses' hosted MCP (:mod:`app.api.messages.mcp`).

A stream's deltas leave pre-encoded (:mod:`app.api.messages.wire`).

Thinking signatures are sealed and opened with the key Responses' ``encrypted_content`` uses
(:mod:`app.items.sealing`), bound to the request's tenant.  Errors on these paths leave in
Anthropic's envelope (:mod:`app.http.anthropic`).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from fastapi import APIRouter, Request
from sse_starlette import ServerSentEvent
from starlette.responses import Response

from app.api.messages import web_fetch, wire
from app.api.messages.documents import has_sources, read_documents
from app.api.messages.encode import MessagesEncoder
from app.api.messages.ingest import OpenThinking, conversation_of, ingest_messages
from app.api.messages.mcp import open_mcp
from app.api.messages.server_blocks import ServerBlocks
from app.api.messages.server_tools import open_server_tools
from app.core.errors import InvalidRequest
from app.core.ids import random_id
from app.core.shed import shed_later
from app.engine.count import count_tokens
from app.engine.engine import Engine, Plan, RunRequest
from app.engine.loop import LoopLimits
from app.http.auth import check_model, principal
from app.http.body import GatewayRoute
from app.http.disconnect import cancel_on_disconnect
from app.http.responses import JSONResponse
from app.http.streaming import json_answer, sse_response
from app.items.resolve import open_reasoning, seal_reasoning
from app.items.sealing import Sealer
from app.tools.base import Toolboxes
from schemas.messages import CountTokensRequest, MessagesRequest, ServerTool

router = APIRouter(route_class=GatewayRoute)


BIG = 256  # messages: a longer conversation is converted in a worker thread


def _sealer(request: Request) -> Sealer:
    sealer: Sealer = request.app.state.responses.sealer
    return sealer


def _opener(request: Request, sealer: Sealer | None = None, tenant: str | None = None) -> OpenThinking:
    sealer = sealer if sealer is not None else _sealer(request)
    tenant = tenant if tenant is not None else principal(request).tenant

    def open_thinking(token: str, param: str) -> str:
        return open_reasoning(sealer, tenant, token, param)

    return open_thinking


def _ping() -> ServerSentEvent:
    """Anthropic's keep-alive: ``event: ping`` with ``{"type": "ping"}``, every 15 s once the
    stream has started (the response starts with the backend's first token)."""
    return ServerSentEvent(data='{"type":"ping"}', event="ping", sep="\n")


def _context(body: MessagesRequest) -> str:
    """The conversation's text, where a URL must appear to be fetched (web fetch): the JSON of
    the messages and the system prompt (built only when the request offers web fetch)."""
    fetching = any(isinstance(t, ServerTool) and t.type in web_fetch.TYPES for t in body.tools or ())
    return body.model_dump_json(include={"system", "messages"}) if fetching else ""


@router.post("/v1/messages")
async def create_message(body: MessagesRequest, request: Request) -> Response:
    state = request.app.state
    engine: Engine = state.engine
    model = engine.registry.canonical(body.model)  # the answer names the model asked for
    check_model(request, model)
    await read_documents(body, request)  # after the key may use the model: PDFs are work
    services, who = state.responses, principal(request)
    sealer: Sealer = services.sealer
    opener = _opener(request, sealer, who.tenant)
    ingest = (await asyncio.to_thread(ingest_messages, body, opener) if len(body.messages) > BIG
              else ingest_messages(body, opener))  # a long history: CPU off the event loop
    message_id = random_id("msg_")
    settings = engine.registry.config.tools
    server = open_server_tools(body.tools, settings, services.search, services.sandbox,
                               engine.registry.config.media, _context(body)) if body.tools else None
    # connected: closed by the run
    mcp = await open_mcp(body.mcp_servers, settings, who.tenant) if body.mcp_servers else None
    conversation, mcp_names = ingest.conversation, {}
    boxes = [b.toolbox for b in (server, mcp) if b is not None]
    if mcp is not None:
        mcp_names = {n: (str(t.namespace), t.name) for n, t in mcp.wire.items() if t.kind == "mcp"}
        names = {t.name for t in conversation.tools}
        taken = sorted(f.name for f in mcp.toolbox.functions if f.name in names)
        if taken:
            await mcp.toolbox.aclose()
            raise InvalidRequest(f"mcp_servers: a tool of this request has the name of an MCP tool "
                                 f"({', '.join(taken)}).", param="mcp_servers")
        conversation = replace(conversation, tools=(*conversation.tools, *mcp.toolbox.functions))

    def seal(text: str) -> str:
        return seal_reasoning(sealer, who.tenant, text)

    def encoder(plan: Plan) -> MessagesEncoder:
        blocks = (ServerBlocks(server.names if server else {}, seal, server.browser if server else None,
                               mcp_names) if boxes else None)
        return MessagesEncoder(message_id, ingest.model, seal, stream=ingest.stream,
                               show_thinking=ingest.show_thinking, server=blocks, wire=ingest.stream)

    if boxes:
        limits = LoopLimits(None, settings.max_rounds, settings.deadline_seconds, settings.max_parallel)
        toolbox = boxes[0] if len(boxes) == 1 else Toolboxes(boxes)
        run_request = RunRequest(model, conversation, ingest.params, limits=limits, toolbox=toolbox)
    else:  # client tools only: one generation, no loop
        run_request = RunRequest(model, conversation, ingest.params)
    starting = engine.start(run_request, encoder, run_id=message_id,
                            mode="stream" if ingest.stream else "wait", owner=who)
    if not ingest.stream:
        return await json_answer(request, starting)
    run = await cancel_on_disconnect(request, starting)
    return sse_response(run, wire.frame, engine.registry.config.shutdown_grace_seconds, done=None,
                        ping=_ping)


@router.post("/v1/messages/count_tokens")
async def count_message_tokens(body: CountTokensRequest, request: Request) -> Response:
    engine: Engine = request.app.state.engine
    model = engine.registry.canonical(body.model)
    check_model(request, model)
    big = len(body.messages) > BIG  # a long conversation: scanned, converted and freed off the loop
    if not big or await asyncio.to_thread(has_sources, body):
        await read_documents(body, request)
    conversation, params = (await asyncio.to_thread(conversation_of, body, _opener(request))
                            if big else conversation_of(body, _opener(request)))
    counted = await count_tokens(engine.registry, model, conversation, params)
    if big:
        shed_later(conversation.messages)
    headers = {} if counted.exact else {"ocm-token-count": "estimated"}
    return JSONResponse({"input_tokens": counted.tokens}, headers=headers)
