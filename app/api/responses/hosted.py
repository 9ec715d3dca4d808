"""A request's hosted tools as one toolbox for the engine's agentic loop.

``{"type": "web_search"}`` (when the operator configured a provider) becomes a
:class:`~app.tools.web.WebSearchToolbox`: ``search_context_size`` sets the results per
search (3 / 5 / 8), ``filters.allowed_domains`` the domains searched and opened;
``user_location`` is accepted and not used (the offline index has no locality).
``{"type": "code_interpreter", "container": {"type": "auto"}}`` (when the operator configured
the sandbox) becomes a :class:`~app.tools.code.CodeToolbox` with a fresh container.
``{"type": "file_search", "vector_store_ids": [...], "max_num_results", "filters",
"ranking_options"}`` (when the gateway has vector stores) becomes a
:class:`~app.tools.file_search.FileSearchToolbox` over the caller's stores: its options are
checked here (a 400 naming them), and, when the knowledge facade can check a search
(:class:`~app.tools.file_search.SearchCheck`), so are the stores (another key's store is a 404
exactly like a missing one) and the filters, before any output.

``{"type": "mcp", ...}`` tools become :class:`~app.tools.mcp.McpServer` s: a ``server_label``
the operator configured (``[tools.mcp.servers.LABEL]``: its URL and headers, never shown to
clients), or a ``server_url`` the operator allows (:mod:`app.tools.egress`; by default none).
A request offers at most ``[tools.mcp] max_tools_per_request`` of them, every entry counted
(a 400 before any store lookup, name resolution or connection).  Tools naming one server (URL,
headers, allow-list) share one session and one listing; sessions open concurrently
(``OPENING`` at a time: the SDK's handshakes of twenty servers at once held the event loop
50-100 ms) while the request is planned; a server that cannot be reached is a 424 before any
output.  ``mcp_list_tools`` items are emitted once per server and conversation: a label
already listed in the context is not listed again in the output.

Approval: ``require_approval`` (default ``always``, as OpenAI) decides per tool whether a call
is run or returned as an ``mcp_approval_request``; an ``mcp_approval_response`` in the input
that approves one which has not run yet makes it the first thing the next response runs.

What the tools need of the context (approvals, servers listed, earlier searches) comes read in
one pass (:class:`~app.api.responses.hosted_context.HostedContext`): nothing here walks it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from app.api.responses.hosted_context import HostedContext
from app.api.responses.tools import RequestTools, WireTool
from app.config import ToolSettings
from app.core.conversation import ToolCall
from app.core.errors import GatewayError, InvalidRequest
from app.core.ids import random_id
from app.knowledge.filters import parse as parse_filters
from app.knowledge.ranking import parse_ranking_options
from app.tools import egress, file_search, web
from app.tools.base import Toolbox, Toolboxes
from app.tools.browser import Browser, earlier_cursors
from app.tools.code import CodeToolbox, Sandbox
from app.tools.file_search import FileSearchToolbox, SearchCheck, VectorSearch
from app.tools.mcp import ListedTool, McpServer, McpSession, McpToolbox, model_name
from app.tools.search import SearchProvider
from app.tools.web import WebSearchToolbox
from schemas import responses as wire

Json = dict[str, Any]
OPENING = 4  # sessions of one request that connect and list at once


@dataclass
class Hosted:
    """What the service needs: the toolbox, the encoder's view of its tools, the list items to
    emit, the approved calls to run first and the web search (for its citations)."""

    toolbox: Toolbox
    wire: dict[str, WireTool] = field(default_factory=dict)
    list_items: list[Json] = field(default_factory=list)
    approved: tuple[tuple[ToolCall, str], ...] = ()
    browser: WebSearchToolbox | None = None
    container_id: str = ""  # the code interpreter's container, when it is offered
    files: FileSearchToolbox | None = None  # file_search, when it is offered (its citations)

    def citations(self) -> Callable[[str], list[Json]] | None:
        """The annotations of an answer's text, in the order they appear: web search's
        ``url_citation`` s and file search's ``file_citation`` s; None without either tool."""
        boxes = [b.citations for b in (self.browser, self.files) if b is not None]
        if not boxes:
            return None

        def cite(text: str) -> list[Json]:
            notes = [note for box in boxes for note in box(text)]
            return sorted(notes, key=lambda a: int(a.get("start_index", a.get("index", 0))))

        return cite

    def forced(self, choice: Any) -> tuple[str, ...]:
        """The model-facing names a hosted ``tool_choice`` forces."""
        kind = getattr(choice, "type", None)
        if kind == "mcp":
            label = getattr(choice, "server_label", None)
            name = getattr(choice, "name", None)
            return tuple(n for n, t in self.wire.items() if t.kind in ("mcp", "mcp_approval")
                         and t.namespace == label and (name is None or t.name == name))
        wanted = kind if kind in ("code_interpreter", "file_search") else "web_search"
        return tuple(n for n, t in self.wire.items() if t.kind == wanted)


