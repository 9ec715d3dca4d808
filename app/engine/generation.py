"""One generation: a model's route, then prepare (render, tokens, budget) and open.

:func:`prepare` (capacity, capabilities, rendering, token counts, budget, truncation) and
:func:`open_stream` (admission, connecting, the first upstream chunk) do everything that
can fail with a clean HTTP error, so a run can answer 4xx/5xx before committing to a 200
stream.  The returned :class:`~app.engine.stream.EventStream` then yields events; a failure
after that point is its terminal ``Error`` event, never an exception.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from dataclasses import dataclass, field, replace
from typing import TypeGuard

import orjson

from adapters.base import Backend, Tokenizer, WindowDiscovery
from app import metrics
from app.core import tracing
from app.core.conversation import (
    Conversation,
    GenerationParams,
    ImagePart,
    ReasoningEffort,
    TextPart,
    part_param,
)
from app.core.errors import ContextLengthExceeded, GatewayError, InvalidRequest, UpstreamError
from app.core.output import Chunk
from app.core.prompt import Prompt
from app.core.shed import shed_later
from app.engine.admission import Admission
from app.engine.constrained import answer_chunks
from app.engine.stream import EventStream, invalid_output
from app.formats.catalog import HarmonyFormat, PromptFormat
from app.formats.harmony.render import min_prompt_tokens

log = logging.getLogger("ocm_gateway")
BIG_MESSAGES = 256  # a conversation with more messages is rendered in a worker thread,
BIG_TEXT = 32_768  # or with more characters of text (encoding 256 KB takes ~40 ms)


@dataclass(frozen=True, slots=True)
class ModelRoute:
    """What the pipeline needs to know about a served model."""

    name: str
    backend: Backend
    format: PromptFormat = field(default_factory=HarmonyFormat)
    context_window: int = 8192
    default_reasoning_effort: ReasoningEffort = "medium"
    admission: Admission | None = None  # shared by every model of the process


def check_capabilities(route: ModelRoute, params: GenerationParams,
                       conv: Conversation | None = None) -> None:
    """Refuse (400, naming the parameter) what the model's backend cannot do."""
    caps = route.backend.capabilities
    if conv is not None and not caps.images:
        for i, msg in enumerate(conv.messages):
            for j, part in enumerate(msg.content):
                if isinstance(part, ImagePart):
                    raise InvalidRequest(f"The {route.backend.kind} backend of model {route.name!r} "
                                         "does not accept images.", param=part_param(msg, i, j),
                                         code="unsupported_content_type")
    if params.logprobs and not caps.logprobs:
        raise InvalidRequest(f"logprobs are not supported by the {route.backend.kind} backend.",
                             param="logprobs")
    if params.top_logprobs > caps.max_top_logprobs:
        raise InvalidRequest(f"top_logprobs may be at most {caps.max_top_logprobs} for this "
                             "backend.", param="top_logprobs")
    if params.logit_bias and not caps.logit_bias:
        raise InvalidRequest(f"logit_bias is not supported by the {route.backend.kind} backend.",
                             param="logit_bias")
    if params.ignore_eos and not caps.ignore_eos:
        raise InvalidRequest(f"ignore_eos is not supported by the {route.backend.kind} backend.",
                             param="ignore_eos")
    if params.seed is not None and not caps.seed:
        raise InvalidRequest(f"seed is not supported by the {route.backend.kind} backend.",
                             param="seed")


def render(route: ModelRoute, conv: Conversation, params: GenerationParams) -> Prompt:
    prompt = route.format.render(conv, params)
    if prompt.conversation is not None and not route.backend.capabilities.chat:
        raise InvalidRequest(f"Model {route.name!r} uses prompt format {route.format.name!r}, which "
                             f"needs a chat-mode backend; {route.backend.kind} takes prompts.")
    if prompt.json_schema is not None and not route.backend.capabilities.json_schema:
        raise InvalidRequest(f"The {route.backend.kind} backend of model {route.name!r} cannot "
                             "constrain output to a JSON schema.", param="response_format")
    if prompt.conversation is None and not route.backend.capabilities.prompt:
        raise InvalidRequest(f"The {route.backend.kind} backend of model {route.name!r} takes "
                             "messages, not prompts: use prompt_format 'chat'.")
    return prompt


