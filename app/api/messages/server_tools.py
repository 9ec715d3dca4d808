"""Anthropic's server tools on the Messages API, run by the gateway's own hosted tools.

* ``web_search_YYYYMMDD`` (name ``web_search``; Claude Code's ``WebSearch`` sends
  ``web_search_20250305``) → the search provider of ``[tools.web_search]``
  (:class:`~app.tools.web.WebSearchToolbox`, the browser Responses' ``web_search`` shows the
  model).  ``allowed_domains`` bounds what is searched and opened; ``blocked_domains`` is
  applied to every hit and page (:class:`_Blocked`); the two together are a 400, as on
  Anthropic's API.  ``max_uses`` bounds the searches: a search beyond it is not run and the
  model reads ``max_uses_exceeded`` (Anthropic's error code), then goes on.
* ``code_execution_20250522`` (name ``code_execution``) → the sandbox of
  ``[tools.code_interpreter]`` (:class:`~app.tools.code.CodeToolbox`, a fresh container per
  message); ``max_uses`` bounds its runs the same way.
* Any other versioned tool type (``web_fetch_*``, ``code_execution_20250825``'s bash and
  editor tools, ``computer_*``, ...) and a server tool whose provider the operator did not
  configure: a 400 ``invalid_request_error`` naming the tool (``tools[i].type``).  Policy, and
  why: dropping the tool would let the model answer from memory as if it had searched; a 400
  is what Anthropic's API answers for a server tool an organisation may not use, and Claude
  Code sends server tools only in the side request of its ``WebSearch`` tool, whose failure
  becomes that tool's error result — the session goes on.

:func:`open_server_tools` gives the toolbox the engine's agentic loop runs (the one loop of
:mod:`app.engine.loop`, no second pipeline) and the map from each model-facing function to
its server tool's name, which the encoder (:mod:`app.api.messages.server_blocks`) needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from app.config import ToolSettings
from app.core.conversation import FunctionTool
from app.core.errors import InvalidRequest
from app.core.ids import random_id
from app.tools import code, web
from app.tools.base import Toolbox, Toolboxes, ToolOutcome
from app.tools.browser import Browser
from app.tools.code import CodeToolbox, Sandbox
from app.tools.search import Hit, Page, SearchProvider, in_domains
from app.tools.web import WebSearchToolbox
from schemas import messages as wire

WEB_SEARCH, CODE_EXECUTION = "web_search", "code_execution"
CODE_TYPES = ("code_execution_20250522",)
MAX_DOMAINS = 100
MAX_USES_EXCEEDED = "max_uses_exceeded"


def server_tools(tools: Sequence[wire.Tool | wire.ServerTool] | None) -> list[tuple[int, wire.ServerTool]]:
    return [(i, t) for i, t in enumerate(tools or []) if isinstance(t, wire.ServerTool)]


def kind_of(tool: wire.ServerTool, where: str) -> str:
    """``web_search`` / ``code_execution``, or a 400 naming a type this gateway does not run."""
    if tool.type.startswith("web_search_"):
        kind = WEB_SEARCH
    elif tool.type in CODE_TYPES:
        kind = CODE_EXECUTION
    else:
        raise InvalidRequest(f"{where}: the server tool {tool.type!r} ({tool.name!r}) is not available "
                             "on this gateway; it runs web_search_* and code_execution_20250522 (when "
                             "its operator configured them). Leave the tool out.", param=f"{where}.type")
    if tool.name != kind:
        raise InvalidRequest(f"{where}.name must be {kind!r} for a {tool.type} tool.", param=f"{where}.name")
    return kind


def functions_of(tools: Sequence[wire.Tool | wire.ServerTool] | None) -> tuple[FunctionTool, ...]:
    """What the model is shown for the request's server tools (the same as when they run)."""
    out: list[FunctionTool] = []
    for i, t in server_tools(tools):
        out += web.FUNCTIONS if kind_of(t, f"tools[{i}]") == WEB_SEARCH else code.FUNCTIONS
    return tuple(out)


