"""Shared plumbing for the chat-mode adapters (Ollama ``/api/chat``, OpenAI-compatible).

Both take a :class:`app.core.conversation.Conversation` instead of a rendered prompt.  What they
have in common lives here: which tools are offered for a ``tool_choice``, the stop
strings to hand upstream, data-URL images, tool-call lookups, and the error mapping
for an upstream that reports ``{"error": ...}`` in a shape :func:`status_error` does
not read by itself (a bare string, or an object in the middle of a stream).
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import orjson

from adapters.base import status_error
from app.core.conversation import Conversation, FunctionTool, GenerationParams
from app.core.errors import GatewayError, InvalidRequest, UpstreamError
from app.core.prompt import Prompt

_DATA_URL = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[^;,]*)*);base64,(?P<data>.*)$",
                       re.DOTALL)


def conversation(prompt: Prompt, backend: str) -> Conversation:
    """The conversation a chat-mode backend sends; a prompt without one is a config error."""
    if prompt.conversation is None:
        raise InvalidRequest(f"The {backend} backend takes messages, not a rendered prompt: "
                             "configure the model with prompt_format 'chat'.")
    return prompt.conversation


def offered_tools(conv: Conversation, params: GenerationParams) -> tuple[FunctionTool, ...]:
    """The tools to send upstream: none for ``tool_choice: none``, otherwise all of them.

    ``allowed`` narrows what may be *called*; the pipeline's tool guard enforces it, and
    keeping every definition in the request keeps the upstream prompt cacheable.
    """
    return () if params.tool_choice.mode == "none" else conv.tools


def stop_strings(prompt: Prompt, params: GenerationParams) -> list[str]:
    """The renderer's stop strings and the client's, deduplicated, in order."""
    return list(dict.fromkeys((*prompt.stop_strings, *params.stop)))


def data_url_base64(url: str) -> str | None:
    """The base64 payload of a ``data:...;base64,`` URL, or ``None`` for any other URL."""
    match = _DATA_URL.match(url)
    return match.group("data") if match else None


def tool_names_by_call_id(conv: Conversation) -> dict[str, str]:
    """Call id → function name for every tool call in the history."""
    return {call.id: call.name for m in conv.messages for call in m.tool_calls}


def json_object_arguments(arguments: str, where: str) -> dict[str, Any]:
    """A history tool call's JSON-text arguments as an object (Ollama wants objects)."""
    try:
        value = orjson.loads(arguments) if arguments.strip() else {}
    except orjson.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        raise InvalidRequest(f"The arguments of tool call {where} must be a JSON object for this "
                             "backend.", param="messages")
    return value


def error_message(error: Any) -> str:
    """The human-readable text of an upstream ``error`` value (string or object)."""
    if isinstance(error, dict):
        return str(error.get("message") or error.get("error") or orjson.dumps(error).decode())
    return str(error)


def upstream_error(status: int, error: Any, headers: httpx.Headers | None = None,
                   backend: str = "backend") -> GatewayError:
    """Map an upstream ``{"error": ...}`` (any shape) with ``status`` to a typed error.

    Delegates to :func:`adapters.base.status_error` for the classification (context
    length, 429, 404, other 4xx, 5xx); credentials the *gateway* sent that the upstream
    refused (401 / 403) are the gateway's misconfiguration, not the client's: 502.
    """
    message = error_message(error)
    if status in (401, 403):
        return UpstreamError(f"The {backend} backend refused the gateway's credentials "
                             f"(HTTP {status}): {message}", code="upstream_auth_failed")
    err_type = error.get("type", "") if isinstance(error, dict) else ""
    body = orjson.dumps({"error": {"message": message, "type": err_type}})
    return status_error(status, body, headers or httpx.Headers())


def body_error(status: int, body: bytes, headers: httpx.Headers, backend: str) -> GatewayError:
    """A non-2xx response body (JSON ``{"error": ...}`` or anything else) → typed error."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict) and "error" in parsed:
        return upstream_error(status, parsed["error"], headers, backend)
    return upstream_error(status, body.decode("utf-8", "replace")[:500], headers, backend)


def stream_error(error: Any, backend: str) -> GatewayError:
    """An ``{"error": ...}`` event in the middle of a 200 stream → typed error.

    An integer ``code`` (vLLM, llama.cpp) is taken as the HTTP status it stands for;
    without one the failure is the backend's (502).
    """
    code = error.get("code") if isinstance(error, dict) else None
    status = code if isinstance(code, int) and 400 <= code < 600 else 500
    exc = upstream_error(status, error, None, backend)
    if isinstance(exc, UpstreamError) and exc.code == "upstream_error":
        return UpstreamError(f"{backend} reported an error mid-stream: {error_message(error)}")
    return exc