def _web(param: Json, search: SearchProvider, settings: ToolSettings,
         earlier: HostedContext) -> WebSearchToolbox:
    filters = param.get("filters")
    domains = filters.get("allowed_domains") if isinstance(filters, dict) else None
    if domains is not None and (not isinstance(domains, list) or not all(isinstance(d, str) for d in domains)
                                or len(domains) > 100):
        raise InvalidRequest("filters.allowed_domains must be a list of at most 100 domains.",
                             param="tools.filters.allowed_domains")
    size = param.get("search_context_size", "medium")
    if size not in web.RESULTS:
        raise InvalidRequest("search_context_size must be low, medium or high.",
                             param="tools.search_context_size")
    if param.get("external_web_access") is False and search.external:
        raise InvalidRequest("external_web_access is false, and this gateway's search provider is the "
                             "live web.", param="tools.external_web_access")
    return WebSearchToolbox(search, web.RESULTS[size], tuple(domains or ()), settings.max_output_chars,
                            Browser(earlier_cursors(earlier.web_calls)))  # cursors go on after those


def _files(param: Json, where: str, knowledge: VectorSearch, owner: str, settings: ToolSettings,
           earlier: HostedContext) -> FileSearchToolbox:
    ids = param.get("vector_store_ids")
    if ids is None:
        raise InvalidRequest("file_search needs vector_store_ids.", param=f"{where}.vector_store_ids",
                             code="missing_required_parameter")
    if (not isinstance(ids, list) or not 1 <= len(ids) <= file_search.MAX_STORES
            or not all(isinstance(i, str) and 0 < len(i) <= 128 for i in ids)):
        raise InvalidRequest(f"vector_store_ids must be a list of 1 to {file_search.MAX_STORES} vector "
                             "store ids.", param=f"{where}.vector_store_ids")
    limit = param.get("max_num_results", file_search.DEFAULT_RESULTS)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= file_search.MAX_RESULTS:
        raise InvalidRequest(f"max_num_results must be an integer from 1 to {file_search.MAX_RESULTS}.",
                             param=f"{where}.max_num_results")
    filters, ranking = param.get("filters"), param.get("ranking_options")
    if filters is not None:  # checked now (a 400 naming the part), searched as sent
        parse_filters(filters, f"{where}.filters")
    parse_ranking_options(ranking, f"{where}.ranking_options")
    return FileSearchToolbox(knowledge, owner, tuple(dict.fromkeys(ids)), limit, filters, ranking,
                             settings.max_output_chars, file_search.earlier_displays(earlier.file_calls))


def _where(tools: RequestTools) -> str:
    """``tools[i]`` of the request's file_search tool."""
    return f"tools[{next(i for i, e in enumerate(tools.echo) if e is tools.file_search)}]"


async def _check_files(box: FileSearchToolbox, where: str) -> None:
    """The stores and filters checked by the facade, when it can (else the calls find out)."""
    if not isinstance(box.knowledge, SearchCheck):
        return
    try:
        await box.knowledge.check_search(box.owner, box.vector_store_ids, filters=box.filters,
                                         ranking_options=box.ranking_options)
    except GatewayError as exc:  # the facade names its own parameters: name the tool's
        if exc.param is not None and not exc.param.startswith("tools"):
            param = "vector_store_ids[0]" if exc.param == "vector_store_id" else exc.param
            exc.param = f"{where}.{param}"
        raise


