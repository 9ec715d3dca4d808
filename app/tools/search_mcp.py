"""An MCP server as the web search provider (``[tools.web_search] mcp_server``): any server
that offers a search tool (``mcp_search_tool``, called with ``{"query": ...}``) and optionally
a page tool (``mcp_open_tool``, called with ``{"url": ...}``).

The server answers in text of its own making, so hits are read from it generically: every
distinct ``http(s)`` URL, in order, is a hit; its title is the text before it on its line (or
the line before), its snippet the line after.  The gateway never fetches those URLs itself:
a page is what the server's page tool returns.  A session is opened per call (a provider is
shared by every response; the MCP SDK's sessions belong to one task).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from app.tools.mcp import McpServer, McpSession, ToolServerUnavailable
from app.tools.search import Hit, Page, SearchUnavailable, in_domains

_URL = re.compile(r"https?://[^\s<>\"'()\[\]{}]+")
_DECOR = re.compile(r"^[\s\-*#>\d.)\]|:—–]+|[\s\-*#>|:(\[—–]+$")


def hits_of(text: str) -> list[Hit]:
    """The hits in a search tool's text (see the module docstring)."""
    lines = text.splitlines()
    seen: dict[str, Hit] = {}
    for n, line in enumerate(lines):
        for match in _URL.finditer(line):
            url = match.group(0).rstrip(".,;:")
            if url in seen:
                continue
            title = _DECOR.sub("", line[:match.start()]).strip().removeprefix("URL").strip(" :")
            if not title and n > 0:
                title = _DECOR.sub("", lines[n - 1]).strip()
            after = next((x.strip() for x in lines[n + 1:n + 3] if x.strip() and not _URL.search(x)), "")
            seen[url] = Hit(url, title or url, after[:300])
    return list(seen.values())


class McpSearch:
    """A :class:`~app.tools.search.SearchProvider` over an MCP server's tools."""

    def __init__(self, server: McpServer, search_tool: str, open_tool: str | None = None, *,
                 external: bool = True, connect_timeout: float = 10.0, call_timeout: float = 60.0,
                 max_output_chars: int = 32_768) -> None:
        self.server, self.search_tool, self.open_tool = server, search_tool, open_tool
        self.external = external
        self._connect, self._call, self._max = connect_timeout, call_timeout, max_output_chars

    async def _run(self, tool: str, arguments: dict[str, str]) -> str | None:
        session = McpSession(self.server, connect_timeout=self._connect, max_output_chars=self._max)
        try:
            await session.open()
            outcome = await session.call(tool, arguments, self._call)
        except ToolServerUnavailable as exc:  # the search's failure, not the response's
            raise SearchUnavailable(str(exc)) from None
        finally:
            await session.aclose()
        return None if outcome.error else outcome.output

    async def search(self, query: str, *, limit: int, domains: Sequence[str] = ()) -> list[Hit]:
        text = await self._run(self.search_tool, {"query": query})
        hits = [h for h in hits_of(text or "") if in_domains(h.url, domains)]
        return hits[:limit]

    async def page(self, url: str) -> Page | None:
        if self.open_tool is None:
            return None
        text = await self._run(self.open_tool, {"url": url})
        return None if not text else Page(url, url, text)
