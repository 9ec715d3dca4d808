"""The ``web_search`` hosted tool: a browser the model drives, over a :mod:`search provider
<app.tools.search>`.

The model is shown three functions in namespace ``browser``; on Harmony (gpt-oss) they are
its built-in ``browser`` tool, shown in the system message exactly as openai-harmony renders
it, and the model calls ``browser.search`` / ``browser.open`` / ``browser.find`` (the extra
arguments of the built-in, ``cursor``, ``loc``, ``source``, ..., are accepted and ignored):

* ``search(query, topn?)`` → numbered results (title, URL, snippet);
* ``open(id)`` → a page's text: ``id`` is a URL from the results or a result's number;
* ``find(pattern, url?)`` → the lines of a page (default: the last one opened) containing
  ``pattern``.

Each call is one ``web_search_call`` item whose ``action`` is ``search`` (with the result
URLs as ``sources``), ``open_page`` or ``find_in_page``; :func:`action_of` gives the action
from the arguments alone (the item is announced before it runs), the outcome's
``detail["action"]`` the final one.  One :class:`WebSearchToolbox` per response keeps the
last results and page (for ``open(2)`` and ``find``) and the URLs it showed (for citations).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.core.conversation import FunctionTool
from app.tools.base import ToolOutcome, clip
from app.tools.search import Hit, Page, SearchProvider, SearchUnavailable, in_domains

NAMESPACE = "browser"
SEARCH, OPEN, FIND = (f"{NAMESPACE}__{n}" for n in ("search", "open", "find"))
RESULTS = {"low": 3, "medium": 5, "high": 8}  # search_context_size → results per search
_MAX_FIND = 20

FUNCTIONS = (
    FunctionTool(SEARCH, "Search the web. Returns numbered results with their URLs.",
                 {"type": "object", "properties": {
                     "query": {"type": "string", "description": "What to search for."},
                     "topn": {"type": "integer", "description": "How many results (at most 10)."}},
                  "required": ["query"]}, False, NAMESPACE, NAMESPACE),
    FunctionTool(OPEN, "Open a page: a URL from the search results, or the number of a result.",
                 {"type": "object", "properties": {
                     "id": {"type": "string", "description": "A URL, or a result's number."}},
                  "required": ["id"]}, False, NAMESPACE, NAMESPACE),
    FunctionTool(FIND, "Find the lines of a page that contain a pattern (the last page opened by default).",
                 {"type": "object", "properties": {
                     "pattern": {"type": "string"}, "url": {"type": "string"}},
                  "required": ["pattern"]}, False, NAMESPACE, NAMESPACE),
)


def _args(arguments: str) -> dict[str, Any] | None:
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def action_of(name: str, arguments: str) -> dict[str, Any]:
    """The ``action`` of a ``web_search_call`` from the model's arguments (before it runs)."""
    args = _args(arguments) or {}
    if name == SEARCH:
        return {"type": "search", "query": str(args.get("query", ""))}
    if name == OPEN:
        target = str(args.get("id", ""))
        return {"type": "open_page", "url": target} if not target.isdigit() else {"type": "open_page"}
    return {"type": "find_in_page", "url": str(args.get("url", "")), "pattern": str(args.get("pattern", ""))}


def _results_text(query: str, hits: Sequence[Hit]) -> str:
    if not hits:
        return f"No results for {query!r}."
    lines = [f"Search results for {query!r}:"]
    for n, hit in enumerate(hits, 1):
        lines += ["", f"[{n}] {hit.title}", f"URL: {hit.url}", hit.snippet]
    return "\n".join(lines)


