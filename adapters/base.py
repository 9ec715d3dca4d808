"""The adapter seam: what every backend provides, and how HTTP failures map to errors.

The transport every backend shares is :mod:`adapters.transport`."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import anyio
import httpx
import orjson

from app.core.conversation import GenerationParams
from app.core.errors import (
    ContextLengthExceeded,
    GatewayError,
    InvalidRequest,
    UpstreamError,
    UpstreamRateLimited,
    UpstreamTimeout,
)
from app.core.output import Chunk
from app.core.prompt import Prompt


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend can do; the pipeline rejects requests that need more (400)."""

    prompt: bool = True  # takes a rendered prompt (token ids or text)
    chat: bool = False  # takes a Conversation (chat-mode upstream)
    tokenize: bool = False  # implements Tokenizer: Prompt.segments → token ids
    token_ids: bool = False
    logprobs: bool = False
    max_top_logprobs: int = 0
    n: bool = False
    seed: bool = False
    json_schema: bool = False
    images: bool = False
    ignore_eos: bool = False
    logit_bias: bool = False


class Backend(Protocol):
    """A backend turns a rendered prompt into a stream of chunks."""

    kind: str
    capabilities: Capabilities

    def stream(self, prompt: Prompt, params: GenerationParams) -> AsyncIterator[Chunk]: ...

    async def ready(self) -> bool:
        """True when at least one replica answers its health check (and serves the model)."""
        ...


@runtime_checkable
class WindowDiscovery(Protocol):
    """A backend that can say how many tokens (prompt + generation) one request may use."""

    async def context_window(self) -> int | None:
        """The backend's real context per request, or None when it cannot be read now."""
        ...


class WindowCache:
    """Remembers a discovered context window; retries a failed discovery at most every
    ``retry`` seconds, so a backend that is down is not asked on every request."""

    def __init__(self, fetch: Callable[[], Awaitable[int | None]], retry: float = 30.0) -> None:
        self._fetch = fetch
        self._retry = retry
        self._value: int | None = None
        self._next_try = 0.0
        self._lock = anyio.Lock()

    async def get(self) -> int | None:
        if self._value is not None or time.monotonic() < self._next_try:
            return self._value
        async with self._lock:  # concurrent first requests share one discovery
            if self._value is not None or time.monotonic() < self._next_try:
                return self._value
            try:
                self._value = await self._fetch()
            except (httpx.HTTPError, ValueError, KeyError, TypeError):
                self._value = None
            if self._value is None:
                self._next_try = time.monotonic() + self._retry
        return self._value


async def get_json(client: httpx.AsyncClient, url: str, headers: Mapping[str, str] | None = None,
                   ) -> Any:
    """``GET url`` as JSON within 2 s in all (a body that never ends counts as a failure);
    None on any failure: discovery is best effort."""
    with anyio.move_on_after(2.0):
        try:
            response = await client.get(url, headers=headers, timeout=2.0)
            return orjson.loads(response.content) if response.status_code == 200 else None
        except (httpx.HTTPError, orjson.JSONDecodeError):
            return None
    return None


@runtime_checkable
class Tokenizer(Protocol):
    """A backend that can tokenize (``capabilities.tokenize``)."""

    async def tokenize(self, segments: Sequence[tuple[str, bool]]) -> list[int]:
        """Token ids for (text, trusted) segments: control tokens may come only from
        trusted segments; untrusted text must never yield one."""
        ...


def transport_error(exc: httpx.HTTPError, base_url: str) -> GatewayError:
    """Map an httpx exception (connect / timeout / protocol) to a typed gateway error."""
    if isinstance(exc, httpx.TimeoutException):
        return UpstreamTimeout(f"The backend at {base_url} timed out ({type(exc).__name__}).")
    if isinstance(exc, httpx.ConnectError):
        return UpstreamError(f"Could not connect to the backend at {base_url}.",
                             code="upstream_unavailable")
    detail = f" ({exc})" if str(exc) else ""
    return UpstreamError(f"Connection to the backend at {base_url} failed: {type(exc).__name__}{detail}.")


def status_error(status: int, body: bytes, headers: httpx.Headers) -> GatewayError:
    """Map a non-2xx backend response to a typed gateway error."""
    message = body.decode("utf-8", "replace")[:500]
    err_type = ""
    try:
        parsed = orjson.loads(body)
        if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
            message = str(parsed["error"].get("message", message))
            err_type = str(parsed["error"].get("type", ""))
    except orjson.JSONDecodeError:
        pass
    # llama.cpp answers an embedding input longer than its batch with a 500 "input (N tokens)
    # is too large to process": the input is too long, not the server failing
    lowered = message.lower()
    if (err_type == "exceed_context_size_error" or "context length" in lowered
            or "too large to process" in lowered):
        return ContextLengthExceeded(f"The prompt does not fit the model's context: {message}",
                                     param="messages")
    if status == 429:
        retry = headers.get("retry-after")
        try:
            retry_after = float(retry) if retry is not None else None
        except ValueError:
            retry_after = None
        return UpstreamRateLimited(f"The backend is rate limiting: {message}", retry_after=retry_after)
    if status == 404:  # the backend does not know the model / route: a gateway config problem
        return UpstreamError(f"The backend answered 404: {message}", code="upstream_not_found")
    if 400 <= status < 500:
        return InvalidRequest(f"The backend rejected the request: {message}",
                              code="upstream_rejected")
    return UpstreamError(f"The backend failed with HTTP {status}: {message}")


ErrorMapper = Callable[[int, bytes, httpx.Headers], GatewayError]


MAX_TOKEN_ID = 2**31  # no vocabulary comes near; anything at or above is not a token id


def token_ids(value: Any, backend: str) -> tuple[int, ...]:
    """A stream event's token ids, checked: a list of non-negative integers (not bools,
    floats, strings or nulls). Anything else is a protocol error of the backend."""
    if value is None:
        return ()
    if type(value) is list and len(value) == 1:  # one token an event, the usual stream
        only = value[0]
        if type(only) is int and 0 <= only < MAX_TOKEN_ID:
            return (only,)
    if not isinstance(value, list) or not all(
            type(t) is int and 0 <= t < MAX_TOKEN_ID for t in value):
        raise UpstreamError(f"{backend} sent invalid token ids: {str(value)[:80]}",
                            code="invalid_upstream_tokens")
    return tuple(value)
