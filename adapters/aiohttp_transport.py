"""The network under every upstream call: one pooled aiohttp session, and its two faces.

* :class:`AiohttpTransport`, an httpx transport: every ``httpx.AsyncClient`` call (discovery,
  tokenize, embeddings, health) runs on it, and tests put ``httpx.MockTransport`` in its place.
* :class:`AiohttpUpstream`, the thin client of the hot path (:mod:`adapters.upstream`): the
  streamed POST of a generation straight on the pooled connection, without the httpx request,
  response, stream and timer objects above the transport (about a third of the transport's
  time in the profile of ``docs/performance.md``).

Both go through :class:`AiohttpPool`, which holds what the gateway relies on, whichever face:

* **timeouts** (httpx's ``Timeout`` names): ``connect`` per connection attempt, ``pool`` for a
  free connection, ``read`` as the longest silence between two reads of the body (an upstream
  that stops mid-stream is a ``ReadTimeout``);
* **streaming**: body bytes are handed on as they arrive (``iter_any``), never re-chunked;
* **closing**: a response closed before its body ended closes its connection (the upstream
  sees the disconnect and stops generating); one read to the end goes back to the pool for
  the next request;
* **stale connections**: a pooled connection the server closed while it was idle (its
  keep-alive timeout racing our next request) fails before any answer; that request is
  sent again on another connection (only when it ran on a reused one: a new connection that
  fails so is the server's failure);
* **proxies** from the environment (``HTTP_PROXY`` / ``HTTPS_PROXY`` / ``NO_PROXY``, as
  httpx's ``trust_env``), looked up once per upstream origin: aiohttp's own ``trust_env``
  reads them, and ``~/.netrc``, in a worker thread on *every* request (two thread hops per
  upstream call: ~13 % of the gateway's CPU on a non-streaming Harmony request);
* **TLS** verified like httpx (certifi's bundle, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``);
* **errors** as httpx's exception types, which ``adapters/base.py`` maps to gateway errors:
  refused / unresolvable → ``ConnectError``, connect timeout → ``ConnectTimeout``,
  silence → ``ReadTimeout``, a connection lost mid-answer → ``ReadError``, a broken
  response → ``RemoteProtocolError``.
"""

from __future__ import annotations

import asyncio
import contextvars
import ssl
from collections.abc import AsyncIterator, Iterable, Mapping
from types import TracebackType
from typing import Any

import aiohttp
import httpx
from aiohttp.connector import Connection
from aiohttp.helpers import get_env_proxy_for_url
from yarl import URL

Timeouts = Mapping[str, float | None]
Headers = Iterable[tuple[str, str]]


def _mapped(exc: BaseException, request: httpx.Request | None = None) -> httpx.TransportError:
    """The httpx exception for an aiohttp / asyncio one (the most specific first; the thin
    client has no httpx request to attach)."""
    message = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(message, request=request)
    if isinstance(exc, aiohttp.SocketTimeoutError | asyncio.TimeoutError):
        return httpx.ReadTimeout(message, request=request)
    if isinstance(exc, aiohttp.ClientConnectorError):  # refused, DNS, TLS handshake
        return httpx.ConnectError(message, request=request)
    if isinstance(exc, aiohttp.ClientPayloadError | aiohttp.ClientResponseError):
        return httpx.RemoteProtocolError(message, request=request)
    if isinstance(exc, aiohttp.InvalidURL):
        return httpx.UnsupportedProtocol(message, request=request)
    return httpx.ReadError(message, request=request)  # disconnected, reset, any other OSError


_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)
# How a request on a connection the server already closed fails: no answer, a reset, or the
# request itself cannot be written (aiohttp's ClientOSError "Can not write request body").
_STALE = (aiohttp.ServerDisconnectedError, aiohttp.ClientConnectionResetError, aiohttp.ClientOSError)
# Set by aiohttp itself; and bodies are read raw, so no compression is asked for.
_OWN = frozenset({"host", "content-length", "transfer-encoding", "accept-encoding"})
_IDENTITY = ("accept-encoding", "identity")


class _Attempt:
    """Whether one try of a request ran on a pooled connection (set by :class:`_Connector`)."""

    __slots__ = ("reused",)

    def __init__(self) -> None:
        self.reused = False


_ATTEMPT: contextvars.ContextVar[_Attempt | None] = contextvars.ContextVar("upstream_attempt",
                                                                           default=None)