@dataclass
class WebSearchToolbox:
    """``web_search`` for one response (a :class:`~app.tools.base.Toolbox`)."""

    provider: SearchProvider
    results: int = 5  # per search, from search_context_size
    domains: tuple[str, ...] = ()  # filters.allowed_domains
    max_output_chars: int = 32_768
    functions: tuple[FunctionTool, ...] = FUNCTIONS
    shown: dict[str, str] = field(default_factory=dict)  # URL → title, every source the model saw
    _last_hits: list[Hit] = field(default_factory=list)
    _hits: dict[str, Hit] = field(default_factory=dict)  # URL → every hit this response's searches gave
    _last_page: Page | None = None

    def owns(self, name: str) -> bool:
        return name in (SEARCH, OPEN, FIND)

    def needs_approval(self, name: str) -> bool:
        return False

    async def call(self, name: str, arguments: str) -> ToolOutcome:
        args = _args(arguments)
        if args is None:
            return ToolOutcome("", "The arguments must be a JSON object.", {"action": action_of(name, "")})
        if name == SEARCH:
            return await self._search(args)
        if name == OPEN:
            return await self._open(args)
        return await self._find(args)

    async def _search(self, args: dict[str, Any]) -> ToolOutcome:
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            return ToolOutcome("", "search needs a non-empty query.", {"action": {"type": "search"}})
        topn = args.get("topn")
        limit = self.results
        if isinstance(topn, int) and not isinstance(topn, bool) and topn > 0:
            limit = min(topn, 10)
        try:
            hits = await self.provider.search(query, limit=limit, domains=self.domains)
        except SearchUnavailable as exc:
            return ToolOutcome("", str(exc), {"action": {"type": "search", "query": query}})
        self._last_hits = hits
        for hit in hits:
            self.shown.setdefault(hit.url, hit.title)
            self._hits.setdefault(hit.url, hit)
        action = {"type": "search", "query": query,
                  "sources": [{"type": "url", "url": hit.url} for hit in hits]}
        return ToolOutcome(clip(_results_text(query, hits), self.max_output_chars), None, {"action": action})

    def _target(self, ref: str) -> str:
        if ref.strip().isdigit():
            n = int(ref.strip())
            if 1 <= n <= len(self._last_hits):
                return self._last_hits[n - 1].url
        return ref.strip()

    async def _page(self, url: str) -> Page | None:
        """The page from the provider; where it has none (a live search service: the gateway
        fetches no pages), a result of this response's searches as the search described it."""
        if not in_domains(url, self.domains):
            return None
        try:
            page = await self.provider.page(url)
        except SearchUnavailable:
            page = None
        hit = self._hits.get(url)
        if page is None and hit is not None:
            page = Page(hit.url, hit.title, (hit.snippet or "(no summary)") + "\n\n(The search "
                        "result's summary: this page's full text is not available.)")
        return page

    async def _open(self, args: dict[str, Any]) -> ToolOutcome:
        url = self._target(str(args.get("id", args.get("url", ""))))
        action = {"type": "open_page", "url": url}
        page = await self._page(url) if url else None
        if page is None:
            return ToolOutcome("", f"No page {url!r} is available; open a URL from the search results.",
                               {"action": action})
        self._last_page = page
        self.shown.setdefault(page.url, page.title)
        text = f"URL: {page.url}\nTitle: {page.title}\n\n{page.text}"
        return ToolOutcome(clip(text, self.max_output_chars), None, {"action": action})

    async def _find(self, args: dict[str, Any]) -> ToolOutcome:
        pattern = str(args.get("pattern", ""))
        ref = args.get("url")
        page = await self._page(self._target(str(ref))) if ref else self._last_page
        url = page.url if page is not None else str(ref or "")
        action = {"type": "find_in_page", "url": url, "pattern": pattern}
        if page is None or not pattern:
            return ToolOutcome("", "find needs a pattern and an opened page (or its url).",
                               {"action": action})
        needle = re.compile(re.escape(pattern), re.IGNORECASE)
        found = [f"L{n}: {line}" for n, line in enumerate(page.text.splitlines()) if needle.search(line)]
        text = (f"{len(found)} lines of {page.url} contain {pattern!r}:\n" + "\n".join(found[:_MAX_FIND])
                if found else f"{pattern!r} is not on {page.url}.")
        return ToolOutcome(clip(text, self.max_output_chars), None, {"action": action})

    async def aclose(self) -> None:
        return None


def citations(text: str, shown: Mapping[str, str]) -> list[dict[str, Any]]:
    """``url_citation`` annotations for every source URL the answer ``text`` names."""
    out: list[dict[str, Any]] = []
    for url, title in shown.items():
        start = text.find(url)
        while start >= 0:
            out.append({"type": "url_citation", "url": url, "title": title,
                        "start_index": start, "end_index": start + len(url)})
            start = text.find(url, start + len(url))
    return sorted(out, key=lambda a: int(a["start_index"]))