def _server(t: wire.McpToolParam, settings: ToolSettings, where: str) -> McpServer:
    if t.connector_id is not None:
        raise InvalidRequest("connector_id names an OpenAI connector; this gateway runs MCP servers "
                             "by server_url or by a label its operator configured.",
                             param=f"{where}.connector_id", code="unsupported_parameter")
    configured = settings.mcp.servers.get(t.server_label)
    allowed_urls: tuple[str, ...] = ()  # the operator's own server: its origin
    headers: dict[str, str] = dict(t.headers or {})
    if t.authorization:
        headers["Authorization"] = f"Bearer {t.authorization}"
    if configured is not None:
        if t.server_url is not None and t.server_url.rstrip("/") != configured.url.rstrip("/"):
            raise InvalidRequest(f"server_label {t.server_label!r} is a server this gateway configures; "
                                 "leave server_url out.", param=f"{where}.server_url")
        url = configured.url
        headers.update(configured.headers)
    elif t.server_url is None:
        raise InvalidRequest(f"No MCP server is configured as {t.server_label!r}; give server_url.",
                             param=f"{where}.server_url", code="missing_required_parameter")
    else:
        url = egress.check(t.server_url, settings.mcp.allowed_urls, f"{where}.server_url")
        allowed_urls = tuple(settings.mcp.allowed_urls)  # every request of its session, again
    allowed = t.allowed_tools
    names = allowed.tool_names if isinstance(allowed, wire.McpToolFilter) else allowed
    approval = t.require_approval  # a per-tool filter: tools it does not name need approval
    default = approval if isinstance(approval, str) else "always"
    if configured is not None and configured.require_approval is not None:
        default = configured.require_approval
    lists = approval if isinstance(approval, wire.McpApprovalFilter) else wire.McpApprovalFilter()
    always = frozenset(lists.always.tool_names if lists.always else ())
    never = frozenset(lists.never.tool_names if lists.never else ())
    return McpServer(t.server_label, url, headers,
                     t.server_description or (configured.description if configured else None),
                     frozenset(names) if names is not None else None, default, always, never,
                     allowed_urls)


def _approved(earlier: HostedContext, toolbox: McpToolbox) -> tuple[tuple[ToolCall, str], ...]:
    """Approval requests in the context that the input approves and that have not run yet."""
    out: list[tuple[ToolCall, str]] = []
    for i, item in earlier.approvals:
        rid = str(item["approval_request_id"])
        req = earlier.requests.get(rid)
        if req is None:
            raise InvalidRequest(f"No mcp_approval_request {rid!r} precedes this approval.",
                                 param=f"input[{i}].approval_request_id")
        if rid in earlier.ran:
            continue
        name = model_name(str(req["server_label"]), str(req["name"]))
        if not toolbox.owns(name):
            raise InvalidRequest(f"The approved tool {req['name']!r} of MCP server {req['server_label']!r} "
                                 "is not among this request's tools.", param="tools")
        out.append((ToolCall(random_id("call_"), name, str(req["arguments"])), rid))
    return tuple(out)


def _local(tools: RequestTools, settings: ToolSettings, search: SearchProvider | None,
           sandbox: Sandbox | None, earlier: HostedContext, knowledge: VectorSearch | None = None,
           owner: str = "") -> tuple[list[Toolbox], dict[str, WireTool], Hosted]:
    """The hosted tools that need no connection: web search, the code interpreter and file
    search (and a :class:`Hosted` holding what the encoder needs of them)."""
    boxes: list[Toolbox] = []
    seen = Hosted(Toolboxes([]))
    wires: dict[str, WireTool] = {}
    searching = _web(tools.web_search, search, settings, earlier) if tools.web_search and search else None
    if searching is not None:
        seen.browser = searching
        boxes.append(searching)
        wires.update({f.name: WireTool("web_search", f.name, web.NAMESPACE) for f in searching.functions})
    if tools.code_interpreter is not None and sandbox is not None:
        box = CodeToolbox(sandbox, random_id("cntr_"), settings.max_output_chars)
        seen.container_id = box.container_id
        boxes.append(box)
        wires.update({f.name: WireTool("code_interpreter", f.name) for f in box.functions})
    if tools.file_search is not None and knowledge is not None:
        files = _files(tools.file_search, _where(tools), knowledge, owner, settings, earlier)
        seen.files = files
        boxes.append(files)
        wires.update({f.name: WireTool("file_search", f.name, file_search.NAMESPACE)
                      for f in files.functions})
    taken = sorted(name for name in wires if name in tools.wire)
    if taken:
        raise InvalidRequest(f"A function of this request has the name of a hosted tool's function "
                             f"({', '.join(taken)}).", param="tools")
    return boxes, wires, seen


def _capped(tools: RequestTools, settings: ToolSettings) -> list[int]:
    """The positions of the ``mcp`` entries in ``tools``, or a 400 when there are more than the
    operator's cap: every entry counts (200 entries naming one URL, or one label, are 200), not
    the distinct servers.  ``web_search``, ``code_interpreter`` and ``file_search`` are offered
    at most once each (:func:`~app.api.responses.tools.request_tools`: a 400 beyond)."""
    positions = [i for i, e in enumerate(tools.echo) if e.get("type") == "mcp"]
    cap = settings.mcp.max_tools_per_request
    if len(positions) > cap:
        raise InvalidRequest(f"Invalid 'tools': too many mcp tools. Expected at most {cap}, but got "
                             f"{len(positions)} (this gateway's [tools.mcp] max_tools_per_request).",
                             param="tools", code="array_above_max_length")
    return positions


