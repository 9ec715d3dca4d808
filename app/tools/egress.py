"""Which addresses a request may make the gateway call (SSRF).

The operator lists URL prefixes (``[tools.mcp] allowed_urls``); a URL a request names is
allowed only when one prefix matches it component by component: same scheme, same host
(compared as written, lower-cased), same port
(defaults filled in), and a path that continues the prefix's path at a ``/`` boundary.  URLs
with user info, fragments, non-HTTP schemes, unparsable ports, or dot segments in the path
(``/mcp/../admin``, also percent-encoded) never match.  By default the
list is empty: a request may name no server at all.  Redirects are not followed at all (the
MCP client's HTTP client has ``follow_redirects=False``).

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
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from app.core.errors import InvalidRequest

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
