"""The ``web_search`` hosted tool: a browser the model drives, over a :mod:`search provider
<app.tools.search>`.

The model is shown three functions in namespace ``browser``; on Harmony (gpt-oss) they are
its built-in ``browser`` tool, shown in the system message exactly as openai-harmony renders
it, and the model calls ``browser.search`` / ``browser.open`` / ``browser.find`` (the extra
arguments ``source`` and ``view_source`` are accepted and ignored).  Every call shows a
display with a cursor, as gpt-oss's browser does (:mod:`app.tools.browser`):

* ``search(query, topn?)`` → a results page: each hit a link ``【id†title†domain】`` and its
  snippet;
* ``open(id?, cursor?, loc?, num_lines?)`` → a page's numbered lines: ``id`` is a link of the
  page at ``cursor`` (default: the last display) or a URL; without ``id`` it scrolls;
* ``find(pattern, cursor?, url?)`` → the matches on a page, each a link to its line.

Each call is one ``web_search_call`` item whose ``action`` is ``search`` (with the result
URLs as ``sources``), ``open_page`` or ``find_in_page``; :func:`action_of` gives the action
from the arguments alone (the item is announced before it runs), the outcome's
``detail["action"]`` the final one.  One :class:`WebSearchToolbox` per response keeps the
displays (for cursors, links and citations) and the URLs it showed (an answer naming one is
cited too).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.core.conversation import FunctionTool
from app.tools.base import ToolOutcome, clip
from app.tools.browser import Browser, Display, find_display, results_display, wrap
from app.tools.search import Hit, Page, SearchProvider, SearchUnavailable, in_domains

NAMESPACE = "browser"
SEARCH, OPEN, FIND = (f"{NAMESPACE}__{n}" for n in ("search", "open", "find"))
RESULTS = {"low": 3, "medium": 5, "high": 8}  # search_context_size → results per search

FUNCTIONS = (
    FunctionTool(SEARCH, "Search the web. Shows the results as links 【id†title†domain】.",
                 {"type": "object", "properties": {
                     "query": {"type": "string", "description": "What to search for."},
                     "topn": {"type": "integer", "description": "How many results (at most 10)."}},
                  "required": ["query"]}, False, NAMESPACE, NAMESPACE),
    FunctionTool(OPEN, "Open a link: the number id of a link 【id†...】 of the page at cursor (default: the "
                       "last one), or a URL. Without id, scrolls the page at cursor to line loc.",
                 {"type": "object", "properties": {
                     "id": {"type": ["integer", "string"], "description": "A link's id, or a URL."},
                     "cursor": {"type": "integer"}, "loc": {"type": "integer"},
                     "num_lines": {"type": "integer"}}},
                 False, NAMESPACE, NAMESPACE),
    FunctionTool(FIND, "Find the lines of a page that contain a pattern (the page at cursor, or at url; "
                       "default: the last page).",
                 {"type": "object", "properties": {
                     "pattern": {"type": "string"}, "cursor": {"type": "integer"}, "url": {"type": "string"}},
                  "required": ["pattern"]}, False, NAMESPACE, NAMESPACE),
)


def _args(arguments: str) -> dict[str, Any] | None:
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _int(value: Any, default: int = -1) -> int:
    """A number the model gave (JSON numbers, or digits in a string); ``default`` otherwise."""
    if isinstance(value, bool):
        return default
    if isinstance(value, int | float) and abs(value) < 1 << 31:
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit() and len(value) < 10:
        return int(value)
    return default


def action_of(name: str, arguments: str) -> dict[str, Any]:
    """The ``action`` of a ``web_search_call`` from the model's arguments (before it runs)."""
    args = _args(arguments) or {}
    if name == SEARCH:
        return {"type": "search", "query": str(args.get("query", ""))}
    if name == OPEN:
        target = args.get("id")
        return {"type": "open_page", "url": target} if isinstance(target, str) and _int(target) < 0 \
            else {"type": "open_page"}
    return {"type": "find_in_page", "url": str(args.get("url", "")), "pattern": str(args.get("pattern", ""))}


