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
* ``web_fetch_20250910`` (name ``web_fetch``) → the gateway's URL fetcher under ``[media]``
  (:mod:`app.api.messages.web_fetch`: the operator's SSRF allow-list, the tool's domain
  filters, only URLs the conversation shows); ``max_uses`` bounds its fetches.
* ``code_execution_20250825`` (name ``code_execution``) → the same sandbox, as its two sub-tools
  ``bash_code_execution`` and ``text_editor_code_execution`` (:mod:`app.api.messages.code_tools`);
  ``max_uses`` bounds their calls together.
* Any other versioned tool type (later ``web_fetch_*`` and ``code_execution_*`` versions,
  ``computer_*``, ...) and a server tool whose provider the operator did not configure: a 400
  ``invalid_request_error`` naming the tool (``tools[i].type``) and the versions this gateway
  runs.  Policy, and
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

from app.api.messages import code_tools, web_fetch
from app.config import MediaSettings, ToolSettings
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

WEB_SEARCH, CODE_EXECUTION, WEB_FETCH = "web_search", "code_execution", web_fetch.NAME
SHELL = "code_execution_20250825"  # the kind of code execution with bash and the text editor
BASH, EDITOR = code_tools.BASH, code_tools.EDITOR
CODE_TYPES = ("code_execution_20250522",)
MAX_DOMAINS = 100
MAX_USES_EXCEEDED = "max_uses_exceeded"
SUPPORTED = ", ".join(("web_search_*", *CODE_TYPES, *code_tools.TYPES, *web_fetch.TYPES))


def server_tools(tools: Sequence[wire.Tool | wire.ServerTool] | None) -> list[tuple[int, wire.ServerTool]]:
    return [(i, t) for i, t in enumerate(tools or []) if isinstance(t, wire.ServerTool)]


def kind_of(tool: wire.ServerTool, where: str) -> str:
    """``web_search`` / ``code_execution``, or a 400 naming a type this gateway does not run."""
    if tool.type.startswith("web_search_"):
        kind = WEB_SEARCH
    elif tool.type in CODE_TYPES:
        kind = CODE_EXECUTION
    elif tool.type in web_fetch.TYPES:
        kind = WEB_FETCH
    elif tool.type in code_tools.TYPES:
        kind = SHELL
    else:
        raise InvalidRequest(f"{where}: the server tool {tool.type!r} ({tool.name!r}) is not available "
                             f"on this gateway; it runs {SUPPORTED} (when its operator configured "
                             "them). Leave the tool out or use one of those versions.", param=f"{where}.type")
    name = CODE_EXECUTION if kind == SHELL else kind
    if tool.name != name:
        raise InvalidRequest(f"{where}.name must be {name!r} for a {tool.type} tool.", param=f"{where}.name")
    return kind


def functions_of(tools: Sequence[wire.Tool | wire.ServerTool] | None) -> tuple[FunctionTool, ...]:
    """What the model is shown for the request's server tools (the same as when they run)."""
    out: list[FunctionTool] = []
    for i, t in server_tools(tools):
        kind = kind_of(t, f"tools[{i}]")
        out += (web.FUNCTIONS if kind == WEB_SEARCH else (web_fetch.FUNCTION,) if kind == WEB_FETCH
                else code_tools.FUNCTIONS if kind == SHELL else code.FUNCTIONS)
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
                      search: SearchProvider | None, sandbox: Sandbox | None,
                      media: MediaSettings | None = None, context: str = "") -> ServerTools | None:
    """The toolbox of the request's server tools; None without any; a 400 for a tool this
    gateway cannot run (the module docstring).  ``media``: the fetcher's settings (web fetch);
    ``context``: the conversation's text, where a fetched URL must appear."""
    boxes: list[Toolbox] = []
    names: dict[str, str] = {}
    browser: WebSearchToolbox | None = None
    kinds: set[str] = set()
    for i, t in server_tools(tools):
        where = f"tools[{i}]"
        kind = kind_of(t, where)
        label = CODE_EXECUTION if kind == SHELL else kind
        if label in kinds:
            raise InvalidRequest(f"{where}.type: offer {label} once.", param=f"{where}.type")
        kinds.add(label)
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
        elif kind == WEB_FETCH:
            web_fetch.check_media(media := media or MediaSettings(), where, t.type)
            allowed = _domains(t.allowed_domains, f"{where}.allowed_domains")
            blocked = _domains(t.blocked_domains, f"{where}.blocked_domains")
            if allowed and blocked:
                raise InvalidRequest(f"{where}: use either allowed_domains or blocked_domains, not both.",
                                     param=f"{where}.blocked_domains")
            fetcher = web_fetch.WebFetchToolbox(media, context, allowed, blocked)
            boxes.append(_Capped(fetcher, frozenset({web_fetch.NAME}), t.max_uses))
            names[web_fetch.NAME] = WEB_FETCH
        else:
            if sandbox is None:
                raise InvalidRequest(f"{where}: the server tool {t.type!r} (code_execution) is not "
                                     "available: this gateway's operator configured no sandbox "
                                     "([tools.code_interpreter]). Leave the tool out.",
                                     param=f"{where}.type")
            box = CodeToolbox(sandbox, random_id("cntr_"), settings.max_output_chars)
            if kind == SHELL:
                shell = code_tools.SandboxShellToolbox(box, settings.max_output_chars)
                boxes.append(_Capped(shell, frozenset({BASH, EDITOR}), t.max_uses))
                names.update({BASH: BASH, EDITOR: EDITOR})
                continue
            boxes.append(_Capped(box, frozenset({code.NAME}), t.max_uses))
            names.update({f.name: CODE_EXECUTION for f in box.functions})
    if not boxes:
        return None
    return ServerTools(Toolboxes(boxes), names, browser)
