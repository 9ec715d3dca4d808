"""Which addresses a request may make the gateway call (SSRF).

The operator lists URL prefixes (``[tools.mcp] allowed_urls``); a URL a request names is
allowed only when one prefix matches it component by component: same scheme, same host
(compared as written, lower-cased: no DNS is consulted, so a name that resolves to a private
address is as refused as the address itself unless the operator wrote it), same port
(defaults filled in), and a path that continues the prefix's path at a ``/`` boundary.  URLs
with user info, fragments, non-HTTP schemes or unparsable ports never match.  By default the
list is empty: a request may name no server at all.  Redirects are not followed outside the
URL's own origin (the MCP transports follow only same-origin redirects themselves).
"""

from __future__ import annotations

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
