"""Open Responses WebSocket mode: ``GET /v1/responses`` upgraded to a WebSocket.

What the spec document says (``x-openresponses-websocket`` on ``/responses``): every client
message is a ``WebSocketResponseCreateEvent`` (the create body plus ``"type":
"response.create"``; ``stream``, ``stream_options`` and ``background`` must not be sent:
``stream: true`` and ``stream_options``, which OpenAI's own WebSocket mode and the Agents SDK
send, are accepted and mean nothing more; ``stream: false`` and ``background`` are refused), the
server answers with the same streaming events as ``text/event-stream``, and failures are
``WebSocketErrorEvent`` (``{"type": "error", "status": <HTTP-style status>, "error": {code,
message, param, type}}``, no ``sequence_number``).  What this module adds, following OpenAI's
WebSocket mode (the public compliance suite tests it):

* One response at a time per socket: messages that arrive while a response streams wait in
  order (at most :data:`MAX_PENDING`, and ``limits.max_body_bytes`` in all; one more is
  refused with a 429 error event).  A key has at most ``limits.max_websockets`` sockets open
  (:mod:`app.http.limits`: a 429 instead of the upgrade).  A bad
  message (not JSON, not a ``response.create``, invalid body, over ``limits.max_body_bytes``)
  is answered by an error event and the socket stays open.
* Chaining: ``previous_response_id`` works as over HTTP, and the socket also remembers its most
  recent ``store: false`` response (:class:`SocketStore`), so a ``store: false`` chain continues
  on the same socket without anything being stored.  That memory is the socket's own: after a
  reconnect, or once a turn that continued it failed (the entry is evicted), continuing it is
  ``previous_response_not_found``.
* The event dialect (:mod:`app.api.responses.dialect`) is chosen once, from the upgrade
  request's headers, by the same rule as for HTTP.
* Closing the socket cancels the response in flight (its upstream request is closed) and drops
  the waiting messages.
* Shutdown (SIGTERM): the response in flight ends with the ``server_shutdown`` error
  (``error`` + ``response.failed``), then the socket closes with 1012, "service restart"
  (:mod:`app.http.ws_protocol` holds uvicorn's close back for that).

Authentication is the auth middleware's: a bad key gets a 401 instead of the upgrade.  The
key's rate limits (:mod:`app.http.limits`) count every ``response.create`` as a request: over
them, the message is answered by a 429 error event.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from typing import Any

import orjson
from fastapi import APIRouter
from pydantic import ValidationError
from starlette.types import Message
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from app.api.responses.dialect import choose
from app.api.responses.service import ResponsesService
from app.core.access import Principal
from app.core.errors import GatewayError, InvalidRequest, ServerShutdown, error_fields
from app.engine.run import Run
from app.http import memory
from app.http.auth import check_model, principal
from app.http.body import BodyRejected, parse_json
from app.http.errors import validation_message
from app.http.limits import TurnLimits
from app.http.ws_protocol import EXTENSION, GRACE_SECONDS
from app.stores.base import Json as StoreJson
from app.stores.base import ResponseStore, StoredResponse
from schemas.responses import CreateResponseBody

Json = dict[str, Any]
router = APIRouter()
log = logging.getLogger("ocm_gateway")

MAX_PENDING = 16  # response.create messages waiting behind the one in flight
BIG_MESSAGES = 4 * 1024 * 1024  # a socket that received more trims the heap when it closes
HTTP_ONLY = ("background",)  # x-openresponses-disallowed; stream(_options) are tolerated
TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
CONTINUABLE = frozenset({"completed", "incomplete"})


class SocketStore:
    """The shared response store with one socket's most recent ``store: false`` response in
    front of it: only :meth:`get` looks at that entry, everything else is the shared store's
    (a :class:`~app.stores.base.ResponseStore` by delegation)."""

    def __init__(self, shared: ResponseStore) -> None:
        self.shared = shared
        self.recent: tuple[str, StoredResponse] | None = None  # (tenant, response)

    async def get(self, response_id: str, owner: str) -> StoredResponse | None:
        if self.recent is not None:
            tenant, stored = self.recent
            if stored.resource["id"] == response_id and tenant == owner:
                return stored
        return await self.shared.get(response_id, owner)

    async def put(self, resource: StoreJson, input_items: list[StoreJson], owner: str) -> None:
        await self.shared.put(resource, input_items, owner)

    async def touch(self, response_ids: list[str]) -> set[str]:
        return await self.shared.touch(response_ids)

    async def request_cancel(self, response_id: str, owner: str) -> bool:
        return await self.shared.request_cancel(response_id, owner)

    async def delete(self, response_id: str, owner: str) -> bool:
        return await self.shared.delete(response_id, owner)

    async def put_events(self, response_id: str, owner: str, events: list[StoreJson]) -> None:
        await self.shared.put_events(response_id, owner, events)

    async def get_events(self, response_id: str, owner: str) -> list[StoreJson] | None:
        return await self.shared.get_events(response_id, owner)

    async def page(self, owner: str, *, limit: int, after: str | None, ascending: bool,
                   ) -> list[StoreJson] | None:
        return await self.shared.page(owner, limit=limit, after=after, ascending=ascending)

    async def expire(self, created_before: int) -> int:
        return await self.shared.expire(created_before)

    async def blob_sizes(self, owner: str) -> dict[str, int]:
        return await self.shared.blob_sizes(owner)

    async def close(self) -> None:
        return None  # the shared store is the application's

    def remember(self, tenant: str, stored: StoredResponse | None) -> None:
        self.recent = None if stored is None else (tenant, stored)

    def forget(self, response_id: str | None) -> None:
        if self.recent is not None and self.recent[1].resource["id"] == response_id:
            self.recent = None


def parse_create(raw: str | bytes, limit: int) -> CreateResponseBody:
    """One client message as a create body (streamed); an :class:`InvalidRequest` says why not."""
    data = raw.encode() if isinstance(raw, str) else raw
    if len(data) > limit:
        raise InvalidRequest(f"Message over {limit} bytes.", code="request_too_large", status=413)
    try:
        value = parse_json(data)
    except BodyRejected as exc:
        raise InvalidRequest(str(exc.detail).replace("request body", "message"), code=exc.code,
                             param=exc.param) from None
    if not isinstance(value, dict):
        raise InvalidRequest("A message must be a JSON object (a response.create event).",
                             code="invalid_json")
    kind = value.pop("type", None)
    if kind != "response.create":
        if kind is None:
            raise InvalidRequest("Missing required parameter: 'type' (send \"type\": \"response.create\").",
                                 param="type", code="missing_required_parameter")
        raise InvalidRequest(f"Unknown client event type {kind!r}: the only one is 'response.create'.",
                             param="type", code="invalid_value")
    if value.get("stream") is False:
        raise InvalidRequest("stream: false is not possible in WebSocket mode (every response is "
                             "streamed on the socket); leave stream out.", param="stream",
                             code="invalid_value")
    value.pop("stream", None)
    value.pop("stream_options", None)
    for name in HTTP_ONLY:
        if value.get(name) is not None:
            raise InvalidRequest(f"{name} is an HTTP field and must not be sent in WebSocket mode "
                                 "(every response is streamed on the socket).", param=name,
                                 code="unknown_parameter")
    try:
        body = CreateResponseBody.model_validate_json(orjson.dumps(value))
    except ValidationError as exc:
        message, param, code = validation_message(exc.errors())
        raise InvalidRequest(message, param=param, code=code) from None
    return body.model_copy(update={"stream": True})


def error_event(exc: GatewayError) -> Json:
    """A ``WebSocketErrorEvent``."""
    return {"type": "error", "status": exc.status,
            "error": error_fields(exc.message, exc.type, exc.code, exc.param)}


class Session:
    """One socket: a reader that queues messages (and notices the close at once) and a worker
    that answers them one at a time."""

    def __init__(self, ws: WebSocket) -> None:
        shared: ResponsesService = ws.app.state.responses
        self.ws = ws
        self.who: Principal = principal(ws)
        self.store = SocketStore(shared.store)
        self.service = copy.copy(shared)  # the same engine and runs; this socket's store view
        self.service.store = self.store
        config = shared.registry.config
        self.dialect = choose(config.responses.event_dialect, ws.headers)
        self.limit = config.limits.max_body_bytes
        self.inbox: asyncio.Queue[Message] = asyncio.Queue(MAX_PENDING)
        self.pending_bytes = 0  # of the messages waiting: at most limits.max_body_bytes
        self.held_bytes = 0  # of every message the socket received
        limits = ws.scope.get("state", {}).get("limits")
        self.limits = limits if isinstance(limits, TurnLimits) else None
        shutdown = ws.scope.get("extensions", {}).get(EXTENSION, {}).get("event")
        self.shutdown = shutdown if isinstance(shutdown, asyncio.Event) else asyncio.Event()
        self.current: Run | None = None
        self._turn_done = asyncio.Event()

    async def serve(self) -> None:
        await self.ws.accept()
        loop = asyncio.get_running_loop()
        reader, worker = loop.create_task(self._read()), loop.create_task(self._work())
        stopping = loop.create_task(self._stop_on_shutdown(worker))
        try:
            done, _ = await asyncio.wait({reader, worker, stopping}, return_when=asyncio.FIRST_COMPLETED)
            failure = next((t.exception() for t in done if not t.cancelled()), None)
            if failure is not None and not isinstance(failure, WebSocketDisconnect | OSError):
                log.error("WebSocket session failed", exc_info=failure)
        finally:  # closed by the client (reader) or a failed send (worker): cancel what is left
            for task in (reader, worker, stopping):
                task.cancel()
            for task in (reader, worker, stopping):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if self.ws.application_state == WebSocketState.CONNECTED and \
                self.ws.client_state == WebSocketState.CONNECTED:
            with contextlib.suppress(Exception):
                await self.ws.close(1011)
        if self.held_bytes > BIG_MESSAGES:  # give what its waiting messages held back to the OS
            self.inbox = asyncio.Queue(MAX_PENDING)
            await memory.trim()

    async def _stop_on_shutdown(self, worker: asyncio.Task[None]) -> None:
        """The server is stopping: end the response in flight with its terminal event, then
        close the socket as a service restart (1012); waiting messages are dropped."""
        await self.shutdown.wait()
        run = self.current
        if run is not None:
            run.stop(ServerShutdown("The gateway is shutting down; the response was stopped."))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._turn_done.wait()), GRACE_SECONDS - 1)
        worker.cancel()
        with contextlib.suppress(Exception):
            await self.ws.close(1012)

    async def _read(self) -> None:
        while True:
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            size = len(message.get("text") or message.get("bytes") or b"")
            if size > self.limit:  # answered in its turn, without holding its bytes
                message = {"type": "websocket.receive", "text": None, "ocm_size": size}
                size = 0
            if self.inbox.full() or self.pending_bytes + size > self.limit:
                await self._send(error_event(GatewayError(
                    f"Too many response.create messages are waiting (at most {MAX_PENDING}, "
                    f"{self.limit} bytes in all): a socket answers one at a time.",
                    code="too_many_pending_requests", status=429)))
                continue
            self.pending_bytes += size
            self.held_bytes += size
            self.inbox.put_nowait(message)

    async def _work(self) -> None:
        while True:
            message = await self.inbox.get()
            self.pending_bytes -= len(message.get("text") or message.get("bytes") or b"")
            await self._turn(message)

    async def _send(self, payload: Json) -> None:
        await self.ws.send_text(orjson.dumps(payload).decode())

    async def _turn(self, message: Message) -> None:
        previous: str | None = None
        admitted = False
        final: Json | None = None
        seen: list[list[Json]] = []  # the context the response saw (kept for store: false)
        try:
            try:
                raw = message.get("text")
                if message.get("ocm_size"):
                    raise InvalidRequest(f"Message over {self.limit} bytes.", code="request_too_large",
                                         status=413)
                if raw is None:
                    raise InvalidRequest("Binary messages are not accepted: send response.create as "
                                         "text.", code="invalid_json")
                body = parse_create(raw, self.limit)
                previous = body.previous_response_id
                check_model(self.ws, body.model)
                if self.limits is not None:  # the key's rate limits: every message is a request
                    await self.limits.admit()
                    admitted = True
                run = await self.service.create(body, self.who, self.dialect, seen=seen.append)
            except GatewayError as exc:
                self.store.forget(previous)  # a failed continuation evicts what it continued
                await self._send(error_event(exc))
                return
            except (asyncio.CancelledError, KeyboardInterrupt, SystemExit, GeneratorExit):
                raise
            except BaseException as exc:  # a bug, or native code failing: say so, keep the socket
                log.error("WebSocket response.create failed", exc_info=exc)
                self.store.forget(previous)
                await self._send(error_event(GatewayError("The gateway failed unexpectedly.",
                                                          code="internal_error", status=500)))
                return
            final = await self._stream(run)
        finally:
            if admitted and self.limits is not None:
                usage = (final or {}).get("usage") or {}
                self.limits.done(int(usage.get("total_tokens") or 0))
        if final is None or final.get("status") not in CONTINUABLE:
            self.store.forget(previous)
        elif body.store:  # continued from the shared store from now on
            self.store.remember(self.who.tenant, None)
        else:
            self.store.remember(self.who.tenant, StoredResponse(final, seen[0]))

    async def _stream(self, run: Run) -> Json | None:
        """Send the run's events; its final response.  Leaving early (the socket closed: this
        task is cancelled) cancels the run, which closes its upstream request."""
        final: Json | None = None
        frames = run.frames().batched()
        self.current = run
        self._turn_done.clear()
        try:
            async for batch in frames:
                for payload in batch:
                    if payload.get("type") in TERMINAL and isinstance(payload.get("response"), dict):
                        final = payload["response"]
                    await self._send(payload)
        finally:
            self.current = None
            self._turn_done.set()
            await frames.aclose()
        return final


@router.websocket("/v1/responses")
async def responses_socket(ws: WebSocket) -> None:
    await Session(ws).serve()
