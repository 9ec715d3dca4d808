"""Open Responses on the run engine: context, storage, retrieve, cancel.

A create request becomes a :class:`~app.engine.run.Run` whose encoder is a
:class:`ResponsesEncoder` (the resource is the fold of its events, from the one
:mod:`app.api.responses.resource` starts).  Stored responses
are written when the run starts and when it ends (:mod:`app.api.responses.hooks`); a process
that died mid-run leaves a response that readers end as ``failed`` (``run_lost``).
Streaming, waiting, background and cancellation are the engine's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from app.api.conversations.service import ConversationsService
from app.api.responses.dialect import OPEN_RESPONSES, EventDialect
from app.api.responses.encode import ResponsesEncoder
from app.api.responses.following import StoredEnd, cancel_elsewhere, delete_elsewhere, lost
from app.api.responses.hooks import EndHooks, StoreHooks, snapshot
from app.api.responses.hosted import open_hosted
from app.api.responses.hosted_context import HostedContext
from app.api.responses.ingest import build_conversation, generation_params, tools_of
from app.api.responses.resource import start_resource
from app.api.responses.tools import expand_hosted
from app.core.access import ANONYMOUS, Principal
from app.core.conversation import Conversation, ToolChoice
from app.core.errors import InvalidRequest, ModelNotFound, NotFound
from app.core.ids import random_id
from app.core.shed import shed_later
from app.engine.count import TokenCount
from app.engine.engine import Engine, Plan, RunRequest
from app.engine.loop import LoopLimits
from app.engine.replay import Replay, ReplayReader
from app.engine.run import Mode, Run, RunHooks
from app.engine.signals import LocalSignals, RemoteReader, Signals, SignalsUnavailable
from app.items import compact, file_jobs
from app.items.file_ids import has_file_ids, inline_file_ids
from app.items.messages import new_input_items
from app.items.resolve import INCLUDE, Resolved, has_files, resolve, seal_reasoning
from app.items.sealing import Sealer
from app.knowledge.files import FileStore
from app.stores.base import ConversationStore, ResponseStore, StoredResponse
from app.tools import code, file_search, web
from app.tools.code import Sandbox
from app.tools.file_search import VectorSearch
from app.tools.search import SearchProvider
from schemas.responses import CompactBody, CreateResponseBody, InputTokensBody, SpecificHosted

Json = dict[str, Any]
log = logging.getLogger("ocm_gateway")
CONVERSATION = "conversation"  # the label of context items that come from a conversation
BIG = 256  # items: more are resolved / compacted in a worker thread (the event loop stays free)


class _StoreCancels(LocalSignals):
    """No Redis: a cancel of a run another process runs on the same store (a worker of
    ``--workers N``) is recorded there (``SignalsUnavailable`` is what sends
    :func:`cancel_elsewhere` that way); the owner's heartbeat reads it."""

    async def cancel(self, run_id: str) -> None:
        raise SignalsUnavailable("no Redis: the cancel goes through the store")


_THROUGH_THE_STORE = _StoreCancels()


def _not_found(response_id: str, param: str = "response_id") -> NotFound:
    code = "previous_response_not_found" if param == "previous_response_id" else "not_found"
    return NotFound(f"No response with id {response_id!r} was found.", param=param, code=code)