class _Connector(aiohttp.TCPConnector):
    """aiohttp's connector, telling the request being sent (:data:`_ATTEMPT`, in the task that
    connects) that it got a pooled connection.  aiohttp's tracing said the same, at the price
    of a ``Trace`` and six awaited signals on every request."""

    async def _get(self, *args: Any, **kwargs: Any) -> Connection | None:
        # aiohttp's private hook for "a pooled connection, if one is free" (3.10-3.14: the
        # same name; the arguments passed through as they come, whatever they are).  Were it
        # renamed, nothing would call this: requests still work, only a stale pooled
        # connection would fail instead of being sent again (tests/unit/adapters/
        # test_aiohttp_transport.py::test_reuse_is_known_without_aiohttp_tracing says so).
        conn: Connection | None = await super()._get(*args, **kwargs)
        if conn is not None:
            attempt = _ATTEMPT.get()
            if attempt is not None:
                attempt.reused = True
        return conn


def client_timeout(timeouts: Timeouts) -> aiohttp.ClientTimeout:
    """aiohttp's timeouts for httpx's: ``pool`` bounds getting a connection (queueing and
    connecting), ``connect`` one connection attempt, ``read`` the silence between reads."""
    return aiohttp.ClientTimeout(total=None, connect=timeouts.get("pool"),
                                 sock_connect=timeouts.get("connect"),
                                 sock_read=timeouts.get("read"))


def sent_headers(headers: Headers) -> list[tuple[str, str]]:
    """The request's headers as sent: aiohttp's own left to it, the body asked uncompressed."""
    return [*((k, v) for k, v in headers if k.lower() not in _OWN), _IDENTITY]


_Proxy = tuple[URL | None, aiohttp.BasicAuth | None]
_NO_PROXY: _Proxy = (None, None)