async def open_hosted(tools: RequestTools, settings: ToolSettings, context: HostedContext | Sequence[Json],
                      search: SearchProvider | None = None, sandbox: Sandbox | None = None,
                      knowledge: VectorSearch | None = None, owner: str = "") -> Hosted | None:
    """The request's hosted tools: MCP servers connected and listed, web search, the code
    interpreter, file search over ``owner``'s vector stores; None when it has none.  ``context``
    is read already (:class:`HostedContext`), or a short sequence of items read here."""
    earlier = context if isinstance(context, HostedContext) else HostedContext.of(context)
    positions = _capped(tools, settings)  # before any store lookup, name resolution or connection
    boxes, wires, seen = _local(tools, settings, search, sandbox, earlier, knowledge, owner)
    if seen.files is not None:
        await _check_files(seen.files, _where(tools))
    if not tools.mcp:
        if earlier.approvals:
            raise InvalidRequest("An mcp_approval_response approves a call, but the request offers no "
                                 "mcp tools to run it.", param="tools")
        if not boxes:
            return None
        return Hosted(Toolboxes(boxes), dict(wires), browser=seen.browser, container_id=seen.container_id,
                      files=seen.files)
    servers: list[McpServer] = []
    resolved: set[str] = set()
    for t, at in zip(tools.mcp, positions, strict=True):
        where = f"tools[{at}]"
        server = _server(t, settings, where)
        if any(s.label == server.label for s in servers):
            raise InvalidRequest(f"Two mcp tools share server_label {server.label!r}.",
                                 param=f"{where}.server_label")
        servers.append(server)
        if t.server_label not in settings.mcp.servers and server.url not in resolved:
            resolved.add(server.url)  # a URL the request named: where it leads (once per URL)
            await egress.public_addresses(server.url, f"{where}.server_url",
                                          allow_private=settings.mcp.allow_private_names)
    unique: dict[tuple[object, ...], McpSession] = {}
    for server in servers:  # one session (and one listing) per server identity
        if server.identity() not in unique:
            unique[server.identity()] = McpSession(server, connect_timeout=settings.connect_timeout,
                                                   max_output_chars=settings.max_output_chars)
    sessions = list(unique.values())
    opening = asyncio.Semaphore(OPENING)

    async def open_one(session: McpSession) -> list[ListedTool]:
        async with opening:
            return await session.open()

    try:
        results = await asyncio.gather(*(open_one(s) for s in sessions), return_exceptions=True)
        failure = next((r for r in results if isinstance(r, BaseException)), None)
        if failure is not None:
            raise failure
    except BaseException:  # a failed server, or the client left while they were opening
        await asyncio.shield(asyncio.gather(*(s.aclose() for s in sessions), return_exceptions=True))
        raise
    found = {key: r for key, r in zip(unique, results, strict=True) if not isinstance(r, BaseException)}
    listed: dict[str, list[ListedTool]] = {
        s.label: [tool for tool in found[s.identity()] if s.offers(tool.name)] for s in servers}
    mcp = McpToolbox(servers, {s.label: unique[s.identity()] for s in servers}, listed,
                     settings.call_timeout)
    toolbox = Toolboxes([mcp, *boxes])
    try:
        hosted = Hosted(toolbox, dict(wires), browser=seen.browser, container_id=seen.container_id,
                        files=seen.files)
        for fn in mcp.functions:
            if fn.name in tools.wire or fn.name in hosted.wire:
                raise InvalidRequest(f"The MCP tool {fn.name!r} has the name of another tool of this "
                                     "request.", param="tools")
            server, tool = mcp.route(fn.name)
            kind: Literal["mcp", "mcp_approval"] = "mcp_approval" if server.approval(tool) else "mcp"
            hosted.wire[fn.name] = WireTool(kind, tool, server.label)
        hosted.list_items = [
            {"id": random_id("mcpl_"), "type": "mcp_list_tools", "server_label": label,
             "tools": [t.wire() for t in found]}
            for label, found in listed.items() if label not in earlier.listed]
        hosted.approved = _approved(earlier, mcp)
        return hosted
    except BaseException:
        await toolbox.aclose()
        raise
