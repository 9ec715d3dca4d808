"""The one HTTP stream transport under every backend, and the dialect seam.

:class:`HttpBackend` owns everything that is the same for every server: the replica
pool and failover (:mod:`adapters.routing`), the POST (on the thin client of
:mod:`adapters.upstream`; the other calls on the httpx client) and its framing (SSE or NDJSON
decoders chosen from :data:`DECODERS`), error mapping hooks, draining a finished body so
its connection is reused, closing the upstream response the moment the consumer stops
(a client disconnect cancels the generation), readiness and context-window discovery
with a cache.  A :class:`Dialect` is what differs per server: the URL, the request body,
how one stream event becomes a :class:`~app.core.output.Chunk`, how an error body maps, and
how readiness and the window are discovered.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from contextlib import aclosing
from typing import Any, Literal, Protocol, cast

import httpx
import orjson

from adapters.base import Capabilities, ErrorMapper, WindowCache, status_error, transport_error
from adapters.ndjson import NDJSONDecoder
from adapters.routing import ReplicaPool, RetryPolicy, failover
from adapters.sse import SSEDecoder
from adapters.upstream import upstream_for
from app.core import tracing
from app.core.conversation import GenerationParams
from app.core.errors import GatewayError, UpstreamError
from app.core.output import Chunk
from app.core.prompt import Prompt

Framing = Literal["sse", "ndjson"]


class StreamDecoder(Protocol):
    def decode(self, chunk: bytes) -> list[str]: ...

    def flush(self) -> list[str]: ...


DECODERS: dict[Framing, Callable[[], StreamDecoder]] = {"sse": SSEDecoder, "ndjson": NDJSONDecoder}
_ACCEPT: dict[Framing, str] = {"sse": "text/event-stream", "ndjson": "application/x-ndjson"}


class EventReader(Protocol):
    """One stream's event → chunk mapping (it may keep state, e.g. tool-call numbering)."""

    def chunk(self, event: dict[str, Any]) -> Chunk: ...

    def is_last(self, event: dict[str, Any]) -> bool:
        """The server's final event: the rest of the body is drained before it is used."""
        ...


class Dialect(Protocol):
    """What one kind of server needs that the transport does not know."""

    kind: str  # config name: llamacpp, vllm, ollama, openai
    label: str  # for messages: "llama.cpp", "vLLM", ...
    capabilities: Capabilities
    framing: Framing

    def url(self, base: str) -> str: ...

    def headers(self) -> Mapping[str, str]: ...

    def request_body(self, prompt: Prompt, params: GenerationParams) -> dict[str, Any]: ...

    def reader(self) -> EventReader: ...

    def error(self, status: int, body: bytes, headers: httpx.Headers) -> GatewayError: ...

    async def ready(self, client: httpx.AsyncClient, bases: Sequence[str]) -> bool: ...

    async def context_window(self, client: httpx.AsyncClient, bases: Sequence[str]) -> int | None: ...


