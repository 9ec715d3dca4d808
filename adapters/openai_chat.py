"""OpenAI-compatible upstream adapter: ``POST {base}/v1/chat/completions``, streamed.

Works with anything that speaks Chat Completions: vLLM, llama.cpp ``llama-server``,
Ollama's ``/v1``, hosted providers (``api_key`` → ``Authorization: Bearer``).  A base
URL without a path gets ``/v1`` appended; one with a path (``https://api.openai.com/v1``,
``https://host/openai/v1beta``) is used as the API root as it is, like the OpenAI SDK.

We always stream with ``stream_options.include_usage``.  Each SSE chunk's
``choices[0].delta`` carries ``content`` (answer), ``reasoning_content`` or
``reasoning`` (chain of thought; servers differ in the name, some send both) and
``tool_calls`` fragments (``index``; ``id`` and ``function.name`` on the first
fragment, then ``function.arguments`` pieces); ``finish_reason`` ends the choice and a
last chunk with ``choices: []`` carries ``usage`` (see ``tests/fixtures/wire/*/07*``).
A ``refusal`` delta (the model declined) is answer text, and its finish, like
``finish_reason: "content_filter"``, is a refused one (:class:`Finish` ``refused``).
llama.cpp adds ``timings`` to its last chunk, used for usage when no ``usage`` comes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import httpx

from adapters.base import Capabilities
from adapters.chat_messages import (
    body_error,
    conversation,
    offered_tools,
    stop_strings,
    stream_error,
)
from adapters.routing import RetryPolicy
from adapters.transport import Framing, HttpBackend, any_healthy, usage_only
from app.core.conversation import Conversation, GenerationParams, ImagePart, Message, TextPart
from app.core.errors import GatewayError
from app.core.output import Chunk, Finish, TokenLogprob, ToolCallChunk, TopLogprob, Usage
from app.core.prompt import Prompt


def api_root(base: str) -> str:
    """``http://host:8000`` → ``http://host:8000/v1``; a URL with a path is kept."""
    base = base.rstrip("/")
    return base if urlsplit(base).path not in ("", "/") else f"{base}/v1"


def _content(msg: Message) -> str | list[dict[str, Any]]:
    if not any(isinstance(p, ImagePart) for p in msg.content):
        return msg.text
    parts: list[dict[str, Any]] = []
    for part in msg.content:
        if isinstance(part, TextPart):
            parts.append({"type": "text", "text": part.text})
        else:
            image: dict[str, Any] = {"url": part.url}
            if part.detail is not None:
                image["detail"] = part.detail
            parts.append({"type": "image_url", "image_url": image})
    return parts


def _message(msg: Message) -> dict[str, Any]:
    # ``developer`` is sent as ``system``: every compatible server knows that role (chat
    # templates of local servers often reject others) and OpenAI treats them alike.
    role = "system" if msg.role == "developer" else msg.role
    out: dict[str, Any] = {"role": role}
    if msg.role == "assistant":
        out["content"] = (msg.text or None) if msg.tool_calls else msg.text
        if msg.tool_calls:  # reasoning is not echoed back
            out["tool_calls"] = [{"id": c.id, "type": "function",
                                  "function": {"name": c.name, "arguments": c.arguments}}
                                 for c in msg.tool_calls]
    else:
        out["content"] = _content(msg)
    if msg.role == "tool":
        out["tool_call_id"] = msg.tool_call_id
    elif msg.name is not None:
        out["name"] = msg.name
    return out


def _tool_choice(params: GenerationParams) -> str | dict[str, Any]:
    choice = params.tool_choice
    if choice.mode == "required" and choice.allowed is not None and len(choice.allowed) == 1:
        return {"type": "function", "function": {"name": choice.allowed[0]}}
    return choice.mode


