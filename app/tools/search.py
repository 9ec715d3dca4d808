"""Web search providers: what the ``web_search`` hosted tool (:mod:`app.tools.web`) needs.

Contract of a :class:`SearchProvider` (the offline index of :mod:`app.tools.search_index`
today; a live service behind the same two methods):

* :meth:`SearchProvider.search` returns at most ``limit`` :class:`Hit` s for a free-text
  query, best first, only from the ``domains`` given (a host equal to one of them or under
  it) when that list is not empty.  A query with no usable word returns no hits; it never
  raises for what the model wrote.
* :meth:`SearchProvider.page` returns the whole text of one page the provider knows, or None.
  A provider never fetches an address the operator did not allow: the offline index only
  returns what it was built from.
* Both may block on I/O or CPU: implementations run that work off the event loop.
* A provider that cannot answer (its service down, slow, or answering garbage) raises
  :class:`SearchUnavailable` with a message for the model: the call's error, never the
  response's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit


class SearchUnavailable(Exception):
    """The provider could not answer; the message is what the model reads."""


@dataclass(frozen=True, slots=True)
class Hit:
    url: str
    title: str
    snippet: str


@dataclass(frozen=True, slots=True)
class Page:
    url: str
    title: str
    text: str


class SearchProvider(Protocol):
    external: bool  # whether it reaches the live web (``external_web_access: false`` refuses those)

    async def search(self, query: str, *, limit: int, domains: Sequence[str] = ()) -> list[Hit]: ...

    async def page(self, url: str) -> Page | None: ...


def in_domains(url: str, domains: Sequence[str]) -> bool:
    """Whether ``url``'s host is one of ``domains`` or under one (``example.com`` allows
    ``docs.example.com``); an empty list allows every URL."""
    if not domains:
        return True
    try:
        host = (urlsplit(url).hostname or "").lower().rstrip(".")
    except ValueError:
        return False
    for domain in domains:
        d = domain.lower().strip().removeprefix("https://").removeprefix("http://").strip("/").rstrip(".")
        if d and (host == d or host.endswith("." + d)):
            return True
    return False