def prompt_tokens(prompt: Prompt) -> int | None:
    """The prompt's length in tokens, or ``None`` when only the backend can count it."""
    return len(prompt.token_ids) if prompt.token_ids is not None else None


def estimate_tokens(prompt: Prompt) -> int:
    """Exact when the prompt has token ids; otherwise a conservative text estimate."""
    exact = prompt_tokens(prompt)
    if exact is not None:
        return exact
    chars = len(prompt.text or "") + sum(len(t) for t, _ in prompt.segments)
    if prompt.conversation is not None:
        chars += sum(len(m.text) + sum(len(c.arguments) for c in m.tool_calls)
                     for m in prompt.conversation.messages)
    return chars // 3 + 1


async def tokenize(route: ModelRoute, prompt: Prompt) -> Prompt:
    """Segments become token ids when the backend has a tokenizer (exact budgets, and
    the ids rather than re-tokenizable text go upstream)."""
    backend = route.backend
    if prompt.token_ids is None and prompt.segments and isinstance(backend, Tokenizer):
        ids = await backend.tokenize(prompt.segments)
        return replace(prompt, token_ids=tuple(ids))
    return prompt


_warned: set[tuple[str, int]] = set()


def _discovers_window(backend: Backend) -> TypeGuard[WindowDiscovery]:
    """``isinstance(backend, WindowDiscovery)``, by its class where that says yes (a runtime
    protocol's ``isinstance`` walks the protocol's attributes: ~6-30 µs a request)."""
    return _class_discovers(type(backend)) or isinstance(backend, WindowDiscovery)


@functools.cache
def _class_discovers(kind: type) -> bool:
    return issubclass(kind, WindowDiscovery)


async def context_window(route: ModelRoute) -> int:
    """The configured window, or the backend's real one where it can tell and it is smaller
    (a llama.cpp slot of ``-c / -np`` tokens, vLLM's ``max_model_len``); a mismatch is
    logged once."""
    backend = route.backend
    found = await backend.context_window() if _discovers_window(backend) else None
    if found is None:
        return route.context_window
    if found != route.context_window and (route.name, found) not in _warned:
        _warned.add((route.name, found))
        log.warning("model %r: context_window is %d in the config, but its backend accepts %d "
                    "tokens per request; using %d", route.name, route.context_window, found,
                    min(found, route.context_window))
    return min(found, route.context_window)


def _budget(route: ModelRoute, prompt: Prompt, params: GenerationParams,
            window: int | None = None) -> GenerationParams:
    counted = prompt_tokens(prompt)
    if counted is None:
        return params  # the backend enforces its own context window
    window = route.context_window if window is None else window
    n_prompt = counted
    room = window - n_prompt
    if room <= 0:
        raise ContextLengthExceeded(
            f"The prompt is {n_prompt} tokens, which does not fit the context window of "
            f"{window} tokens for model {route.name!r}.", param="messages")
    if params.max_tokens is None or params.max_tokens > room:
        if params.max_tokens is not None and params.max_tokens > room:
            # Like OpenAI: max_tokens is a cap; asking beyond the window is an error.
            raise ContextLengthExceeded(
                f"The prompt ({n_prompt} tokens) plus max_tokens ({params.max_tokens}) exceeds "
                f"the context window of {window} tokens.", param="max_tokens")
        return replace(params, max_tokens=room)
    return params


@dataclass(frozen=True, slots=True)
class Prepared:
    """A generation ready to open: the conversation as it will be sent (after truncation),
    the prompt, and the parameters within the context budget."""

    conversation: Conversation
    params: GenerationParams
    prompt: Prompt
    dropped_messages: int = 0


def drop_oldest_turns(conv: Conversation, turns: int = 1) -> tuple[Conversation, int]:
    """The conversation without its ``turns`` oldest turns, and how many messages that was.

    A turn starts at a user message and runs to the next one, so a function call is never
    separated from its output; system / developer messages and the latest turn are kept
    (anything before the first user turn that is not an instruction goes with it)."""
    msgs = conv.messages
    body = [i for i, m in enumerate(msgs) if m.role not in ("system", "developer")]
    user_starts = [i for i in body if msgs[i].role == "user"]
    if len(user_starts) < turns + 1:
        raise ContextLengthExceeded(
            "The input does not fit the model's context window even after dropping all but the "
            "latest turn.", param="input")
    cut = {i for i in body if i < user_starts[turns]}
    return replace(conv, messages=tuple(m for i, m in enumerate(msgs) if i not in cut)), len(cut)


