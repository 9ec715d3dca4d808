"""Ollama adapter: native ``POST /api/chat`` (messages in, NDJSON stream out).

Protocol (https://github.com/ollama/ollama/blob/main/docs/api.md#generate-a-chat-completion,
https://docs.ollama.com/capabilities/thinking, fixtures in ``tests/fixtures/ollama``):
every line of the ``application/x-ndjson`` body is one JSON object whose ``message``
carries ``thinking`` (reasoning), ``content`` (answer) and whole ``tool_calls``
(``function.name`` plus ``function.arguments`` as a JSON *object*; newer servers add
``id`` and ``function.index``).  The last line has ``done: true``, ``done_reason``
(``stop`` / ``length``) and the token counts ``prompt_eval_count`` / ``eval_count``.
Failures are an HTTP status with ``{"error": "..."}``, or an ``{"error": "..."}`` line
in the middle of a 200 stream.

Requests carry ``think`` (the reasoning effort as Ollama's level string; models
without levels fall back to their default), ``format`` (a JSON schema) and
``options`` (``num_predict``, sampling, ``seed``, ``stop``).  Images go in a message's
``images`` as base64 only.  Raw mode (``/api/generate`` with ``raw: true``) is
deliberately not used: it re-tokenizes text, so it cannot carry Harmony safely.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import orjson

from adapters.base import Capabilities
from adapters.chat_messages import (
    body_error,
    conversation,
    data_url_base64,
    json_object_arguments,
    offered_tools,
    stop_strings,
    stream_error,
    tool_names_by_call_id,
)
from adapters.routing import RetryPolicy
from adapters.transport import Framing, HttpBackend, any_healthy
from app.core.conversation import Conversation, GenerationParams, ImagePart, Message
from app.core.errors import GatewayError, InvalidRequest, UpstreamError
from app.core.output import Chunk, Finish, StopKind, ToolCallChunk, Usage
from app.core.prompt import Prompt

_DONE_REASONS: dict[str, StopKind] = {"stop": "eos", "length": "length"}


def _message(msg: Message, index: int, names: dict[str, str]) -> dict[str, Any]:
    role = "system" if msg.role == "developer" else msg.role
    out: dict[str, Any] = {"role": role, "content": msg.text}
    images: list[str] = []
    for part in msg.content:
        if isinstance(part, ImagePart):
            data = data_url_base64(part.url)
            if data is None:
                raise InvalidRequest(
                    "The ollama backend takes images only as base64 data URLs "
                    f"(data:image/...;base64,...); message {index} has {part.url[:60]!r}.",
                    param="image_url")
            images.append(data)
    if images:
        out["images"] = images
    if msg.role == "assistant":
        if msg.reasoning:
            out["thinking"] = msg.reasoning  # Ollama's templates decide what to keep
        if msg.tool_calls:
            out["tool_calls"] = [
                {"id": call.id, "function": {
                    "index": i, "name": call.name,
                    "arguments": json_object_arguments(call.arguments, f"{call.id!r}")}}
                for i, call in enumerate(msg.tool_calls)]
    if msg.role == "tool" and msg.tool_call_id is not None:
        out["tool_call_id"] = msg.tool_call_id
        name = names.get(msg.tool_call_id) or msg.name
        if name:
            out["tool_name"] = name
    return out


def request_body(model: str, conv: Conversation, prompt: Prompt,
                 params: GenerationParams) -> dict[str, Any]:
    """The ``/api/chat`` body for a conversation (pure; unit-tested)."""
    if params.tool_choice.mode == "required":
        raise InvalidRequest("The ollama backend cannot force a tool call; tool_choice "
                             "'required' (or a named function) needs another backend.",
                             param="tool_choice")
    names = tool_names_by_call_id(conv)
    body: dict[str, Any] = {
        "model": model,
        "messages": [_message(m, i, names) for i, m in enumerate(conv.messages)],
        "stream": True,
    }
    tools = offered_tools(conv, params)
    if tools:
        body["tools"] = [{"type": "function", "function": {
            k: v for k, v in (("name", t.name), ("description", t.description),
                              ("parameters", t.parameters)) if v is not None}} for t in tools]
    if params.reasoning_effort is not None:
        body["think"] = params.reasoning_effort
    if conv.response_format is not None:
        body["format"] = conv.response_format.schema
    options: dict[str, Any] = {}
    if params.max_tokens is not None:
        options["num_predict"] = params.max_tokens
    for name in ("temperature", "top_p", "seed", "frequency_penalty", "presence_penalty"):
        value = getattr(params, name)
        if value is not None:
            options[name] = value
    stops = stop_strings(prompt, params)
    if stops:
        options["stop"] = stops
    if options:
        body["options"] = options
    return body


class OllamaStream:
    """Maps the NDJSON lines of one ``/api/chat`` stream to chunks.

    Ollama sends every tool call whole, once; older servers leave out
    ``function.index`` (Go's zero value would make every call index 0), so calls are
    numbered here in the order they arrive.
    """

    def __init__(self) -> None:
        self._calls = 0

    def is_last(self, event: dict[str, Any]) -> bool:
        return bool(event.get("done"))

    def chunk(self, event: dict[str, Any]) -> Chunk:
        if "error" in event:
            raise stream_error(event["error"], "Ollama")
        message = event.get("message") or {}
        calls: list[ToolCallChunk] = []
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            arguments = function.get("arguments")
            text = arguments if isinstance(arguments, str) else orjson.dumps(
                arguments if arguments is not None else {}).decode()
            calls.append(ToolCallChunk(self._calls, call.get("id") or None,
                                       str(function.get("name") or ""), text))
            self._calls += 1
        finish: Finish | None = None
        usage: Usage | None = None
        if event.get("done"):
            reason = str(event.get("done_reason") or "stop")
            if reason in ("load", "unload"):
                raise UpstreamError(f"Ollama ended the request without generating ({reason}).")
            finish = Finish("tool_calls" if self._calls else _DONE_REASONS.get(reason, "eos"))
            usage = Usage(prompt_tokens=int(event.get("prompt_eval_count") or 0),
                          completion_tokens=int(event.get("eval_count") or 0))
        return Chunk(text=str(message.get("content") or ""),
                     reasoning=str(message.get("thinking") or ""),
                     tool_calls=tuple(calls), finish=finish, usage=usage)


class OllamaDialect:
    """Ollama's native ``/api/chat`` (see the module docstring)."""

    kind = "ollama"
    label = "Ollama"
    framing: Framing = "ndjson"
    capabilities = Capabilities(prompt=False, chat=True, token_ids=False, logprobs=False,
                                max_top_logprobs=0, n=False, seed=True, json_schema=True,
                                images=True)

    def __init__(self, model: str) -> None:
        self._model = model

    def url(self, base: str) -> str:
        return f"{base}/api/chat"

    def headers(self) -> Mapping[str, str]:
        return {}

    def reader(self) -> OllamaStream:
        return OllamaStream()

    def error(self, status: int, body: bytes, headers: httpx.Headers) -> GatewayError:
        return body_error(status, body, headers, "ollama")

    async def ready(self, client: httpx.AsyncClient, bases: Sequence[str]) -> bool:
        return await any_healthy(client, [f"{b}/api/version" for b in bases])

    async def context_window(self, client: httpx.AsyncClient, bases: Sequence[str]) -> int | None:
        return None  # the model's num_ctx is Ollama's business: it truncates itself

    def request_body(self, prompt: Prompt, params: GenerationParams) -> dict[str, Any]:
        return request_body(self._model, conversation(prompt, self.kind), prompt, params)


class OllamaBackend(HttpBackend):
    kind = OllamaDialect.kind
    capabilities = OllamaDialect.capabilities

    def __init__(self, client: httpx.AsyncClient, base_urls: Sequence[str], model: str,
                 policy: RetryPolicy | None = None) -> None:
        super().__init__(client, base_urls, OllamaDialect(model), policy)