class HttpBackend:
    """A backend: the transport above with one server dialect (see the module docstring)."""

    def __init__(self, client: httpx.AsyncClient, base_urls: Sequence[str], dialect: Dialect,
                 policy: RetryPolicy | None = None) -> None:
        if not base_urls:
            raise ValueError(f"the {dialect.label} backend needs at least one base URL")
        self._client = client
        self.dialect = dialect
        self.kind = dialect.kind
        self.capabilities = dialect.capabilities
        self.base_urls = [u.rstrip("/") for u in base_urls]
        self.pool = ReplicaPool(self.base_urls, policy or RetryPolicy())
        self._window = WindowCache(lambda: dialect.context_window(client, self.base_urls))

    async def ready(self) -> bool:
        return await self.dialect.ready(self._client, self.base_urls)

    async def context_window(self) -> int | None:
        return await self._window.get()

    def request_body(self, prompt: Prompt, params: GenerationParams) -> dict[str, Any]:
        return self.dialect.request_body(prompt, params)

    @property
    def client(self) -> httpx.AsyncClient:
        return self._client

    def stream(self, prompt: Prompt, params: GenerationParams) -> AsyncIterator[Chunk]:
        return self.stream_via(self.dialect, prompt, params)

    def stream_via(self, dialect: Dialect, prompt: Prompt, params: GenerationParams) -> ChunkBatches:
        """:meth:`stream` through another dialect of the same server (its legacy completions or
        raw generate endpoint), with the same replicas, failover and closing."""
        body = dialect.request_body(prompt, params)
        return ChunkBatches(self._batches(dialect, body, params.affinity))

    async def _batches(self, dialect: Dialect, body: dict[str, Any], affinity: str | None,
                       ) -> AsyncIterator[list[Chunk]]:
        reader = dialect.reader()

        def open_stream(base: str) -> AsyncIterator[list[dict[str, Any]]]:
            return post_batches(self._client, dialect.url(base), body, dialect.label,
                                framing=dialect.framing, headers=dialect.headers(),
                                errors=dialect.error, is_last=reader.is_last)

        # failover passes on what open_stream yields, here lists of events (its first: the
        # first event's arrival). aclosing: a client disconnect closes the upstream response
        # now, not at GC time.
        reads = cast(AsyncGenerator[list[dict[str, Any]], None],
                     failover(self.pool, cast(Callable[[str], AsyncIterator[Any]], open_stream), affinity))
        to_chunk = reader.chunk
        async with aclosing(reads) as batches:
            async for batch in batches:
                if len(batch) == 1:  # one event per read (a model's paced tokens): nothing before it
                    yield [to_chunk(batch[0])]
                    continue
                chunks: list[Chunk] = []
                try:
                    for event in batch:
                        chunks.append(to_chunk(event))
                except BaseException:
                    if chunks:
                        yield chunks  # the chunks before a bad event, as one at a time did
                    raise
                yield chunks


class ChunkBatches:
    """A backend's chunks, one at a time (``async for``), or as they arrived together
    (:meth:`batch`, or :meth:`split` once the first chunk was taken: the events of one upstream
    read, a list per wake-up instead of one generator step per token for every layer between
    the socket and the parser).  The views read one stream; ``aclose`` closes the upstream
    request."""

    __slots__ = ("_buffer", "_source")

    def __init__(self, source: AsyncIterator[list[Chunk]]) -> None:
        self._source = source
        self._buffer: list[Chunk] = []

    def __aiter__(self) -> ChunkBatches:
        return self

    async def __anext__(self) -> Chunk:
        while not self._buffer:
            self._buffer = (await self._source.__anext__())[::-1]
        return self._buffer.pop()

    async def batch(self) -> list[Chunk]:
        """What is left of the latest read, else the next read's chunks (never empty);
        ``StopAsyncIteration`` at the end."""
        if self._buffer:
            out, self._buffer = self._buffer[::-1], []
            return out
        while not (out := await self._source.__anext__()):
            pass
        return out

    def split(self) -> tuple[list[Chunk], AsyncIterator[list[Chunk]]]:
        """What is left of the latest read (perhaps nothing), and the reads after it: the
        source's own iterator, so a consumer of whole reads steps it with no frame of this
        class in between (``aclose`` still closes it)."""
        left, self._buffer = self._buffer[::-1], []
        return left, self._source

    async def aclose(self) -> None:
        aclose = getattr(self._source, "aclose", None)
        if aclose is not None:
            await aclose()


async def post_stream(client: httpx.AsyncClient, url: str, body: dict[str, Any], label: str, *,
                      framing: Framing = "sse", headers: Mapping[str, str] | None = None,
                      errors: ErrorMapper = status_error,
                      is_last: Callable[[dict[str, Any]], bool] | None = None,
                      ) -> AsyncIterator[dict[str, Any]]:
    """POST ``body`` as JSON and yield each event of the streamed answer as a JSON object:
    :func:`post_batches`, one event at a time."""
    async with aclosing(post_batches(client, url, body, label, framing=framing, headers=headers,
                                     errors=errors, is_last=is_last)) as batches:
        async for batch in batches:
            for event in batch:
                yield event