@dataclass
class _Blocked:
    """A search provider without the hits and pages of ``blocked`` domains."""

    inner: SearchProvider
    blocked: tuple[str, ...]
    external: bool = field(init=False)

    def __post_init__(self) -> None:
        self.external = self.inner.external

    async def search(self, query: str, *, limit: int, domains: Sequence[str] = ()) -> list[Hit]:
        hits = await self.inner.search(query, limit=limit * 2, domains=domains)
        return [h for h in hits if not in_domains(h.url, self.blocked)][:limit]

    async def page(self, url: str) -> Page | None:
        return None if in_domains(url, self.blocked) else await self.inner.page(url)


@dataclass
class _Capped:
    """A toolbox whose ``counted`` functions run at most ``max_uses`` times (``None``: no bound);
    ``used`` counts the calls run."""

    inner: Toolbox
    counted: frozenset[str]
    max_uses: int | None
    used: int = 0
    functions: tuple[FunctionTool, ...] = field(init=False)

    def __post_init__(self) -> None:
        self.functions = self.inner.functions

    def owns(self, name: str) -> bool:
        return self.inner.owns(name)

    def needs_approval(self, name: str) -> bool:
        return False

    async def call(self, name: str, arguments: str) -> ToolOutcome:
        if name in self.counted:
            if self.max_uses is not None and self.used >= self.max_uses:
                return ToolOutcome("", f"Not run: this tool may be used at most {self.max_uses} times "
                                   "in this request.", {"error_code": MAX_USES_EXCEEDED})
            self.used += 1
        return await self.inner.call(name, arguments)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _domains(value: list[str] | None, param: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if len(value) > MAX_DOMAINS or not all(d.strip() for d in value):
        raise InvalidRequest(f"{param} takes up to {MAX_DOMAINS} non-empty domains.", param=param)
    return tuple(value)


@dataclass
class ServerTools:
    """The request's server tools, opened: the toolbox, model-facing name → server tool name,
    and the web search (titles and snippets of its results)."""

    toolbox: Toolbox
    names: dict[str, str]
    browser: WebSearchToolbox | None = None


def open_server_tools(tools: Sequence[wire.Tool | wire.ServerTool] | None, settings: ToolSettings,
                      search: SearchProvider | None, sandbox: Sandbox | None) -> ServerTools | None:
    """The toolbox of the request's server tools; None without any; a 400 for a tool this
    gateway cannot run (the module docstring)."""
    boxes: list[Toolbox] = []
    names: dict[str, str] = {}
    browser: WebSearchToolbox | None = None
    for i, t in server_tools(tools):
        where = f"tools[{i}]"
        kind = kind_of(t, where)
        if kind in names.values():
            raise InvalidRequest(f"{where}.type: offer {kind} once.", param=f"{where}.type")
        if kind == WEB_SEARCH:
            if search is None:
                raise InvalidRequest(f"{where}: the server tool {t.type!r} (web_search) is not available: "
                                     "this gateway's operator configured no search provider "
                                     "([tools.web_search]). Leave the tool out.", param=f"{where}.type")
            allowed = _domains(t.allowed_domains, f"{where}.allowed_domains")
            blocked = _domains(t.blocked_domains, f"{where}.blocked_domains")
            if allowed and blocked:
                raise InvalidRequest(f"{where}: use either allowed_domains or blocked_domains, not both.",
                                     param=f"{where}.blocked_domains")
            provider: SearchProvider = _Blocked(search, blocked) if blocked else search
            browser = WebSearchToolbox(provider, web.RESULTS["medium"], allowed, settings.max_output_chars,
                                       Browser())
            boxes.append(_Capped(browser, frozenset({web.SEARCH}), t.max_uses))
            names.update({f.name: WEB_SEARCH for f in browser.functions})
        else:
            if sandbox is None:
                raise InvalidRequest(f"{where}: the server tool {t.type!r} (code_execution) is not "
                                     "available: this gateway's operator configured no sandbox "
                                     "([tools.code_interpreter]). Leave the tool out.",
                                     param=f"{where}.type")
            box = CodeToolbox(sandbox, random_id("cntr_"), settings.max_output_chars)
            boxes.append(_Capped(box, frozenset({code.NAME}), t.max_uses))
            names.update({f.name: CODE_EXECUTION for f in box.functions})
    if not boxes:
        return None
    return ServerTools(Toolboxes(boxes), names, browser)
