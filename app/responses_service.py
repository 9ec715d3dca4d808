"""Open Responses orchestration: context assembly, truncation, runs, persistence, cancel.

A *run* is one generation: a producer task that pulls events from the shared
pipeline, encodes them with :class:`ResponsesEncoder` and puts the encoded
streaming events on a queue.  Streaming responses forward the queue, non-streaming
ones wait for the end, background ones return at once.  Cancelling the task (client
disconnect or ``POST /v1/responses/{id}/cancel``) closes the upstream request and
ends the response with status ``cancelled``; the final resource is persisted unless
``store`` is false.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from app import events as ev
from app.access import ANONYMOUS, Principal
from app.encode.responses import ResponsesEncoder
from app.errors import ContextLengthExceeded, GatewayError, InvalidRequest, NotFound
from app.ids import random_id
from app.ingest.responses import build_conversation, generation_params, new_input_items
from app.model import Conversation, GenerationParams, ImagePart
from app.pipeline import EventStream, ModelRoute, context_window, estimate_tokens, render, start
from app.registry import Registry
from app.store import ResponseStore, StoredResponse
from schemas.responses import CreateResponseBody, TextFormatJSONSchema

Json = dict[str, Any]


def _not_found(response_id: str, param: str = "response_id") -> NotFound:
    code = "previous_response_not_found" if param == "previous_response_id" else "not_found"
    return NotFound(f"No response with id {response_id!r} was found.", param=param, code=code)


def fit_context(route: ModelRoute, conv: Conversation, params: GenerationParams,
                window: int | None = None) -> tuple[Conversation, int]:
    """``truncation: auto``: drop the oldest whole turns until the prompt fits.

    A turn starts at a user message and runs to the next one, so a function call is
    never separated from its output; system / developer messages and the latest
    turn are always kept.  Returns the conversation and how many messages were dropped.
    """
    reserve = params.max_tokens or 0
    msgs = list(conv.messages)
    dropped = 0
    while True:
        candidate = replace(conv, messages=tuple(msgs))
        prompt = render(route, candidate, params)
        if estimate_tokens(prompt) + reserve < (window or route.context_window):
            return candidate, dropped
        body = [i for i, m in enumerate(msgs) if m.role not in ("system", "developer")]
        user_starts = [i for i in body if msgs[i].role == "user"]
        if len(user_starts) < 2:
            raise ContextLengthExceeded(
                "The input does not fit the model's context window even after dropping all but the "
                "latest turn.", param="input")
        first, second = user_starts[0], user_starts[1]
        cut = [i for i in body if first <= i < second] or [body[0]]
        # Also drop anything before the first user turn that is not an instruction.
        cut = sorted(set(cut) | {i for i in body if i < first})
        dropped += len(cut)
        msgs = [m for i, m in enumerate(msgs) if i not in set(cut)]


def _resource(body: CreateResponseBody, response_id: str, params: GenerationParams,
              status: str) -> Json:
    tools = [{"type": "function", "name": t.name, "description": t.description,
              "parameters": t.parameters, "strict": t.strict if t.strict is not None else True}
             for t in body.tools or []]
    fmt: Json = {"type": "text"}
    f = body.text.format if body.text else None
    if isinstance(f, TextFormatJSONSchema):
        # The Open Responses document types the echoed schema as null (JsonSchemaResponseFormat).
        fmt = {"type": "json_schema", "name": f.name, "description": f.description, "schema": None,
               "strict": bool(f.strict)}
    elif f is not None:
        fmt = {"type": f.type}
    choice = body.tool_choice
    tool_choice: Any = choice if isinstance(choice, str) or choice is None else choice.model_dump()
    return {
        "id": response_id, "object": "response", "created_at": int(time.time()), "completed_at": None,
        "status": status, "incomplete_details": None, "model": body.model,
        "previous_response_id": body.previous_response_id, "instructions": body.instructions,
        "output": [], "error": None, "tools": tools, "tool_choice": tool_choice or "auto",
        "truncation": body.truncation, "parallel_tool_calls": params.parallel_tool_calls,
        "text": {"format": fmt}, "top_p": body.top_p if body.top_p is not None else 1.0,
        "presence_penalty": body.presence_penalty or 0.0, "frequency_penalty": body.frequency_penalty or 0.0,
        "top_logprobs": body.top_logprobs or 0,
        "temperature": body.temperature if body.temperature is not None else 1.0,
        "reasoning": {"effort": params.reasoning_effort, "summary": None}, "usage": None,
        "max_output_tokens": body.max_output_tokens, "max_tool_calls": body.max_tool_calls,
        "store": body.store, "background": body.background, "service_tier": body.service_tier,
        "metadata": body.metadata or {}, "safety_identifier": body.safety_identifier,
        "prompt_cache_key": body.prompt_cache_key,
    }


class Run:
    """One generation in flight; see the module docstring."""

    def __init__(self, service: ResponsesService, encoder: ResponsesEncoder, context: list[Json],
                 store: bool, owner: Principal) -> None:
        self.encoder = encoder
        self.owner = owner
        self.queue: asyncio.Queue[Json | None] = asyncio.Queue()
        self._service = service
        self._context = context
        self._store = store
        self.task: asyncio.Task[None] | None = None

    @property
    def id(self) -> str:
        return str(self.encoder.resource()["id"])

    @property
    def stored(self) -> bool:
        return self._store

    def begin(self, stream: EventStream | None, route: ModelRoute, conv: Conversation,
              params: GenerationParams) -> None:
        for event in self.encoder.start():
            self.queue.put_nowait(event)
        self.task = asyncio.get_running_loop().create_task(self._produce(stream, route, conv, params))

    async def _produce(self, stream: EventStream | None, route: ModelRoute, conv: Conversation,
                       params: GenerationParams) -> None:
        self._service.inflight[self.id] = self
        self.encoder.resource()["status"] = "in_progress"  # a queued background run has started
        try:
            if stream is None:  # background: failures before the first chunk become a failed response
                try:
                    stream = await start(route, conv, params)
                except GatewayError as exc:
                    self._emit(self.encoder.fail(ev.Error(exc.message, code=exc.code or "error",
                                                          type=exc.type, status=exc.status)))
                    return
            async for event in stream:
                self._emit(self.encoder.encode(event))
                if self.encoder.terminal:
                    break
        except asyncio.CancelledError:
            pass
        finally:
            if stream is not None:
                with contextlib.suppress(Exception):
                    await stream.aclose()
            if not self.encoder.terminal:
                self._emit(self.encoder.cancel())
            self._service.inflight.pop(self.id, None)
            if self._store:
                with contextlib.suppress(Exception):
                    await self._service.store.put(self.encoder.resource(), self._context,
                                                  self.owner.tenant)
            self.queue.put_nowait(None)

    def _emit(self, events: list[Json]) -> None:
        for e in events:
            self.queue.put_nowait(e)

    async def events(self) -> AsyncIterator[Json]:
        while (event := await self.queue.get()) is not None:
            yield event

    async def wait(self) -> Json:
        async for _ in self.events():
            pass
        return self.encoder.resource()

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()


def lost(resource: Json) -> Json:
    """A run whose process died (kill -9, crash): it ends ``failed``, its open items incomplete."""
    output = [{**item, "status": "incomplete"} if item.get("status") == "in_progress" else item
              for item in resource.get("output", [])]
    return {**resource, "status": "failed", "output": output, "error": {
        "code": "run_lost", "message": "The gateway process running this response stopped before "
                                       "it finished; the response is incomplete."}}


class ResponsesService:
    def __init__(self, registry: Registry, store: ResponseStore) -> None:
        self.registry = registry
        self.store = store
        self.inflight: dict[str, Run] = {}

    async def heartbeat(self) -> None:
        """Run for the life of the process: mark this process's stored runs as alive."""
        while True:
            await asyncio.sleep(self.registry.config.store.heartbeat_seconds)
            ids = [rid for rid, run in self.inflight.items() if run.stored]
            with contextlib.suppress(Exception):
                await self.store.touch(ids)

    async def _stored(self, response_id: str, who: Principal, param: str = "response_id") -> StoredResponse:
        """A stored response of ``who``'s tenant, on a model ``who`` may use; else 404. One
        stored as in flight whose process stopped heartbeating is ended as ``failed`` first."""
        stored = await self.store.get(response_id, who.tenant)
        if stored is None or not who.may_use(str(stored.resource.get("model"))):
            raise _not_found(response_id, param)
        if (stored.resource.get("status") in ("queued", "in_progress")
                and response_id not in self.inflight
                and time.time() - stored.updated_at > self.registry.config.store.lost_after_seconds):
            stored = StoredResponse(lost(stored.resource), stored.input_items, time.time())
            await self.store.put(stored.resource, stored.input_items, who.tenant)
        return stored

    def _inflight(self, response_id: str, who: Principal) -> Run | None:
        run = self.inflight.get(response_id)
        if run is None or run.owner.tenant != who.tenant or not who.may_use(
                str(run.encoder.resource()["model"])):
            return None
        return run

    async def _context(self, body: CreateResponseBody, who: Principal) -> list[Json]:
        context: list[Json] = []
        if body.previous_response_id:
            prev = await self._stored(body.previous_response_id, who, "previous_response_id")
            context = prev.input_items + prev.resource["output"]
        return context + new_input_items(body)

    async def create(self, body: CreateResponseBody, who: Principal = ANONYMOUS) -> Run:
        if body.background and not body.store:
            raise InvalidRequest("background responses must be stored (store: true).", param="background")
        if body.background and body.stream:
            raise InvalidRequest("stream together with background is not supported.", param="background")
        route = self.registry.route(body.model)
        context = await self._context(body, who)
        conv = build_conversation(body, context)
        params = self.registry.with_defaults(body.model, generation_params(body))
        if not route.backend.capabilities.images:
            for _i, msg in enumerate(conv.messages):
                if any(isinstance(p, ImagePart) for p in msg.content):
                    raise InvalidRequest(f"The {route.backend.kind} backend of {body.model!r} does not "
                                         "accept images.", param="input", code="unsupported_content_type")
        dropped = 0
        if body.truncation == "auto":
            conv, dropped = fit_context(route, conv, params, await context_window(route))
        status = "queued" if body.background else "in_progress"
        effort = params.reasoning_effort or route.default_reasoning_effort
        resource = _resource(body, random_id("resp_"), replace(params, reasoning_effort=effort), status)
        if dropped:
            resource["ocm:truncation"] = {"dropped_messages": dropped}
        run = Run(self, ResponsesEncoder(resource), context, body.store, who)
        stream = None if body.background else await start(route, conv, params)
        if body.store:  # stored from the start: a crash mid-run leaves a failed response, not a 404
            try:
                await self.store.put(run.encoder.snapshot(), context, who.tenant)
            except BaseException:
                if stream is not None:
                    await stream.aclose()
                raise
        run.begin(stream, route, conv, params)
        return run

    async def get(self, response_id: str, who: Principal = ANONYMOUS) -> Json:
        run = self._inflight(response_id, who)
        if run is not None:
            return run.encoder.snapshot()
        return (await self._stored(response_id, who)).resource

    async def input_items(self, response_id: str, who: Principal = ANONYMOUS) -> list[Json]:
        return (await self._stored(response_id, who)).input_items

    async def delete(self, response_id: str, who: Principal = ANONYMOUS) -> None:
        await self._stored(response_id, who)  # the model allow-list applies to deletes too
        if not await self.store.delete(response_id, who.tenant):
            raise _not_found(response_id)

    async def cancel(self, response_id: str, who: Principal = ANONYMOUS) -> Json:
        run = self._inflight(response_id, who)
        if run is None:
            stored = await self._stored(response_id, who)
            raise InvalidRequest(f"Response {response_id!r} is not in progress (status "
                                 f"{stored.resource['status']!r}); only in-flight responses can be "
                                 "cancelled.", param="response_id")
        run.cancel()
        if run.task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(run.task), timeout=10)
        return run.encoder.resource()