class ResponsesService:
    """Open Responses on the run engine: context from ``previous_response_id``, the
    resource, storage, and the in-flight runs of this API (retrieve, cancel)."""

    files: FileStore | None = None  # the Files API's store: file_id inputs (app/items/file_ids.py)
    knowledge: VectorSearch | None = None  # vector stores: file_search runs (app/tools/file_search.py)

    def __init__(self, engine: Engine, store: ResponseStore,
                 conversations: ConversationStore | None = None,
                 search: SearchProvider | None = None, sandbox: Sandbox | None = None,
                 signals: Signals | None = None) -> None:
        self.engine = engine
        self.signals: Signals = signals if signals is not None else LocalSignals()  # runs on other replicas
        self.search = search  # the web_search provider ([tools.web_search]); None: not run
        self.sandbox = sandbox  # the code interpreter's service ([tools.code_interpreter]); None: not run
        self.registry = engine.registry
        self.store = store
        settings = self.registry.config.responses
        self.sealer = Sealer.from_config(settings.encryption_key, settings.previous_encryption_keys)
        self.conversations = ConversationsService(conversations, self.sealer) if conversations else None

    @property
    def runs(self) -> frozenset[str]:
        """The hosted tools this gateway runs (their services are configured)."""
        there = (("web_search", self.search), ("code_interpreter", self.sandbox),
                 ("file_search", self.knowledge))
        return frozenset(name for name, service in there if service is not None)

    async def heartbeat(self) -> None:
        """Run for the life of the process: mark this process's stored runs as alive, and
        cancel those whose cancel another replica recorded in the store (Redis was down)."""
        failing = False
        while True:
            await asyncio.sleep(self.registry.config.store.heartbeat_seconds)
            ids = [rid for rid, run in self.engine.runs.items() if run.persisted]
            try:
                cancels = await self.store.touch(ids)
            except Exception as exc:  # the next beat tries again (logged once per outage)
                if not failing:
                    log.warning("heartbeat: the store did not answer (%s)", type(exc).__name__)
                failing = True
                continue
            failing = False
            for rid in cancels:
                run = self.engine.find(rid)
                if run is not None:
                    log.info("response %s: cancelled as recorded in the store", rid)
                    run.cancel()

    async def _stored(self, response_id: str, who: Principal, param: str = "response_id") -> StoredResponse:
        """A stored response of ``who``'s tenant, on a model ``who`` may use; else 404. One
        stored as in flight whose process stopped heartbeating is ended as ``failed`` first."""
        stored = await self.store.get(response_id, who.tenant)
        if stored is None or not who.may_use(str(stored.resource.get("model"))):
            raise _not_found(response_id, param)
        if (stored.resource.get("status") in ("queued", "in_progress")
                and self.engine.find(response_id) is None
                and time.time() - stored.updated_at > self.registry.config.store.lost_after_seconds):
            stored = StoredResponse(lost(stored.resource), stored.input_items, time.time())
            await self.store.put(stored.resource, stored.input_items, who.tenant)
        return stored

    def _inflight(self, response_id: str, who: Principal) -> Run | None:
        run = self.engine.find(response_id)
        if (run is None or not isinstance(run.encoder, ResponsesEncoder)
                or run.owner.tenant != who.tenant or not who.may_use(run.model)):
            return None
        return run

    def _conversation_id(self, body: CreateResponseBody | CompactBody) -> str | None:
        """The ``conversation`` of the request (``"conv_..."`` or ``{"id": ...}``), if any."""
        ref = getattr(body, "conversation", None)  # CompactBody has none
        if ref is None:
            return None
        if body.previous_response_id:
            raise InvalidRequest("Mutually exclusive parameters: send either previous_response_id "
                                 "or conversation, not both.", param="conversation",
                                 code="mutually_exclusive_parameters")
        if self.conversations is None:
            raise InvalidRequest("This gateway has no conversation store.", param="conversation")
        return ref if isinstance(ref, str) else ref.id

    async def _previous(self, body: CreateResponseBody | CompactBody, who: Principal) -> list[Json]:
        conversation = self._conversation_id(body)
        if conversation is not None:
            assert self.conversations is not None
            return await self.conversations.context(conversation, who)
        if not body.previous_response_id:
            return []
        prev = await self._stored(body.previous_response_id, who, "previous_response_id")
        output: list[Json] = prev.resource["output"]
        return prev.input_items + output

    async def _context(self, body: CreateResponseBody | CompactBody, who: Principal) -> Resolved:
        """Previous context + the request's input, resolved (:mod:`.resolve`): reasoning and
        compaction items opened, files read (in a thread: PDF text is CPU work)."""
        previous = await self._previous(body, who)
        many = isinstance(body.input, list) and len(body.input) > BIG  # dumping them is CPU work

        def inputs() -> tuple[list[Json], bool, bool]:  # (scanning 100,000 items: ~40 ms)
            items = new_input_items(body)
            return items, has_files(items), has_file_ids(items)

        new, files, file_ids = await asyncio.to_thread(inputs) if many else inputs()
        if file_ids:  # file_id parts: the stored bytes
            new = await inline_file_ids(new, self.files, who.tenant)
        if files:
            resolved = await file_jobs.run(lambda: resolve(previous, new, self.sealer, who.tenant))
        elif len(previous) + len(new) > BIG:  # CPU (sealed items, compaction): off the event loop
            resolved = await asyncio.to_thread(resolve, previous, new, self.sealer, who.tenant)
        else:
            resolved = resolve(previous, new, self.sealer, who.tenant)
        if self._conversation_id(body) is None:
            return resolved
        return Resolved(resolved.items, [CONVERSATION if label == "previous_response_id" else label
                                         for label in resolved.labels])

    async def create(self, body: CreateResponseBody, who: Principal = ANONYMOUS,
                     dialect: EventDialect = OPEN_RESPONSES,
                     seen: Callable[[list[Json]], None] | None = None,
                     on_end: Callable[[int], None] | None = None, wire: bool = False) -> Run:
        """Start a response; ``seen`` gets the context it sees (previous context + the resolved
        input, as a stored response's ``input_items`` holds it); ``on_end`` gets its total
        tokens when its run has ended (a background run's hold on its key's limits); ``wire``:
        a streamed (not background) run's deltas leave pre-encoded (:mod:`.wire`: for SSE)."""
        if body.background and not body.store:
            raise InvalidRequest("background responses must be stored (store: true).", param="background")
        self.registry.route(body.model)  # an unknown model is a 404 before anything else
        resolved = await self._context(body, who)
        context = resolved.items

        def build() -> tuple[Conversation, HostedContext]:  # and what the hosted tools need of it
            return (build_conversation(body, context, labels=resolved.labels, runs=self.runs),
                    HostedContext.of(context))

        conv, earlier = await asyncio.to_thread(build) if len(context) > BIG else build()
        if seen is not None:
            seen(context)
        response_id = random_id("resp_")
        tenant = who.tenant
        conversation = self._conversation_id(body)
        seal = ((lambda text: seal_reasoning(self.sealer, tenant, text))
                if INCLUDE in (body.include or []) else None)

        request_tools = tools_of(body, self.runs)
        params = generation_params(body, self.runs)  # a bad tool_choice: refused before any server call
        settings = self.registry.config.tools
        hosted = await open_hosted(request_tools, settings, earlier, self.search, self.sandbox,
                                   self.knowledge, who.tenant)
        wire_tools = dict(request_tools.wire)
        if hosted is not None:
            wire_tools.update(hosted.wire)
            conv = replace(conv, tools=(*conv.tools, *hosted.toolbox.functions))
            if isinstance(body.tool_choice, SpecificHosted):
                params = replace(params, tool_choice=ToolChoice("required", hosted.forced(body.tool_choice)))
            params = replace(params, tool_choice=expand_hosted(params.tool_choice, hosted.forced))
        cite = hosted.citations() if hosted is not None else None
        sources = "web_search_call.action.sources" in (body.include or [])
        results = "file_search_call.results" in (body.include or [])

        def encoder(plan: Plan) -> ResponsesEncoder:
            resource = start_resource(body, response_id, plan, "queued" if body.background else "in_progress")
            if request_tools.not_run:  # the hosted-tool policy of app/api/responses/tools.py
                resource["ocm:tools_not_run"] = list(request_tools.not_run)
            if plan.dropped_messages:
                resource["ocm:truncation"] = {"dropped_messages": plan.dropped_messages}
            if conversation is not None:
                resource["conversation"] = {"id": conversation}
            summary = body.reasoning.summary if body.reasoning else None
            return ResponsesEncoder(resource, dialect, seal, wire_tools, summary,
                                    hosted.list_items if hosted is not None else (),
                                    cite, sources, hosted.container_id if hosted is not None else "",
                                    results, wire=wire and body.stream and not body.background)

        mode: Mode = "background" if body.background else "stream" if body.stream else "wait"
        hooks: RunHooks | None = StoreHooks(self.store, context, who.tenant) if body.store else None
        if conversation is not None and self.conversations is not None:  # its new items, then the output
            new = [item for item, label in zip(context, resolved.labels, strict=True)
                   if label != CONVERSATION]
            hooks = self.conversations.hooks(conversation, who, new, hooks)
        if on_end is not None:
            hooks = EndHooks(hooks, on_end)
        limits = LoopLimits(body.max_tool_calls, settings.max_rounds, settings.deadline_seconds,
                            settings.max_parallel)
        request = RunRequest(body.model, conv, params, truncate=body.truncation == "auto",
                             toolbox=hosted.toolbox if hosted is not None else None, limits=limits,
                             approved=hosted.approved if hosted is not None else ())
        try:
            return await self.engine.start(request, encoder, run_id=response_id, mode=mode, owner=who,
                                           hooks=hooks)
        finally:
            if len(context) > BIG:  # what the run does not keep: freed in pieces (app/core/shed.py)
                shed_later(context, conv.messages)

    async def count(self, body: InputTokensBody, who: Principal = ANONYMOUS) -> TokenCount:
        """The input tokens a create with these fields would send (:mod:`.count`)."""
        model = body.model or self.registry.config.default_model
        if not model:
            raise InvalidRequest("model is required (this gateway has no default_model).",
                                 param="model", code="missing_required_parameter")
        if not who.may_use(model):  # looks exactly like a missing model
            raise ModelNotFound(f"The model {model!r} does not exist.", param="model")
        self.registry.route(model)
        create = CreateResponseBody.model_construct(**{**dict(body), "model": model})
        resolved = await self._context(create, who)
        items = resolved.items  # as create: a long input is built off the event loop
        conv = (await asyncio.to_thread(build_conversation, create, items, labels=resolved.labels,
                                        runs=self.runs)
                if len(items) > BIG else build_conversation(create, items, labels=resolved.labels,
                                                            runs=self.runs))
        offered = tools_of(create, self.runs)  # the hosted tools' functions count too (not MCP's)
        hosted = (*(web.FUNCTIONS if offered.web_search else ()),
                  *(code.FUNCTIONS if offered.code_interpreter else ()),
                  *(file_search.FUNCTIONS if offered.file_search else ()))
        conv = replace(conv, tools=(*conv.tools, *hosted))
        try:
            return await self.engine.count(RunRequest(model, conv, generation_params(create, self.runs),
                                                      truncate=body.truncation == "auto"))
        finally:
            if len(items) > BIG:  # freed in pieces, not all at once on the event loop (app/core/shed.py)
                shed_later(items, conv.messages)

    async def compact(self, body: CompactBody, who: Principal = ANONYMOUS) -> Json:
        """A ``CompactResource`` for the context (:mod:`.compact`): nothing is stored."""
        self.registry.route(body.model)
        resolved = await self._context(body, who)
        create = CreateResponseBody.model_construct(model=body.model, instructions=body.instructions)

        def work() -> Json:  # CPU: validating and sealing every item
            build_conversation(create, resolved.items, labels=resolved.labels)  # the input must be valid
            return compact.resource(resolved.items, self.sealer, who.tenant)

        return await asyncio.to_thread(work) if len(resolved.items) > BIG else work()

    async def get(self, response_id: str, who: Principal = ANONYMOUS) -> Json:
        run = self._inflight(response_id, who)
        if run is not None and not run.ending:  # an end being stored is read once it is
            return snapshot(run)
        return (await self._stored(response_id, who)).resource

    async def page(self, who: Principal, *, limit: int, after: str | None, ascending: bool,
                   ) -> tuple[list[Json], bool]:
        """A page of ``who``'s stored responses on models ``who`` may use, and whether more
        follow; ``after`` must be one of them (else 404)."""
        out: list[Json] = []
        cursor = after
        while len(out) <= limit:
            batch = await self.store.page(who.tenant, limit=limit + 1, after=cursor, ascending=ascending)
            if batch is None:
                raise _not_found(str(after), "after")
            out += [r for r in batch if who.may_use(str(r.get("model")))]
            if len(batch) <= limit:
                break
            cursor = str(batch[-1]["id"])
        return out[:limit], len(out) > limit

    async def follow(self, response_id: str, who: Principal, after: int | None,
                     ) -> ReplayReader | RemoteReader:
        """A background response's events after sequence number ``after``: live while it runs
        in this process, from the store once it has ended (see :mod:`app.engine.replay`)."""
        run = self._inflight(response_id, who)
        if run is not None and run.replay is not None:
            return run.replay.reader(after, run.stop)
        stored = await self._stored(response_id, who)
        events = await self.store.get_events(response_id, who.tenant)
        if events is None:
            running = stored.resource.get("status") in ("queued", "in_progress")
            if run is None and stored.resource.get("background") and running and self.signals.shared:
                settle = StoredEnd(response_id, who.tenant, self.store,
                                   lambda: self._stored(response_id, who))
                return self.signals.follow(response_id, after, settle)
            if run is None and stored.resource.get("background") and running:
                raise InvalidRequest(f"Response {response_id!r} is running in another gateway "
                                     "process; its events can be streamed from there or after "
                                     "it ends.", param="stream", code="not_resumable_here")
            if stored.resource.get("background"):  # its process died before storing them
                raise InvalidRequest(f"The events of response {response_id!r} were lost with the "
                                     "gateway process that ran it.", param="stream",
                                     code="events_lost")
            raise InvalidRequest(f"Response {response_id!r} was not created with background: true; "
                                 "only background responses can be streamed again.", param="stream")
        return Replay.finished(events).reader(after)

    async def input_items(self, response_id: str, who: Principal = ANONYMOUS) -> list[Json]:
        return (await self._stored(response_id, who)).input_items

    async def delete(self, response_id: str, who: Principal = ANONYMOUS) -> None:
        """Delete a stored response; one still running is cancelled first and deleted once its
        end is stored (else the end, stored later, would bring it back)."""
        stored = await self._stored(response_id, who)  # the model allow-list applies to deletes too
        run = self._inflight(response_id, who)
        if run is not None:
            run.cancel()
            await run.finished(within=15)
        elif stored.resource["status"] in ("queued", "in_progress"):  # another process's (as cancel)
            await delete_elsewhere(self.signals if self.signals.shared else _THROUGH_THE_STORE,
                                   response_id, lambda: self._stored(response_id, who),
                                   lambda: self.store.request_cancel(response_id, who.tenant),
                                   self.registry.config.store.heartbeat_seconds)
        if not await self.store.delete(response_id, who.tenant):
            raise _not_found(response_id)

    async def cancel(self, response_id: str, who: Principal = ANONYMOUS) -> Json:
        run = self._inflight(response_id, who)
        if run is None:
            stored = await self._stored(response_id, who)
            if stored.resource["status"] in ("queued", "in_progress"):
                # Another process runs it: a replica (Redis, or Redis down: the owner's next
                # heartbeat reads the recorded cancel), or without Redis another worker of
                # --workers N on this SQLite file, reached through the store the same way.
                beat = self.registry.config.store.heartbeat_seconds
                return await cancel_elsewhere(
                    self.signals if self.signals.shared else _THROUGH_THE_STORE, response_id,
                    lambda: self._stored(response_id, who),
                    lambda: self.store.request_cancel(response_id, who.tenant),
                    record_wait=min(beat + 1.0, 10.0))
            raise InvalidRequest(f"Response {response_id!r} is not in progress (status "
                                 f"{stored.resource['status']!r}); only in-flight responses can be "
                                 "cancelled.", param="response_id")
        run.cancel()
        await run.finished(within=10)
        return snapshot(run)