async def post_batches(client: httpx.AsyncClient, url: str, body: dict[str, Any], label: str, *,
                       framing: Framing = "sse", headers: Mapping[str, str] | None = None,
                       errors: ErrorMapper = status_error,
                       is_last: Callable[[dict[str, Any]], bool] | None = None,
                       ) -> AsyncGenerator[list[dict[str, Any]], None]:
    """POST ``body`` as JSON and yield the events of the streamed answer as JSON objects, a
    list per read of the body that completed at least one (never an empty list).

    The POST runs on the client's thin upstream client (:mod:`adapters.upstream`: aiohttp
    on the pooled connection in production, httpx for any other client).  Non-200 answers
    (mapped by ``errors``) and transport failures raise typed gateway
    errors; SSE's ``[DONE]`` is skipped.  A malformed event raises after the events before
    it in its read were yielded.  Leaving the iteration early closes the upstream
    response (and with it the connection), which is how a client disconnect cancels the
    generation.  ``is_last`` recognises the server's final event: the rest of the body
    (normally only the end of the chunked encoding and a ``[DONE]``) is read before that
    event is yielded, so the response leaves its connection in the pool for the next
    request instead of being closed with it.
    """
    decoder = DECODERS[framing]()
    sent = {"content-type": "application/json", "accept": _ACCEPT[framing], **(headers or {})}
    span = None
    if tracing.enabled:  # one span per attempt; the backend gets its traceparent
        parsed = httpx.URL(url)
        span = tracing.start(f"POST {parsed.path}", {
            "http.request.method": "POST", "server.address": parsed.host, "server.port": parsed.port,
            "url.full": str(parsed.copy_with(username=None, password=None, query=None)),
            "ocm.upstream": label}, kind="CLIENT")
        tracing.inject(sent, span)
    try:
        async with upstream_for(client).stream(url, orjson.dumps(body), sent) as response:
            if span is not None:
                span.set_attribute("http.response.status_code", response.status_code)
            if response.status_code != 200:
                raise errors(response.status_code, await response.aread(), response.headers)
            raws = response.aiter_raw()
            async for raw in raws:
                pending = decoder.decode(raw)
                if not pending:
                    continue
                if len(pending) == 1 and pending[0] != "[DONE]":  # one event per read (paced)
                    only = json_event(pending[0], label)  # malformed: raises, nothing before it
                    if is_last is None or not is_last(only):
                        yield [only]
                        continue
                    # the last event: the loop below drains the body (and reads it once more)
                batch: list[dict[str, Any]] = []
                try:
                    for i, data in enumerate(pending):
                        if data == "[DONE]":
                            continue
                        event = json_event(data, label)
                        batch.append(event)
                        if is_last is not None and is_last(event):
                            rest = pending[i + 1:] + await _drain(raws, decoder)
                            for data in rest:
                                if data != "[DONE]":
                                    batch.append(json_event(data, label))
                            break
                    else:
                        event = None
                except GatewayError:
                    if batch:
                        yield batch  # what came before the malformed event, as one at a time did
                    raise
                if batch:
                    yield batch
                if event is not None:  # the last event: the body was drained
                    return
            tail = [json_event(data, label) for data in decoder.flush() if data != "[DONE]"]
            if tail:
                yield tail
    except httpx.HTTPError as exc:
        if span is not None:
            tracing.failed(span, exc)
        raise transport_error(exc, url) from exc
    except GatewayError as exc:
        if span is not None:
            tracing.failed(span, exc)
        raise
    finally:
        if span is not None:
            span.end()


DRAIN_SECONDS = 1.0


async def _drain(raws: AsyncIterator[bytes], decoder: StreamDecoder) -> list[str]:
    """What is left of a finished response body (bounded in time: a backend that keeps the
    body open is simply closed, as before)."""
    rest: list[str] = []
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(DRAIN_SECONDS):
            async for raw in raws:
                rest += decoder.decode(raw)
            rest += decoder.flush()
    return rest


def json_event(data: str, label: str) -> dict[str, Any]:
    try:
        event = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise UpstreamError(f"{label} sent a malformed stream event: {data[:200]!r}") from exc
    if not isinstance(event, dict):
        raise UpstreamError(f"{label} sent a stream event that is not an object.")
    return event


async def any_healthy(client: httpx.AsyncClient, urls: Sequence[str],
                      headers: Mapping[str, str] | None = None) -> bool:
    """True when at least one of ``urls`` answers ``GET`` with 200 within 2 s."""
    for url in urls:
        try:
            if (await client.get(url, headers=headers, timeout=2.0)).status_code == 200:
                return True
        except httpx.HTTPError:
            continue
    return False


def usage_only(event: dict[str, Any]) -> bool:
    """The final event of an OpenAI-style stream with ``include_usage``: usage, no choices."""
    return event.get("usage") is not None and not event.get("choices")