class AiohttpPool:
    """One aiohttp session (created in the running loop on first use) for all upstreams."""

    def __init__(self, limits: httpx.Limits, *, keepalive_expiry: float = 5.0,
                 verify: ssl.SSLContext | bool = True, trust_env: bool = True) -> None:
        """``verify``: True is httpx's own default context (certifi's CA bundle, or
        ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``), so HTTPS upstreams verify exactly as before."""
        self._limit = limits.max_connections or 0  # 0: no limit
        self._keepalive = limits.keepalive_expiry if limits.keepalive_expiry is not None \
            else keepalive_expiry
        self._ssl: ssl.SSLContext | bool = (httpx.create_ssl_context(trust_env=trust_env)
                                             if verify is True else verify)
        self._trust_env = trust_env
        self._proxies: dict[tuple[str, str, int | None], _Proxy] = {}
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = _Connector(limit=self._limit, keepalive_timeout=self._keepalive,
                                   ssl=self._ssl)
            self._session = aiohttp.ClientSession(
                connector=connector, trust_env=False, auto_decompress=False,
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"))
        return self._session

    async def send(self, method: str, url: URL, body: bytes | None, headers: Headers,
                   waits: aiohttp.ClientTimeout) -> aiohttp.ClientResponse:
        """The response (status and headers read, body not yet), on a pooled connection when
        one is free; aiohttp's exceptions as they are (the callers map them)."""
        proxy, proxy_auth = await self._proxy(url) if self._trust_env else _NO_PROXY
        while True:
            attempt = _Attempt()
            token = _ATTEMPT.set(attempt)
            try:
                return await self._client().request(
                    method, url, data=body or None, headers=headers, allow_redirects=False,
                    timeout=waits, proxy=proxy, proxy_auth=proxy_auth)
            except aiohttp.ClientConnectorError:  # could not connect: not a stale one
                raise
            except _STALE:
                # No answer at all on a kept-alive connection: the server closed it while it was
                # idle (its keep-alive timeout, or one request per connection), so it never saw
                # this request, which goes again on another connection.  A new connection that
                # fails like this is the server's failure, and is not retried here.
                if not attempt.reused:
                    raise
            finally:
                _ATTEMPT.reset(token)

    async def _proxy(self, url: URL) -> _Proxy:
        """The environment's proxy for ``url``'s origin, looked up once (off the loop: it
        may read ``~/.netrc`` for the proxy's credentials)."""
        key = (url.scheme, url.host or "", url.port)
        found = self._proxies.get(key)
        if found is None:
            found = self._proxies[key] = await asyncio.to_thread(_env_proxy, url)
        return found

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


def _env_proxy(url: URL) -> _Proxy:
    try:
        return get_env_proxy_for_url(url)
    except LookupError:  # no proxy for this URL (none set, or NO_PROXY matches)
        return _NO_PROXY


def finish(response: aiohttp.ClientResponse) -> None:
    """Give a response's connection back: to the pool when its body was read to the end,
    closed when it was cut short (so the upstream stops generating)."""
    if response.content.is_eof():
        response.release()
    else:
        response.close()


class _Body(httpx.AsyncByteStream):
    def __init__(self, response: aiohttp.ClientResponse, request: httpx.Request) -> None:
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for data in self._response.content.iter_any():
                yield data
        except _ERRORS as exc:
            raise _mapped(exc, self._request) from exc

    async def aclose(self) -> None:
        finish(self._response)


class AiohttpTransport(httpx.AsyncBaseTransport):
    """The pool as an httpx transport (the arguments are :class:`AiohttpPool`'s)."""

    def __init__(self, limits: httpx.Limits, *, keepalive_expiry: float = 5.0,
                 verify: ssl.SSLContext | bool = True, trust_env: bool = True) -> None:
        self.pool = AiohttpPool(limits, keepalive_expiry=keepalive_expiry, verify=verify,
                                trust_env=trust_env)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        try:
            response = await self.pool.send(
                request.method, URL(str(request.url)), body,
                sent_headers(request.headers.multi_items()),
                client_timeout(request.extensions.get("timeout", {})))
        except _ERRORS as exc:
            raise _mapped(exc, request) from exc
        return httpx.Response(response.status, headers=response.raw_headers,
                              stream=_Body(response, request), request=request,
                              extensions={"http_version": b"HTTP/1.1"})

    async def aclose(self) -> None:
        await self.pool.aclose()


class AiohttpResponse:
    """A streamed answer of :class:`AiohttpUpstream` (see ``adapters.upstream.UpstreamResponse``)."""

    __slots__ = ("_response", "status_code")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status_code = response.status

    @property
    def headers(self) -> httpx.Headers:
        return httpx.Headers(self._response.raw_headers)

    async def aread(self) -> bytes:
        try:
            return await self._response.read()
        except _ERRORS as exc:
            raise _mapped(exc) from exc

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        content = self._response.content
        try:
            while data := await content.readany():
                yield data
        except _ERRORS as exc:
            raise _mapped(exc) from exc


class _Exchange:
    """One streamed POST: the response on entry, its connection given back on exit."""

    __slots__ = ("_body", "_headers", "_response", "_upstream", "_url")

    def __init__(self, upstream: AiohttpUpstream, url: str, body: bytes,
                 headers: Mapping[str, str]) -> None:
        self._upstream = upstream
        self._url = url
        self._body = body
        self._headers = headers
        self._response: aiohttp.ClientResponse | None = None

    async def __aenter__(self) -> AiohttpResponse:
        up = self._upstream
        try:
            self._response = await up.pool.send("POST", up.url(self._url), self._body,
                                                sent_headers(self._headers.items()), up.timeout)
        except _ERRORS as exc:
            raise _mapped(exc) from exc
        return AiohttpResponse(self._response)

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._response is not None:
            finish(self._response)


class AiohttpUpstream:
    """The thin client of the hot path on ``pool`` (``adapters.upstream.UpstreamClient``):
    ``timeout`` is the httpx client's, so both faces wait alike."""

    def __init__(self, pool: AiohttpPool, timeout: httpx.Timeout,
                 defaults: Mapping[str, str] | None = None) -> None:
        """``defaults``: headers every request carries unless it sets them (the httpx client's
        own, so an upstream sees the same request whichever face sent it)."""
        self.pool = pool
        self.timeout = client_timeout(timeout.as_dict())
        self._defaults = {k.lower(): v for k, v in (defaults or {}).items()}
        self._urls: dict[str, URL] = {}

    def url(self, url: str) -> URL:
        """``url`` parsed once (a gateway posts to a handful of upstream URLs)."""
        parsed = self._urls.get(url)
        if parsed is None:
            if len(self._urls) >= 256:
                self._urls.clear()
            parsed = self._urls[url] = URL(url)
        return parsed

    def stream(self, url: str, body: bytes, headers: Mapping[str, str]) -> _Exchange:
        sent = self._defaults.copy()
        sent.update((k.lower(), v) for k, v in headers.items())
        return _Exchange(self, url, body, sent)
