"""The server-tool part of :class:`~app.api.messages.encode.MessagesEncoder`: a call of a
tool the gateway ran (:mod:`app.api.messages.server_tools`) becomes Anthropic's blocks.

* the call → a ``server_tool_use`` block named for its server tool (``web_search``,
  ``code_execution``) whose ``input`` is Anthropic's (``{"query"}`` for a search, ``{"code"}``
  for a run; a page the model opened or searched in keeps the model's own arguments);
* its result → a ``web_search_tool_result`` (one ``web_search_result`` per source the call
  showed: ``url``, ``title``, and ``encrypted_content``, the gateway's sealed copy of what the
  search said of the page, re-read when the block comes back) or a
  ``code_execution_tool_result`` (``stdout``, ``stderr`` = the run's error, ``return_code``);
  a failed call is the block's error object (``max_uses_exceeded``, else ``unavailable``);
* ``code_execution_20250825``'s calls (:mod:`app.api.messages.code_tools`) → ``server_tool_use``
  named ``bash_code_execution`` / ``text_editor_code_execution`` with the model's input, the
  result a ``bash_code_execution_tool_result`` / ``text_editor_code_execution_tool_result``
  holding the record the sandbox run printed (a call past ``max_uses``: ``too_many_requests``);
* a fetch (:mod:`app.api.messages.web_fetch`) → ``server_tool_use`` ``web_fetch`` with
  ``{"url"}``, its result a ``web_fetch_tool_result`` holding a ``web_fetch_result`` (``url``,
  ``retrieved_at``, the text as a plain-text ``document`` with the page's ``title``) or
  ``web_fetch_tool_result_error`` with the fetcher's ``error_code``;
* ``usage.server_tool_use.web_search_requests`` / ``web_fetch_requests``: the searches and
  fetches that ran;
* a call of an ``mcp_servers`` tool (:mod:`app.api.messages.mcp`) → an ``mcp_tool_use`` block
  (``name``, ``server_name``, ``input``), its result an ``mcp_tool_result`` (``is_error``,
  the tool's text).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson

from app.api.messages.server_tools import (
    BASH,
    CODE_EXECUTION,
    EDITOR,
    MAX_USES_EXCEEDED,
    WEB_FETCH,
    WEB_SEARCH,
)
from app.core import events as ev
from app.tools import code, web
from app.tools.web import WebSearchToolbox

Json = dict[str, Any]


class ServerBlocks:
    def __init__(self, names: Mapping[str, str], seal: Callable[[str], str],
                 browser: WebSearchToolbox | None = None,
                 mcp: Mapping[str, tuple[str, str]] | None = None) -> None:
        """``names``: model-facing function → server tool name; ``mcp``: model-facing
        function → (MCP server name, its tool); ``seal`` seals text."""
        self.mcp = dict(mcp or {})
        self.names = {**names, **{n: "mcp" for n in self.mcp}}
        self._seal = seal
        self._browser = browser
        self._calls: dict[str, str] = {}  # call id → the model-facing function
        self.searches = 0
        self.fetches = 0

    def started(self, call_id: str, name: str) -> str:
        self._calls[call_id] = name
        return self.names[name]

    def input_of(self, name: str, arguments: str) -> Json:
        if name == code.NAME and name not in self.mcp:
            return {"code": code.code_of(arguments)}
        try:
            args = orjson.loads(arguments) if arguments.strip() else {}
        except orjson.JSONDecodeError:
            return {}
        if not isinstance(args, dict):
            return {}
        if name == web.SEARCH and name not in self.mcp:
            return {"query": str(args.get("query", ""))}
        return args

    def usage(self) -> Json:
        return {"web_search_requests": self.searches, "web_fetch_requests": self.fetches}

    def result(self, event: ev.HostedCallDone) -> Json | None:
        """The result block of a call of a server tool, or None for another call."""
        name = self._calls.pop(event.call_id, None)
        if name is None:
            return None
        detail = event.detail or {}
        kind = self.names[name]
        failed = event.error is not None
        if name in self.mcp:
            text = event.output if not failed else event.output or str(event.error)
            return {"type": "mcp_tool_result", "tool_use_id": event.call_id, "is_error": failed,
                    "content": [{"type": "text", "text": text}]}
        if kind == CODE_EXECUTION:
            content: Any = ({"type": "code_execution_result", "stdout": event.output,
                             "stderr": event.error or "", "return_code": 1 if failed else 0, "content": []}
                            if detail.get("error_code") is None else
                            {"type": "code_execution_tool_result_error", "error_code": "unavailable"})
            return {"type": "code_execution_tool_result", "tool_use_id": event.call_id, "content": content}
        if kind in (BASH, EDITOR):  # code_execution_20250825's sub-tools
            result = detail.get("result")
            if not isinstance(result, dict):  # not run: max_uses
                capped = detail.get("error_code") == MAX_USES_EXCEEDED
                code_ = "too_many_requests" if capped else "unavailable"
                result = {"type": f"{kind}_tool_result_error", "error_code": code_}
            return {"type": f"{kind}_tool_result", "tool_use_id": event.call_id, "content": result}
        if kind == WEB_FETCH:
            return {"type": "web_fetch_tool_result", "tool_use_id": event.call_id,
                    "content": self._fetched(event, detail)}
        assert kind == WEB_SEARCH
        if failed:
            code_ = MAX_USES_EXCEEDED if detail.get("error_code") == MAX_USES_EXCEEDED else "unavailable"
            content = {"type": "web_search_tool_result_error", "error_code": code_}
        else:
            if name == web.SEARCH and name not in self.mcp:
                self.searches += 1
            content = [self._source(url) for url in _urls(detail.get("action"))]
        return {"type": "web_search_tool_result", "tool_use_id": event.call_id, "content": content}

    def _fetched(self, event: ev.HostedCallDone, detail: Any) -> Json:
        """A ``web_fetch_result`` (the page's text as a plain-text document), or the error."""
        if event.error is not None:
            code_ = detail.get("error_code")
            return {"type": "web_fetch_tool_result_error",
                    "error_code": code_ if isinstance(code_, str) else "unavailable"}
        self.fetches += 1
        return {"type": "web_fetch_result", "url": str(detail.get("url", "")),
                "retrieved_at": detail.get("retrieved_at"),
                "content": {"type": "document", "title": detail.get("title") or None, "citations": None,
                            "source": {"type": "text", "media_type": "text/plain", "data": event.output}}}

    def _source(self, url: str) -> Json:
        browser = self._browser
        hit = browser.hit(url) if browser is not None else None
        title = hit.title if hit is not None else (browser.shown.get(url, "") if browser else "")
        return {"type": "web_search_result", "url": url, "title": title,
                "encrypted_content": self._seal(hit.snippet if hit is not None else title),
                "page_age": None}


def _urls(action: Any) -> list[str]:
    if not isinstance(action, dict):
        return []
    sources = action.get("sources")
    if isinstance(sources, list):
        return [str(s["url"]) for s in sources if isinstance(s, dict) and isinstance(s.get("url"), str)]
    url = action.get("url")
    return [url] if isinstance(url, str) and url else []
