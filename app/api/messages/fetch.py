"""The bytes behind a ``url`` source (an image or a document of the Messages API), fetched under
the operator's ``[media]`` settings.

SSRF rules (those of the hosted MCP tool, :mod:`app.tools.egress`): a URL is fetched only when
a prefix of ``[media] allowed_urls`` covers it component by component (scheme, host, port, path
at a ``/`` boundary; user info, fragments, dot segments never match) — the default list is
empty, so by default every URL source is a 400; a host written as a name that resolves to a
loopback / private / link-local address is refused unless ``allow_private_names`` (an address
written as a literal is the operator's explicit choice).  Redirects are never followed (a 3xx
is a 400), the proxy settings of the environment are not used, the body is read up to
``limit`` bytes and no further, and the whole fetch has ``fetch_timeout`` seconds.  Every
failure is a 400 naming the source's ``url``.  (The name is resolved again when the client
connects: a DNS answer that changes in between is not caught; allow such hosts by address.)
"""

from __future__ import annotations

import asyncio

import httpx2

from app.config import MediaSettings
from app.core.errors import InvalidRequest
from app.tools import egress

CODE = "invalid_url_source"


def _refused(url: str, why: str, param: str) -> InvalidRequest:
    return InvalidRequest(f"The URL {url[:200]!r} was not fetched: {why}.", param=param, code=CODE)


async def _get(url: str, limit: int, param: str) -> tuple[str | None, bytes]:
    async with (httpx2.AsyncClient(follow_redirects=False, trust_env=False) as client,
                client.stream("GET", url) as response):
        if 300 <= response.status_code < 400:
            raise _refused(url, f"it answered HTTP {response.status_code} (a redirect; redirects are "
                           "not followed)", param)
        if response.status_code != 200:
            raise _refused(url, f"it answered HTTP {response.status_code}", param)
        data = bytearray()
        async for chunk in response.aiter_bytes():
            data += chunk
            if len(data) > limit:
                raise _refused(url, f"it holds more than {limit // (1024 * 1024)} MiB", param)
        declared = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        return declared or None, bytes(data)


async def fetch(url: str, settings: MediaSettings, limit: int, param: str) -> tuple[str | None, bytes]:
    """(the declared media type, the body) of ``url``, or a 400 naming ``param``."""
    if not settings.allowed_urls:
        raise InvalidRequest("The gateway does not fetch URL sources (the operator allows none: "
                             "[media] allowed_urls); send the content as base64.", param=param, code=CODE)
    if not egress.allowed(url, settings.allowed_urls):
        raise _refused(url, "it is not under one of the operator's [media] allowed_urls", param)
    try:
        await egress.public_addresses(url, param, allow_private=settings.allow_private_names)
    except InvalidRequest:
        raise _refused(url, "its host resolves to a non-public address ([media] "
                       "allow_private_names)", param) from None
    try:
        return await asyncio.wait_for(_get(url, limit, param), settings.fetch_timeout)
    except TimeoutError:
        raise _refused(url, f"it did not answer within {settings.fetch_timeout:g} s", param) from None
    except httpx2.HTTPError as exc:
        raise _refused(url, f"{type(exc).__name__}", param) from None
