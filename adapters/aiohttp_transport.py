"""The network under the gateway's httpx client: an httpx transport over aiohttp.

Every upstream request goes through one ``httpx.AsyncClient`` (adapters, discovery,
tokenize), so tests replace the network with ``httpx.MockTransport`` and the code path
above the transport is the same in production.  The network itself is aiohttp: streaming
a 33-event llama.cpp answer costs ~0.9 ms of CPU through this transport against ~2.7 ms
through httpx's own (httpcore on anyio), measured in ``docs/performance.md``.

What the gateway relies on, kept here:

* **timeouts** from the request's httpx ``Timeout``: ``connect`` per connection attempt,
  ``pool`` for a free connection, ``read`` as the longest silence between two reads of
  the body (an upstream that stops mid-stream is a ``ReadTimeout``);
* **streaming**: body bytes are handed on as they arrive (``iter_any``), never
  re-chunked;
* **closing**: a response closed before its body ended closes its connection (the
  upstream sees the disconnect and stops generating); one read to the end goes back to
  the pool for the next request;
* **stale connections**: a pooled connection the server closed while it was idle (its
  keep-alive timeout racing our next request) fails before any answer; that request is
  sent again on another connection (only when it ran on a reused one: a new connection that
  fails so is the server's failure);
* **proxies** from the environment (``HTTP_PROXY`` / ``HTTPS_PROXY`` / ``NO_PROXY``, as
  httpx's ``trust_env``), looked up once per upstream origin: aiohttp's own ``trust_env``
  reads them, and ``~/.netrc``, in a worker thread on *every* request (two thread hops per
  upstream call: ~13 % of the gateway's CPU on a non-streaming Harmony request);
* **errors** as httpx's exception types, which ``adapters/base.py`` maps to gateway errors:
  refused / unresolvable → ``ConnectError``, connect timeout → ``ConnectTimeout``,
  silence → ``ReadTimeout``, a connection lost mid-answer → ``ReadError``, a broken
  response → ``RemoteProtocolError``.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from types import SimpleNamespace

import aiohttp
import httpx
from aiohttp.helpers import get_env_proxy_for_url
from yarl import URL

Timeouts = dict[str, float | None]


def _mapped(exc: BaseException, request: httpx.Request) -> httpx.TransportError:
    """The httpx exception for an aiohttp / asyncio one (the most specific first)."""
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
# Set by aiohttp itself; and bodies are read raw (``aiter_raw``), so no compression is asked for.
_OWN = frozenset({"host", "content-length", "transfer-encoding", "accept-encoding"})


class _Attempt:
    """Whether one try of a request ran on a pooled connection (set by aiohttp's tracing)."""

    reused = False


async def _on_reuse(session: aiohttp.ClientSession, ctx: SimpleNamespace,
                    params: aiohttp.TraceConnectionReuseconnParams) -> None:
    ctx.trace_request_ctx.reused = True


_TRACE = aiohttp.TraceConfig()
_TRACE.on_connection_reuseconn.append(_on_reuse)


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
        if self._response.content.is_eof():
            self._response.release()  # read to the end: the connection is reused
        else:
            self._response.close()  # cut short: close it, so the upstream stops


class AiohttpTransport(httpx.AsyncBaseTransport):
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
            connector = aiohttp.TCPConnector(limit=self._limit, keepalive_timeout=self._keepalive,
                                             ssl=self._ssl)
            self._session = aiohttp.ClientSession(
                connector=connector, trust_env=False, auto_decompress=False,
                trace_configs=[_TRACE],
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"))
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeouts: Timeouts = request.extensions.get("timeout", {})
        timeout = aiohttp.ClientTimeout(total=None, connect=timeouts.get("pool"),
                                        sock_connect=timeouts.get("connect"),
                                        sock_read=timeouts.get("read"))
        body = await request.aread()
        headers = [*((k, v) for k, v in request.headers.multi_items() if k.lower() not in _OWN),
                   ("accept-encoding", "identity")]
        url = URL(str(request.url))
        proxy, proxy_auth = await self._proxy(url) if self._trust_env else _NO_PROXY
        while True:
            attempt = _Attempt()
            try:
                response = await self._client().request(
                    request.method, url, data=body or None, headers=headers,
                    allow_redirects=False, timeout=timeout, trace_request_ctx=attempt,
                    proxy=proxy, proxy_auth=proxy_auth)
                break
            except aiohttp.ClientConnectorError as exc:  # could not connect: not a stale one
                raise _mapped(exc, request) from exc
            except _STALE as exc:
                # No answer at all on a kept-alive connection: the server closed it while it was
                # idle (its keep-alive timeout, or one request per connection), so it never saw
                # this request, which goes again on another connection.  A new connection that
                # fails like this is the server's failure, and is not retried here.
                if not attempt.reused:
                    raise _mapped(exc, request) from exc
            except _ERRORS as exc:
                raise _mapped(exc, request) from exc
        return httpx.Response(response.status, headers=response.raw_headers,
                              stream=_Body(response, request), request=request,
                              extensions={"http_version": b"HTTP/1.1"})

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


_Proxy = tuple[URL | None, aiohttp.BasicAuth | None]
_NO_PROXY: _Proxy = (None, None)


def _env_proxy(url: URL) -> _Proxy:
    try:
        return get_env_proxy_for_url(url)
    except LookupError:  # no proxy for this URL (none set, or NO_PROXY matches)
        return _NO_PROXY
