"""Which addresses a request may make the gateway call (SSRF).

The operator lists URL prefixes (``[tools.mcp] allowed_urls``); a URL a request names is
allowed only when one prefix matches it component by component: same scheme, same host
(compared as written, lower-cased), same port
(defaults filled in), and a path that continues the prefix's path at a ``/`` boundary.  URLs
with user info, fragments, non-HTTP schemes, unparsable ports, or dot segments in the path
(``/mcp/../admin``, also percent-encoded) never match.  By default the
list is empty: a request may name no server at all.

That check holds for every request a session makes, not only the first: the ``mcp`` SDK
follows same-origin redirects itself (whatever the client's ``follow_redirects`` says), and the
SSE transport POSTs to whatever ``endpoint`` the server names.  So the MCP client's HTTP
client carries :func:`guard_hooks`: each request's URL is checked against the allow-list
again (an SSE ``endpoint`` outside the prefix is refused: a ``/sse`` prefix does not cover
``/messages/``) and every 3xx answer is refused, never followed; either ends the session
(:class:`EgressRefused`).  The hooks sit on the client, so they hold on every transport,
proxies from the environment included.  A JSON answer is held to 1 MiB (the bound the SDK
keeps for one SSE event; it reads a JSON answer whole, however large).

A host the operator wrote as a name is then resolved (:func:`public_addresses`): when any of
its addresses is not a public one (loopback, private, link-local such as 169.254.169.254,
shared, reserved), the URL is refused too, unless ``[tools.mcp] allow_private_names`` says
the operator's names are meant to be internal.  An address written as a literal is taken as
the operator's explicit choice.  (The MCP client resolves the name again when it connects:
a DNS answer that changes in between is not caught; pin such servers by address or label.)
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx2

from app.core.errors import InvalidRequest

log = logging.getLogger("ocm_gateway")

_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class _Url:
    scheme: str
    host: str
    port: int
    path: str


def _parse(url: str) -> _Url | None:
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _PORTS or not parts.hostname or parts.username is not None or parts.fragment:
        return None
    if any(ch in url for ch in "\\\r\n\t "):
        return None
    segments = (parts.path or "/").split("/")
    if any(s in (".", "..") for s in segments) or any(e in parts.path.lower() for e in ("%2e", "%2f", "%5c")):
        return None  # dot segments (a client resolves them: /mcp/../admin is /admin) never match
    return _Url(scheme, parts.hostname.lower().rstrip("."), port or _PORTS[scheme], parts.path or "/")


def allowed(url: str, prefixes: Sequence[str]) -> bool:
    target = _parse(url)
    if target is None:
        return False
    for prefix in prefixes:
        rule = _parse(prefix)
        if rule is None or (rule.scheme, rule.host, rule.port) != (target.scheme, target.host, target.port):
            continue
        base = rule.path.rstrip("/")
        if target.path == base or target.path.startswith(base + "/") or not base:
            return True
    return False


def check(url: str, prefixes: Sequence[str], param: str) -> str:
    """``url`` when the operator allows it; otherwise a 400 naming ``param``."""
    if not allowed(url, prefixes):
        raise InvalidRequest(f"The server URL {url[:200]!r} is not one this gateway may call "
                             "(the operator's [tools.mcp] allowed_urls).", param=param,
                             code="server_url_not_allowed")
    return url


_RESOLVE_SECONDS = 5.0


async def public_addresses(url: str, param: str, *, allow_private: bool) -> None:
    """Refuse (400) a URL whose host name resolves to an address that is not public; a literal
    address, or ``allow_private``, passes.  A name that does not resolve passes here (the
    connection fails later, as any unreachable server)."""
    target = _parse(url)
    if target is None or allow_private:
        return
    try:
        ipaddress.ip_address(target.host.strip("[]"))
        return  # written as an address: the operator's explicit choice
    except ValueError:
        pass
    loop = asyncio.get_running_loop()
    try:
        infos = await asyncio.wait_for(
            loop.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM), _RESOLVE_SECONDS)
    except (OSError, TimeoutError):
        return
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if not address.is_global:
            raise InvalidRequest(f"The server URL {url[:200]!r} names a host that resolves to a "
                                 f"non-public address ({address}); this gateway does not call those "
                                 "for a request ([tools.mcp] allow_private_names).", param=param,
                                 code="server_url_not_allowed")


class EgressRefused(Exception):
    """A request of an MCP session that left the allow-list, or a redirect it was answered."""


MAX_MESSAGE = 1 << 20


class MessageTooLarge(httpx2.StreamError):
    """A JSON answer past :data:`MAX_MESSAGE` (the SDK reports it as the request's parse error)."""


class _Capped(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, limit: int) -> None:
        self._inner, self._limit = inner, limit

    async def __aiter__(self) -> Any:
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._limit:
                raise MessageTooLarge(f"the server's message exceeded the {self._limit} byte limit")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


def origin(url: str) -> str:
    """``scheme://host:port/`` of ``url``: the prefix of an operator's own server."""
    target = _parse(url)
    if target is None:
        return ""
    host = f"[{target.host}]" if ":" in target.host else target.host
    return f"{target.scheme}://{host}:{target.port}/"


Hook = Callable[[Any], Awaitable[None]]


def guard_hooks(prefixes: Sequence[str], refused: Callable[[EgressRefused], None], *,
                reveal: bool) -> dict[str, list[Hook]]:
    """httpx2 ``event_hooks`` that hold a session to ``prefixes`` (see the module docstring):
    a request outside them is not sent, a 3xx answer is not followed; ``refused`` hears of
    either before it is raised.  ``reveal``: name the path in the message (a request's own
    URL; an operator's server's URL is not shown to clients)."""
    def refuse(message: str) -> EgressRefused:
        exc = EgressRefused(message)
        refused(exc)
        return exc

    async def on_request(request: httpx2.Request) -> None:
        if not allowed(str(request.url), prefixes):
            where = f" ({request.url.path[:200]})" if reveal else ""
            raise refuse(f"the server sent this gateway to a URL outside the allowed ones{where}; "
                         "it was not called")

    async def on_response(response: httpx2.Response) -> None:
        if 300 <= response.status_code < 400:
            location = response.headers.get("location", "")
            log.warning("MCP: %s %s answered HTTP %d to %r; not followed", response.request.method,
                        response.request.url.copy_with(query=None), response.status_code, location[:200])
            where = f" to {location[:200]!r}" if reveal and location else ""
            raise refuse(f"the server answered HTTP {response.status_code} (a redirect{where}); "
                         "redirects are not followed")
        if response.headers.get("content-type", "").lower().startswith("application/json"):
            if not isinstance(response.stream, httpx2.AsyncByteStream):  # pragma: no cover
                raise TypeError("an MCP answer that is not an httpx2 byte stream")
            response.stream = _Capped(response.stream, MAX_MESSAGE)

    return {"request": [on_request], "response": [on_response]}


_ssl: ssl.SSLContext | None = None


async def ssl_context() -> ssl.SSLContext:
    """One TLS context for every MCP client of this process, built off the event loop: each
    client building its own reads the CA bundle again (20-35 ms of the loop per session)."""
    global _ssl
    if _ssl is None:
        context = await asyncio.to_thread(httpx2.create_ssl_context)
        _ssl = _ssl or context
    return _ssl