def droppable_turns(conv: Conversation) -> int:
    """How many turns :func:`drop_oldest_turns` can drop (all but the latest)."""
    return max(sum(1 for m in conv.messages if m.role == "user") - 1, 0)


def _text_size(conv: Conversation) -> int:
    """Characters of text in the conversation's messages and tools (descriptions, then the
    schemas' JSON, counted only while below :data:`BIG_TEXT`: at most :data:`BIG_TEXT` + one
    message's or schema's worth: it stops counting once past it)."""
    size = sum(len(t.description or "") for t in conv.tools)
    for message in conv.messages:
        size += sum(len(p.text) for p in message.content if isinstance(p, TextPart))
        size += len(message.reasoning or "") + sum(len(c.arguments) for c in message.tool_calls)
        if size > BIG_TEXT:
            return size
    for tool in conv.tools:  # a 10,000-property schema renders for ~0.3 s: not on the loop
        if tool.parameters:
            size += len(orjson.dumps(tool.parameters))  # ~1 µs a KB
            if size > BIG_TEXT:
                break
    return size


def is_big(conv: Conversation) -> bool:
    """Whether rendering ``conv`` is CPU work for a worker thread rather than the event loop."""
    return len(conv.messages) > BIG_MESSAGES or _text_size(conv) > BIG_TEXT


async def render_tokens(route: ModelRoute, conv: Conversation, params: GenerationParams,
                        big: bool | None = None) -> Prompt:
    """:func:`render` then :func:`tokenize`; a long history or long text is rendered off the
    event loop (the thread gives the GIL back between encoder calls of a few ms each, so
    other requests and ``/health`` keep being answered)."""
    if big if big is not None else is_big(conv):
        rendered = await asyncio.to_thread(render, route, conv, params)
    else:
        rendered = render(route, conv, params)
    return await tokenize(route, rendered)


def check_floor(route: ModelRoute, conv: Conversation, params: GenerationParams,
                window: int) -> None:
    """Refuse, before rendering, a conversation whose prompt cannot fit the window: a bound
    no rendering goes below (Harmony: every message's text, at most 128 characters a
    token), so a 14 MB message is a 400 without being encoded."""
    if not isinstance(route.format, HarmonyFormat):
        return
    floor = min_prompt_tokens(conv, tools=params.tool_choice.mode != "none")
    if floor >= window:
        raise ContextLengthExceeded(
            f"The prompt is at least {floor} tokens, which does not fit the context window of "
            f"{window} tokens for model {route.name!r}.", param="messages")
    if params.max_tokens is not None and floor + params.max_tokens > window:
        raise ContextLengthExceeded(
            f"The prompt (at least {floor} tokens) plus max_tokens ({params.max_tokens}) exceeds "
            f"the context window of {window} tokens.", param="max_tokens")


async def prepare(route: ModelRoute, conv: Conversation, params: GenerationParams, *,
                  truncate: bool = False) -> Prepared:
    """:func:`_prepare`, as a ``plan`` span when tracing is on."""
    if not tracing.enabled:
        return await _prepare(route, conv, params, truncate=truncate)
    with tracing.span("plan", {"gen_ai.request.model": route.name, "ocm.messages": len(conv.messages),
                               "ocm.truncate": truncate}) as span:
        prepared = await _prepare(route, conv, params, truncate=truncate)
        span.set_attribute("ocm.prompt_tokens", prompt_tokens(prepared.prompt) or -1)
        span.set_attribute("ocm.dropped_messages", prepared.dropped_messages)
        return prepared


