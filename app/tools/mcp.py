"""MCP servers as hosted tools, through the official ``mcp`` SDK's client.

One :class:`McpSession` per server and response: Streamable HTTP, or the older SSE transport
when the server does not speak it (or its URL ends in ``/sse``).  A server is its URL, headers
and allow-list (:meth:`McpServer.identity`): several ``mcp`` tools of one request naming the
same server share one session and one listing.  Every request a session makes is held to the
allow-list and no redirect is followed (:func:`app.tools.egress.guard_hooks`); a refusal ends
the session, and the call or the listing fails naming it.  The SDK's transports are
anyio task groups that must be entered and left by the same task, while the agentic loop
calls tools from the run's task: so each session lives in a task of its own (on the MCP loop,
a thread of its own: :mod:`app.tools.mcp_loop`) that opens the transport, initializes, and
waits to be closed; calls go through the session object, and a call races that task (a
server that goes away mid-call is an error outcome at once, not a
wait for the timeout).

Tools are shown to the model as functions named ``LABEL__TOOL`` in namespace ``LABEL`` (the
way :mod:`app.api.responses.tools` shows a ``namespace`` tool: Harmony gets a real namespace
and calls ``LABEL.TOOL``).  A tool whose name no prompt format can carry is not shown.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx2
from mcp import ClientSession
from mcp import types as mt
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED

from app.core.conversation import FunctionTool
from app.core.errors import GatewayError
from app.tools import egress, mcp_loop
from app.tools.base import ToolOutcome, clip

log = logging.getLogger("ocm_gateway")
SEPARATOR = "__"
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


class ToolServerUnavailable(GatewayError):
    """A tool server named by the request could not be reached or listed (OpenAI: 424)."""

    status = 424
    type = "external_connector_error"
    code = "tool_server_unavailable"
    retryable = False


@dataclass(frozen=True)
class McpServer:
    """One server as a response uses it: where, with which headers, and its policies."""

    label: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    description: str | None = None
    allowed_tools: frozenset[str] | None = None  # None: every tool the server lists
    require_approval: Literal["always", "never"] = "always"  # for tools not named below
    always: frozenset[str] = frozenset()
    never: frozenset[str] = frozenset()
    # the URL prefixes every request of its session must match (a request's own server_url:
    # the operator's allowed_urls); empty: the origin of ``url`` (an operator's own server)
    allowed_urls: tuple[str, ...] = ()

    def identity(self) -> tuple[object, ...]:
        """What makes two servers one: where, with which headers, under which allow-list."""
        return self.url, tuple(sorted(self.headers.items())), self.allowed_urls

    def offers(self, tool: str) -> bool:
        return self.allowed_tools is None or tool in self.allowed_tools

    def approval(self, tool: str) -> bool:
        if tool in self.always:
            return True
        if tool in self.never:
            return False
        return self.require_approval == "always"


@dataclass(frozen=True)
class ListedTool:
    name: str
    description: str | None
    input_schema: dict[str, Any]
    annotations: dict[str, Any] | None = None

    def wire(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema,
                "annotations": self.annotations}


def model_name(label: str, tool: str) -> str:
    return f"{label}{SEPARATOR}{tool}"


def text_of(result: mt.CallToolResult) -> str:
    """A tool result as text for the model and the ``mcp_call`` item."""
    out: list[str] = []
    for block in result.content:
        if isinstance(block, mt.TextContent):
            out.append(block.text)
        elif isinstance(block, mt.ImageContent | mt.AudioContent):
            out.append(f"[{block.type}: {block.mime_type}]")
        elif isinstance(block, mt.EmbeddedResource):
            res = block.resource
            out.append(res.text if isinstance(res, mt.TextResourceContents) else f"[resource {res.uri}]")
        elif isinstance(block, mt.ResourceLink):
            out.append(f"[resource {block.uri}]")
        else:  # pragma: no cover - a content type newer than this gateway
            out.append(json.dumps(block.model_dump(mode="json"), ensure_ascii=False))
    if not out and result.structured_content is not None:
        out.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(out)


class McpSession:
    """A connection to one server for one response (see the module docstring)."""

    def __init__(self, server: McpServer, *, connect_timeout: float, max_output_chars: int) -> None:
        self.server = server
        self._connect_timeout = connect_timeout
        self._max = max_output_chars
        self._session: ClientSession | None = None
        self._ready = asyncio.Event()
        self._closing = asyncio.Event()
        self._failure: BaseException | None = None
        self._refused: egress.EgressRefused | None = None
        self._task: asyncio.Task[None] | None = None

    def _refuse(self, exc: egress.EgressRefused) -> None:
        """A request of this session left the allow-list or was redirected: the session ends
        (the SDK's SSE transport would swallow the error and leave the caller waiting)."""
        if self._refused is None:
            self._refused = exc
            if self._task is not None and not self._task.done() and not self._closing.is_set():
                self._task.cancel()

    def _client(self, tls: Any) -> httpx2.AsyncClient:
        server = self.server
        hooks = egress.guard_hooks(server.allowed_urls or (egress.origin(server.url),), self._refuse,
                                   reveal=bool(server.allowed_urls))
        headers = {"accept-encoding": "identity", **server.headers}  # the 1 MiB bound is of bytes read
        return httpx2.AsyncClient(headers=headers, follow_redirects=False, verify=tls,
                                  event_hooks=hooks,
                                  timeout=httpx2.Timeout(self._connect_timeout, read=300.0))

    async def _own(self, sse: bool) -> None:
        try:
            tls = await egress.ssl_context()
            if sse:
                def factory(headers: dict[str, str] | None = None, timeout: Any = None,
                            auth: Any = None) -> httpx2.AsyncClient:
                    return self._client(tls)

                transport: Any = sse_client(self.server.url, timeout=self._connect_timeout,
                                            httpx_client_factory=factory)
                async with transport as streams:
                    await self._serve(streams)
            else:
                async with self._client(tls) as client, \
                        streamable_http_client(self.server.url, http_client=client) as streams:
                    await self._serve(streams)
        except BaseException as exc:
            self._failure = exc
            if isinstance(exc, asyncio.CancelledError) and self._refused is None:
                raise  # (cancelled by _refuse: the session is over, the task ends)
        finally:
            self._session = None
            self._ready.set()

    async def _serve(self, streams: Any) -> None:
        async with ClientSession(streams[0], streams[1]) as session:
            await session.initialize()
            self._session = session
            self._ready.set()
            await self._closing.wait()

    async def _start(self, sse: bool) -> ClientSession:
        self._ready.clear()
        self._failure = self._refused = None
        self._task = asyncio.get_running_loop().create_task(self._own(sse))
        try:
            async with asyncio.timeout(self._connect_timeout):
                await self._ready.wait()
        except TimeoutError:
            await self._aclose()
            raise ToolServerUnavailable(f"MCP server {self.server.label!r} did not answer within "
                                        f"{self._connect_timeout:g} s.", param="tools") from None
        if self._session is None:
            raise ToolServerUnavailable(f"Could not connect to MCP server {self.server.label!r}: "
                                        f"{_reason(self._refused or self._failure)}.", param="tools")
        return self._session

    async def open(self) -> list[ListedTool]:
        """Connect (Streamable HTTP, then SSE) and list the server's tools (every one: which of
        them a response may use is :meth:`McpServer.offers`).  All of a session's work runs on
        the MCP loop (:mod:`app.tools.mcp_loop`), never on the caller's."""
        return await mcp_loop.run(self._open())

    async def call(self, tool: str, arguments: dict[str, Any], within: float,
                   label: str | None = None) -> ToolOutcome:
        """Run one call (``label``: the server as the caller named it, for the messages)."""
        return await mcp_loop.run(self._call(tool, arguments, within, label or self.server.label))

    async def aclose(self) -> None:
        await mcp_loop.run_to_end(self._aclose())

    async def _open(self) -> list[ListedTool]:
        sse = self.server.url.rstrip("/").endswith("/sse")
        try:
            session = await self._start(sse)
        except ToolServerUnavailable:
            if sse or self._refused is not None:  # refused: not a server that lacks the transport
                raise
            await self._aclose()
            self._closing = asyncio.Event()
            session = await self._start(True)  # an older server: the SSE transport
        try:
            async with asyncio.timeout(self._connect_timeout):
                listed = await session.list_tools()
        except Exception as exc:
            await self._aclose()
            raise ToolServerUnavailable(f"MCP server {self.server.label!r} failed to list its tools: "
                                        f"{_reason(self._refused or exc)}.", param="tools") from None
        return [ListedTool(t.name, t.description, dict(t.input_schema),
                           t.annotations.model_dump(exclude_none=True) if t.annotations else None)
                for t in listed.tools]

    async def _call(self, tool: str, arguments: dict[str, Any], within: float, label: str) -> ToolOutcome:
        session, owner = self._session, self._task
        if session is None or owner is None or owner.done():
            why = f": {self._refused}" if self._refused is not None else ""
            return failure(f"The MCP server {label!r} is not connected{why}.", http=502)
        call = asyncio.ensure_future(session.call_tool(tool, arguments))
        try:
            done, _ = await asyncio.wait({call, owner}, timeout=within,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not call.done():
                call.cancel()
                with contextlib.suppress(BaseException):
                    await call
        if self._refused is not None:
            return failure(f"The MCP server {label!r} was disconnected: {self._refused}.", http=502)
        if call not in done:
            if owner in done:
                return failure(f"The MCP server {label!r} went away during the call.", http=502)
            return failure(f"The tool {tool!r} did not answer within {within:g} s.", http=504)
        exc = call.exception()
        if isinstance(exc, MCPError) and exc.error.code == CONNECTION_CLOSED \
                and not exc.error.message.startswith("SSE stream failed"):
            # the MCP client's own word for a connection that ended (a server that died
            # mid-call): a transport failure, not a JSON-RPC error of the server.  ("SSE stream
            # failed": the client refused what the server sent, e.g. over 1 MiB: a protocol error)
            return failure(f"The MCP server {label!r} went away during the call "
                           f"({exc.error.message.rstrip('.')}).", http=502)
        if exc is not None:
            status = exc.response.status_code if isinstance(exc, httpx2.HTTPStatusError) else 502
            rpc = exc.error.code if isinstance(exc, MCPError) else None
            return failure(f"The tool {tool!r} failed: {_reason(exc).rstrip('.')}.", http=status, rpc=rpc)
        result = call.result()
        if not isinstance(result, mt.CallToolResult):
            return failure(f"The tool {tool!r} asked for input, which this gateway cannot give.", rpc=-32603)
        text = clip(text_of(result), self._max)
        if result.is_error:
            return failure(text or f"The tool {tool!r} failed.", output=text)
        return ToolOutcome(text)

    async def _aclose(self) -> None:
        self._closing.set()
        task, self._task = self._task, None
        if task is None:
            return
        try:
            async with asyncio.timeout(5):
                await asyncio.shield(task)
        except (TimeoutError, asyncio.CancelledError):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        except BaseException:
            pass


def failure(message: str, *, http: int | None = None, rpc: int | None = None,
            output: str = "") -> ToolOutcome:
    """A failed call: ``message`` is what the model reads; the item's ``error`` is OpenAI's
    structured ``McpToolCallError``: ``mcp_protocol_error`` (a JSON-RPC error ``rpc``),
    ``http_error`` (the server unreachable, gone, slow: ``http``) or, for an error the tool
    itself returned, ``mcp_tool_execution_error`` with the text as its content."""
    if rpc is not None:
        error: dict[str, Any] = {"type": "mcp_protocol_error", "code": rpc, "message": message}
    elif http is not None:
        error = {"type": "http_error", "code": http, "message": message}
    else:
        error = execution_error(message)
    return ToolOutcome(output, message, {"error": error})


def execution_error(message: str) -> dict[str, Any]:
    return {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": message}]}


def _reason(exc: BaseException | None) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if exc is None:
        return "no answer"
    if isinstance(exc, httpx2.HTTPStatusError):
        return f"HTTP {exc.response.status_code}"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


@dataclass
class McpToolbox:
    """The MCP servers of one response as a :class:`~app.tools.base.Toolbox`: each server (by
    label) with its session (shared by the servers of one identity) and the tools it offers."""

    servers: Sequence[McpServer]
    sessions: Mapping[str, McpSession]  # by server label
    listed: Mapping[str, list[ListedTool]]  # by server label
    call_timeout: float
    functions: tuple[FunctionTool, ...] = ()
    _routes: dict[str, tuple[McpServer, McpSession, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        functions: list[FunctionTool] = []
        for server in self.servers:
            label = server.label
            for tool in self.listed.get(label, []):
                if not _NAME.fullmatch(tool.name) or len(model_name(label, tool.name)) > 128:
                    log.info("MCP server %r: tool %r has a name no prompt format can carry; not shown",
                             label, tool.name)
                    continue
                name = model_name(label, tool.name)
                self._routes[name] = (server, self.sessions[label], tool.name)
                functions.append(FunctionTool(name, tool.description, tool.input_schema, False, label))
        self.functions = tuple(functions)

    def owns(self, name: str) -> bool:
        return name in self._routes

    def route(self, name: str) -> tuple[McpServer, str]:
        server, _, tool = self._routes[name]
        return server, tool

    def needs_approval(self, name: str) -> bool:
        server, tool = self.route(name)
        return server.approval(tool)

    async def call(self, name: str, arguments: str) -> ToolOutcome:
        server, session, tool = self._routes[name]
        try:
            args = json.loads(arguments or "{}")
        except ValueError:
            return failure("The arguments are not valid JSON.", rpc=-32602)
        if not isinstance(args, dict):
            return failure("The arguments must be a JSON object.", rpc=-32602)
        return await session.call(tool, args, self.call_timeout, server.label)

    async def aclose(self) -> None:
        unique = {id(s): s for s in self.sessions.values()}
        await asyncio.gather(*(s.aclose() for s in unique.values()), return_exceptions=True)