def request_body(model: str, conv: Conversation, prompt: Prompt,
                 params: GenerationParams) -> dict[str, Any]:
    """The ``/chat/completions`` body for a conversation (pure; unit-tested)."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [_message(m) for m in conv.messages],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    tools = offered_tools(conv, params)
    if tools:
        body["tools"] = [{"type": "function", "function": {
            k: v for k, v in (("name", t.name), ("description", t.description),
                              ("parameters", t.parameters), ("strict", t.strict))
            if v is not None}} for t in tools]
        body["tool_choice"] = _tool_choice(params)
        if not params.parallel_tool_calls:
            body["parallel_tool_calls"] = False
    fmt = conv.response_format
    if fmt is not None:
        schema: dict[str, Any] = {"name": fmt.name, "schema": fmt.schema}
        if fmt.description is not None:
            schema["description"] = fmt.description
        if fmt.strict is not None:
            schema["strict"] = fmt.strict
        body["response_format"] = {"type": "json_schema", "json_schema": schema}
    for name in ("max_tokens", "temperature", "top_p", "seed", "frequency_penalty",
                 "presence_penalty", "reasoning_effort", "user"):
        value = getattr(params, name)
        if value is not None:
            body[name] = value
    if params.logit_bias:
        body["logit_bias"] = {str(token): bias for token, bias in params.logit_bias}
    if params.template_kwargs:  # vLLM / SGLang read these; the client asked for them
        body["chat_template_kwargs"] = dict(params.template_kwargs)
    stops = stop_strings(prompt, params)
    if stops:
        body["stop"] = stops
    if params.logprobs:
        body["logprobs"] = True
        if params.top_logprobs:
            body["top_logprobs"] = params.top_logprobs
    return body


def _bytes(value: Any) -> tuple[int, ...] | None:
    return tuple(value) if isinstance(value, list) else None


def _logprobs(items: Sequence[dict[str, Any]]) -> tuple[TokenLogprob, ...]:
    return tuple(
        TokenLogprob(str(item.get("token", "")), float(item.get("logprob") or 0.0),
                     _bytes(item.get("bytes")), None,
                     tuple(TopLogprob(str(t.get("token", "")), float(t.get("logprob") or 0.0),
                                      _bytes(t.get("bytes")))
                           for t in item.get("top_logprobs") or ()))
        for item in items)


def _usage(event: dict[str, Any]) -> Usage | None:
    usage = event.get("usage")
    if isinstance(usage, dict):
        completion = usage.get("completion_tokens_details") or {}
        prompt = usage.get("prompt_tokens_details") or {}
        return Usage(prompt_tokens=int(usage.get("prompt_tokens") or 0),
                     completion_tokens=int(usage.get("completion_tokens") or 0),
                     reasoning_tokens=int(completion.get("reasoning_tokens") or 0),
                     cached_tokens=int(prompt.get("cached_tokens") or 0))
    timings = event.get("timings")  # llama.cpp, on its last chunk
    if isinstance(timings, dict) and "predicted_n" in timings:
        cached = int(timings.get("cache_n") or 0)
        return Usage(prompt_tokens=int(timings.get("prompt_n") or 0) + cached,
                     completion_tokens=int(timings.get("predicted_n") or 0), cached_tokens=cached)
    return None


def _finish(choice: dict[str, Any]) -> Finish | None:
    reason = choice.get("finish_reason")
    if not reason:
        return None
    if reason == "length":
        return Finish("length")
    if reason in ("tool_calls", "function_call"):
        return Finish("tool_calls")
    stop_reason = choice.get("stop_reason")  # vLLM: the stop string that matched
    if reason == "stop" and isinstance(stop_reason, str):
        return Finish("stop_string", stop_reason)
    # stop, and anything else a provider ends with; content_filter: the provider declined
    return Finish("eos", refused=reason == "content_filter")


class ChatStream:
    """Maps the SSE chunks of one stream to :class:`Chunk` objects.

    Some servers send whole tool calls without ``index``: such a fragment that names
    a function (or has an id) starts a new call, one without continues the last.
    """

    def __init__(self) -> None:
        self._next_index = 0
        self._last_index = 0
        self._refused = False  # a ``refusal`` delta came: the finish is a refusal

    def is_last(self, event: dict[str, Any]) -> bool:
        return usage_only(event)

    def _call(self, tc: dict[str, Any]) -> ToolCallChunk:
        function = tc.get("function") or {}
        index = tc.get("index")
        if not isinstance(index, int):
            index = self._next_index if (function.get("name") or tc.get("id")) else self._last_index
        self._next_index = max(self._next_index, index + 1)
        self._last_index = index
        return ToolCallChunk(index, tc.get("id") or None, function.get("name") or None,
                             str(function.get("arguments") or ""))

    def chunk(self, event: dict[str, Any]) -> Chunk:
        if "error" in event:
            raise stream_error(event["error"], "The OpenAI-compatible backend")
        usage = _usage(event)
        choices = event.get("choices") or []
        if not choices:
            return Chunk(usage=usage)
        choice = choices[0]
        delta = choice.get("delta") or {}
        reasoning = delta.get("reasoning_content") or delta.get("reasoning") or ""
        lp = choice.get("logprobs")
        content = lp.get("content") if isinstance(lp, dict) else None
        refusal = delta.get("refusal")  # the model declined: its text is the answer
        self._refused = self._refused or bool(refusal)
        finish = _finish(choice)
        if finish is not None and self._refused:
            finish = Finish(finish.kind, finish.stop_string, refused=True)
        calls = delta.get("tool_calls")  # a plain text delta makes no generator for none
        return Chunk(text=str(delta.get("content") or "") + str(refusal or ""), reasoning=str(reasoning),
                     tool_calls=tuple(self._call(tc) for tc in calls) if calls else (),
                     logprobs=_logprobs(content) if content else None,
                     finish=finish, usage=usage)


class OpenAIChatDialect:
    """Any OpenAI-compatible ``/chat/completions`` (see the module docstring)."""

    kind = "openai"
    label = "The OpenAI-compatible backend"
    framing: Framing = "sse"
    capabilities = Capabilities(prompt=False, chat=True, token_ids=False, logprobs=True,
                                max_top_logprobs=20, n=False, seed=True, json_schema=True,
                                images=True, logit_bias=True)

    def __init__(self, model: str, api_key: str | None = None) -> None:
        self._model = model
        self._headers = {"authorization": f"Bearer {api_key}"} if api_key else {}

    def url(self, base: str) -> str:
        return f"{api_root(base)}/chat/completions"

    def headers(self) -> Mapping[str, str]:
        return self._headers

    def reader(self) -> ChatStream:
        return ChatStream()

    def error(self, status: int, body: bytes, headers: httpx.Headers) -> GatewayError:
        return body_error(status, body, headers, "OpenAI-compatible")

    async def ready(self, client: httpx.AsyncClient, bases: Sequence[str]) -> bool:
        """A replica lists its models (``GET /models``: hosted APIs have no ``/health``)."""
        return await any_healthy(client, [f"{api_root(b)}/models" for b in bases], self._headers)

    async def context_window(self, client: httpx.AsyncClient, bases: Sequence[str]) -> int | None:
        return None  # not part of the API; the server enforces its own

    def request_body(self, prompt: Prompt, params: GenerationParams) -> dict[str, Any]:
        return request_body(self._model, conversation(prompt, self.kind), prompt, params)


class OpenAIChatBackend(HttpBackend):
    kind = OpenAIChatDialect.kind
    capabilities = OpenAIChatDialect.capabilities

    def __init__(self, client: httpx.AsyncClient, base_urls: Sequence[str], model: str,
                 policy: RetryPolicy | None = None, *, api_key: str | None = None) -> None:
        super().__init__(client, base_urls, OpenAIChatDialect(model, api_key), policy)
