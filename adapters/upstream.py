"""The upstream client seam of the hot path: one streamed POST, two implementations.

A generation's streamed POST (:func:`adapters.transport.post_stream`) is the one upstream
call made per request, so it does not go through httpx's per-request objects: in production
it runs on :class:`~adapters.aiohttp_transport.AiohttpUpstream`, straight on the pooled
aiohttp connection that the httpx client's transport uses too (one pool, one limit).  Every
other upstream call (discovery, tokenize, embeddings, health) stays on httpx.

Which implementation a request gets follows from how the client was built, in one place
(``app/main.py``): a :class:`PooledClient` carries the thin client of its own pool; any
other ``httpx.AsyncClient`` (the tests' ``httpx.MockTransport``) is used through
:class:`HttpxUpstream`, so code above this seam is the same in tests and production.

Contract of :meth:`UpstreamClient.stream`: entering gives the status and headers (a failure
to connect or an answerless stale connection raises httpx's exception types, after the
pool's one re-send on a fresh connection); ``aiter_raw`` yields body bytes as they arrive,
its failures are httpx's (silence → ``ReadTimeout``, a dropped connection → ``ReadError``);
leaving before the end closes the connection (the upstream stops), leaving after the end
returns it to the pool.  The guarantees themselves are kept in :mod:`adapters.aiohttp_transport`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Protocol

import httpx

from adapters.aiohttp_transport import AiohttpTransport, AiohttpUpstream


class UpstreamResponse(Protocol):
    """What the hot path reads of an answer (an ``httpx.Response`` is one)."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> httpx.Headers: ...

    async def aread(self) -> bytes: ...

    def aiter_raw(self) -> AsyncIterator[bytes]: ...


class UpstreamClient(Protocol):
    def stream(self, url: str, body: bytes, headers: Mapping[str, str],
               ) -> AbstractAsyncContextManager[UpstreamResponse]:
        """POST ``body`` to ``url`` and stream the answer (the contract above)."""
        ...


class HttpxUpstream:
    """The seam on any ``httpx.AsyncClient``: its transport, timeouts and default headers."""

    __slots__ = ("client",)

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    def stream(self, url: str, body: bytes, headers: Mapping[str, str],
               ) -> AbstractAsyncContextManager[httpx.Response]:
        return self.client.stream("POST", url, content=body, headers=headers)


class PooledClient(httpx.AsyncClient):
    """The gateway's upstream client: httpx over the aiohttp pool for every call, and
    :attr:`direct`, the thin client on the same pool, for the streamed POSTs."""

    def __init__(self, limits: httpx.Limits, timeout: httpx.Timeout) -> None:
        transport = AiohttpTransport(limits)
        super().__init__(transport=transport, timeout=timeout, limits=limits)
        self.direct = AiohttpUpstream(transport.pool, timeout, defaults=self.headers)


def upstream_for(client: httpx.AsyncClient) -> UpstreamClient:
    """The hot path's client for ``client`` (see the module docstring)."""
    if isinstance(client, PooledClient):
        return client.direct
    return HttpxUpstream(client)