async def _prepare(route: ModelRoute, conv: Conversation, params: GenerationParams, *,
                   truncate: bool = False) -> Prepared:
    """Everything before the backend is called: capacity, capabilities, render, tokens,
    budget.  With ``truncate`` the oldest turns are dropped until the prompt and the
    requested output fit the window (counted exactly where the prompt has token ids,
    estimated where only the backend can count)."""
    if route.admission is not None:
        route.admission.check()  # at capacity: refuse before rendering
    check_capabilities(route, params, conv)
    await route.format.prepare()
    window = await context_window(route)

    big = is_big(conv)

    async def attempt(candidate: Conversation, dropped: int) -> Prepared:
        if big:  # a sum over every message: off the event loop too
            await asyncio.to_thread(check_floor, route, candidate, params, window)
        else:
            check_floor(route, candidate, params, window)
        prompt = await render_tokens(route, candidate, params, big)
        if truncate and prompt_tokens(prompt) is None and (
                estimate_tokens(prompt) + (params.max_tokens or 0) >= window):
            raise ContextLengthExceeded("The input is estimated not to fit the context window.",
                                        param="input")
        try:
            return Prepared(candidate, _budget(route, prompt, params, window), prompt, dropped)
        except ContextLengthExceeded:
            if big and prompt.token_ids is not None:  # a refused long prompt's ids: freed off the loop
                shed_later(prompt.token_ids)
            raise

    try:
        return await attempt(conv, 0)
    except ContextLengthExceeded:
        if not truncate:
            raise
    # The fewest oldest turns to drop, by binary search: a prompt only shrinks as turns go, and
    # ~log2(turns) renders instead of one per turn (2,000 turns took 39 s one by one).
    low, high = 1, droppable_turns(conv)
    if high < 1:
        drop_oldest_turns(conv)  # raises: nothing left to drop
    best: Prepared | None = None
    while low <= high:
        middle = (low + high) // 2
        candidate, n = drop_oldest_turns(conv, middle)
        try:
            best = await attempt(candidate, n)
            high = middle - 1
        except ContextLengthExceeded:
            low = middle + 1
    if best is None:
        raise ContextLengthExceeded(
            "The input does not fit the model's context window even after dropping all but the "
            "latest turn.", param="input")
    return best


async def start(route: ModelRoute, conv: Conversation, params: GenerationParams) -> EventStream:
    """Prepare and open in one step (no truncation)."""
    return await open_stream(route, await prepare(route, conv, params))


async def open_stream(route: ModelRoute, prepared: Prepared) -> EventStream:
    """Take an admission slot, call the backend and wait for its first chunk; every failure
    up to here raises (a clean HTTP error), everything after is an event of the stream."""
    conv, params, prompt = prepared.conversation, prepared.params, prepared.prompt
    allowed = {t.name for t in conv.tools} if params.tool_choice.mode != "none" else set()
    if params.tool_choice.allowed is not None:
        allowed &= set(params.tool_choice.allowed)
    parser = route.format.parser(prompt, prompt_tokens(prompt) or 0)
    stats = metrics.current()
    if stats is not None:
        stats.model = route.name
    admission = route.admission
    if admission is not None:
        await admission.acquire()  # Overloaded (503) when the queue is full or too slow
    rf = conv.response_format
    try:
        chunks = answer_chunks(route.backend, route.format, prompt, params, rf.schema if rf else None)
    except BaseException:
        if admission is not None:
            admission.release()
        raise
    t0 = time.perf_counter()
    try:
        try:
            first: Chunk | None = await chunks.__anext__()
        except StopAsyncIteration:
            first = None
        except (GatewayError, asyncio.CancelledError):
            raise
        except Exception as exc:  # a decoder failure on the first event: a 502, not a 500
            raise UpstreamError(invalid_output(exc).message, code="invalid_model_output") from exc
    except BaseException as exc:
        if stats is not None and isinstance(exc, GatewayError) and exc.status >= 500:
            stats.metrics.backend_errors.labels(route.name, exc.code or "error").inc()
        try:
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                await aclose()
        finally:
            if admission is not None:
                admission.release()
        raise
    ttft = time.perf_counter() - t0
    if stats is not None:
        stats.metrics.ttft.labels(route.name).observe(ttft)
    strict = {t.name: t.parameters for t in conv.tools if t.strict}
    return EventStream(first, chunks, parser, params, frozenset(allowed), route.name, ttft,
                       release=admission.release if admission is not None else None,
                       strict_tools=strict, answer_schema=rf.schema if rf and rf.strict else None,
                       prompt_estimate=lambda: estimate_tokens(prompt))
