"""Open Responses create body → Conversation + GenerationParams (the items themselves:
:mod:`app.items.messages`)."""

from __future__ import annotations

import weakref
from typing import Any

from app.api.responses.tools import RequestTools, request_tools, tool_choice
from app.core.conversation import (
    Conversation,
    GenerationParams,
    Message,
    ResponseFormat,
    TextPart,
)
from app.items.messages import items_to_messages
from app.items.validate import (
    check_function_name,
    check_json_schema,
    reasoning_effort,
    thinking,
)
from schemas import responses as wire


def _response_format(body: wire.CreateResponseBody) -> ResponseFormat | None:
    fmt = body.text.format if body.text else None
    if fmt is None or isinstance(fmt, wire.TextFormatText):
        return None
    if isinstance(fmt, wire.TextFormatJSONObject):
        return ResponseFormat("json_object", {"type": "object"})
    check_function_name(fmt.name, "text.format.name")
    if fmt.schema_ is not None:
        check_json_schema(fmt.schema_, "text.format.schema")
    return ResponseFormat(fmt.name, fmt.schema_, fmt.description, fmt.strict)


_TOOLS: dict[int, tuple[weakref.ref[Any], frozenset[str], RequestTools]] = {}


def tools_of(body: wire.CreateResponseBody, runs: frozenset[str] = frozenset()) -> RequestTools:
    """The request's tools (:mod:`app.api.responses.tools`); ``runs``: the hosted tools run here.
    Converted once per body (the conversation, the parameters and the resource each ask, and
    every conversion checks each schema: a 10,000-node schema was walked 3 times, ~100 ms
    each, on the event loop); the entry goes when the body does."""
    key = id(body)
    hit = _TOOLS.get(key)
    if hit is not None and hit[0]() is body and hit[1] == runs:
        return hit[2]
    tools = request_tools(body.tools, runs)
    _TOOLS[key] = (weakref.ref(body, lambda _ref: _TOOLS.pop(key, None)), runs, tools)
    return tools


def echo_of(body: wire.CreateResponseBody) -> tuple[dict[str, Any], ...]:
    """The request's tools as the resource shows them (the same whatever the gateway runs)."""
    hit = _TOOLS.get(id(body))
    if hit is not None and hit[0]() is body:
        return hit[2].echo
    return tools_of(body).echo


def build_conversation(body: wire.CreateResponseBody, context: list[dict[str, Any]],
                       first_input: int = 0, labels: list[str] | None = None,
                       runs: frozenset[str] = frozenset()) -> Conversation:
    """``context`` is previous input + previous output + new input (from ``first_input`` on),
    in wire form; ``labels`` name each item's origin instead of ``first_input``; ``runs`` as
    for :func:`tools_of` (the same as :func:`generation_params` is given: one conversion)."""
    messages = items_to_messages(context, first_input, labels)
    if body.instructions:
        messages = (Message("developer", (TextPart(body.instructions),), source="instructions"), *messages)
    return Conversation(messages, tools_of(body, runs).tools, _response_format(body))


def _conversation_key(body: wire.CreateResponseBody) -> str | None:
    ref = body.conversation
    if ref is None:
        return None
    return ref if isinstance(ref, str) else getattr(ref, "id", None)


def generation_params(body: wire.CreateResponseBody, runs: frozenset[str] = frozenset()) -> GenerationParams:
    tools = tools_of(body, runs)
    top = body.top_logprobs or 0
    return GenerationParams(
        max_tokens=body.max_output_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        frequency_penalty=body.frequency_penalty,
        presence_penalty=body.presence_penalty,
        logprobs=top > 0 or "message.output_text.logprobs" in (body.include or []),
        top_logprobs=top,
        reasoning_effort=reasoning_effort(body.reasoning.effort if body.reasoning else None),
        thinking=thinking(body.reasoning.effort if body.reasoning else None),
        tool_choice=tool_choice(body.tool_choice, tools),
        parallel_tool_calls=body.parallel_tool_calls if body.parallel_tool_calls is not None else True,
        user=body.safety_identifier or body.user,
        affinity=body.prompt_cache_key or _conversation_key(body),
    )
