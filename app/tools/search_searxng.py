"""A SearXNG instance as the web search provider (``[tools.web_search] searxng_url``).

SearXNG is a metasearch service an operator runs (its own compose service, say); its JSON API
(``GET {url}/search?q=...&format=json``, enabled by ``search.formats: [html, json]`` in its
``settings.yml``) answers ``{"query", "number_of_results", "results": [{"url", "title",
"content", "engine", ...}], "answers", "suggestions", "unresponsive_engines": [[engine,
reason], ...], ...}``.  The fixture the tests replay is a real answer recorded from SearXNG
(``tests/fixtures/searxng/README.md`` says how).

* The URL is the operator's, never a request's: a request cannot make the gateway call
  another address.  Redirects are not followed.
* ``search``: the ``http(s)`` results, in SearXNG's order, deduplicated, filtered to the
  request's ``allowed_domains``; SearXNG's own answers (``answers``) are not hits.
* ``page``: None — the gateway does not fetch pages from the web (a model could name any
  address); opening a result of this response shows what the search said of it
  (:mod:`app.tools.web`), nothing is shared between responses.
* SearXNG failing (connection, status, timeout, not JSON, every engine unresponsive) raises
  :class:`~app.tools.search.SearchUnavailable`: the model reads it as the call's error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx
import orjson

from app.tools.search import Hit, Page, SearchUnavailable, in_domains


class SearxngSearch:
    """A :class:`~app.tools.search.SearchProvider` over a SearXNG instance's JSON API."""

    def __init__(self, url: str, *, external: bool = True, categories: str | None = None,
                 language: str | None = None, timeout: float = 10.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.url = url.rstrip("/")
        self.external = external
        self.categories, self.language = categories, language
        self._client = httpx.AsyncClient(timeout=timeout, follow_redirects=False, transport=transport,
                                         headers={"accept": "application/json"})

    async def _query(self, query: str) -> dict[str, Any]:
        params = {"q": query, "format": "json"}
        if self.categories:
            params["categories"] = self.categories
        if self.language:
            params["language"] = self.language
        try:
            response = await self._client.get(f"{self.url}/search", params=params)
        except httpx.HTTPError as exc:
            raise SearchUnavailable("The search service could not be reached "
                                    f"({type(exc).__name__}).") from None
        if response.status_code != 200:
            hint = " (is format json enabled in its settings.yml?)" if response.status_code == 403 else ""
            raise SearchUnavailable(f"The search service answered HTTP {response.status_code}{hint}.")
        try:
            body = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            raise SearchUnavailable("The search service did not answer JSON.") from None
        if not isinstance(body, dict):
            raise SearchUnavailable("The search service's answer is not a JSON object.")
        return body

    async def search(self, query: str, *, limit: int, domains: Sequence[str] = ()) -> list[Hit]:
        body = await self._query(query)
        results = body.get("results")
        results = results if isinstance(results, list) else []
        hits: list[Hit] = []
        seen: set[str] = set()
        for result in results:
            if not isinstance(result, dict):
                continue
            url = result.get("url")
            if not isinstance(url, str) or not url.startswith(("http://", "https://")) or url in seen:
                continue
            seen.add(url)
            title = result.get("title") if isinstance(result.get("title"), str) else ""
            content = result.get("content") if isinstance(result.get("content"), str) else ""
            if in_domains(url, domains) and len(hits) < limit:
                hits.append(Hit(url, (title or url).strip(), " ".join(str(content).split())[:500]))
        if not hits and not results and body.get("unresponsive_engines"):
            failed = ", ".join(str(e[0]) for e in body["unresponsive_engines"]
                               if isinstance(e, list) and e)
            raise SearchUnavailable(f"The search service's engines did not answer ({failed or 'all'}).")
        return hits

    async def page(self, url: str) -> Page | None:
        return None  # see the module's docstring

    async def aclose(self) -> None:
        await self._client.aclose()