@dataclass
class WebSearchToolbox:
    """``web_search`` for one response (a :class:`~app.tools.base.Toolbox`)."""

    provider: SearchProvider
    results: int = 5  # per search, from search_context_size
    domains: tuple[str, ...] = ()  # filters.allowed_domains
    max_output_chars: int = 32_768
    browser: Browser = field(default_factory=Browser)  # the displays, by cursor
    functions: tuple[FunctionTool, ...] = FUNCTIONS
    shown: dict[str, str] = field(default_factory=dict)  # URL → title, every source the model saw
    _hits: dict[str, Hit] = field(default_factory=dict)  # URL → every hit this response's searches gave

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

    def _show(self, display: Display, action: dict[str, Any], loc: int = 0,
              num_lines: int = -1) -> ToolOutcome:
        cursor = self.browser.push(display)
        text = display.view(cursor, loc, num_lines, self.max_output_chars)
        return ToolOutcome(clip(text, self.max_output_chars), None, {"action": action})

    async def _search(self, args: dict[str, Any]) -> ToolOutcome:
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            return ToolOutcome("", "search needs a non-empty query.", {"action": {"type": "search"}})
        topn = _int(args.get("topn"))
        limit = min(topn, 10) if topn > 0 else self.results
        try:
            hits = await self.provider.search(query, limit=limit, domains=self.domains)
        except SearchUnavailable as exc:
            return ToolOutcome("", str(exc), {"action": {"type": "search", "query": query}})
        for hit in hits:
            self.shown.setdefault(hit.url, hit.title)
            self._hits.setdefault(hit.url, hit)
        action = {"type": "search", "query": query,
                  "sources": [{"type": "url", "url": hit.url} for hit in hits]}
        return self._show(results_display(query, hits), action)

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

    async def _display(self, url: str) -> Display | None:
        page = await self._page(url) if url else None
        if page is None:
            return None
        self.shown.setdefault(page.url, page.title)
        lines = await asyncio.to_thread(wrap, page.text) if len(page.text) > 32_768 else wrap(page.text)
        return Display(page.title, page.url, tuple(lines))

    async def _open(self, args: dict[str, Any]) -> ToolOutcome:
        target, cursor = args.get("id", args.get("url")), _int(args.get("cursor"))
        loc, num_lines = _int(args.get("loc")), _int(args.get("num_lines"))
        link = _int(target)
        if isinstance(target, str) and link < 0 and target.strip():  # a URL
            url = target.strip()
            display = await self._display(url)
        else:
            at = self.browser.at(cursor)
            if at is None:
                return ToolOutcome("", f"No page at cursor {cursor}; search first, or open a URL.",
                                   {"action": {"type": "open_page"}})
            if link < 0:  # no id: scroll the page at cursor
                return self._show(at, {"type": "open_page", "url": at.url}, max(loc, 0), num_lines)
            url = at.links.get(link, "")
            if not url:
                return ToolOutcome("", f"There is no link {link} on the page at cursor {cursor}.",
                                   {"action": {"type": "open_page"}})
            display = self.browser_page(url) or await self._display(url)
            anchor = at.anchors.get(link)
            if anchor is not None and loc < 0:  # a find match: open a little above its line
                loc = max(anchor - 4, 0)
        action = {"type": "open_page", "url": url}
        if display is None:
            return ToolOutcome("", f"No page {url!r} is available; open a URL from the search results.",
                               {"action": action})
        return self._show(display, action, max(loc, 0), num_lines)

    def hit(self, url: str) -> Hit | None:
        """The search result of ``url`` this response's searches gave, if any."""
        return self._hits.get(url)

    def browser_page(self, url: str) -> Display | None:
        """The latest page display of ``url`` this response showed."""
        return next((d for d in reversed(self.browser.displays) if d.kind == "page" and d.url == url), None)

    async def _find(self, args: dict[str, Any]) -> ToolOutcome:
        pattern = str(args.get("pattern", ""))
        ref = args.get("url")
        if isinstance(ref, str) and ref.strip():
            page = self.browser_page(ref.strip()) or await self._display(ref.strip())
        else:
            at = self.browser.at(_int(args.get("cursor")))
            page = at if at is not None and at.kind == "page" else None
            if at is not None and page is None:
                return ToolOutcome("", "find works on an opened page, not on search or find results; "
                                   "open a page first.",
                                   {"action": {"type": "find_in_page", "pattern": pattern}})
        url = page.url if page is not None else str(ref or "")
        action = {"type": "find_in_page", "url": url, "pattern": pattern}
        if page is None or not pattern:
            return ToolOutcome("", "find needs a pattern and an opened page (or its url).",
                               {"action": action})
        return self._show(find_display(page, pattern), action)

    def citations(self, text: str) -> list[dict[str, Any]]:
        """The answer's annotations: its ``【cursor†L…】`` citations and the source URLs it names."""
        return sorted([*self.browser.citations(text), *citations(text, self.shown)],
                      key=lambda a: int(a["start_index"]))

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
