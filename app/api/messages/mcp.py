"""Anthropic's MCP connector (``mcp_servers``, beta ``mcp-client-2025-04-04``) on the hosted
MCP tools of Responses (:func:`app.api.responses.hosted.open_hosted`: one implementation).

Each enabled server ``{"type": "url", "url", "name", "authorization_token",
"tool_configuration": {"allowed_tools"}}`` is an ``mcp`` tool with ``server_label`` = ``name``:
a ``name`` the operator configured (``[tools.mcp.servers.NAME]``, whose ``url`` must then be
the configured one) or a URL the operator's ``[tools.mcp] allowed_urls`` allow (by default
none: a 400), with the same SSRF rules, bounds and timeouts; a server that cannot be reached
is an error before any output.  The Messages API has no approval step: calls run
(``require_approval: never``) unless the operator's policy for that server requires approval,
which is a 400 naming the server, not a call that silently never runs.  Errors name
``mcp_servers[i]``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from app.api.responses.hosted import Hosted, open_hosted
from app.api.responses.tools import RequestTools
from app.config import ToolSettings
from app.core.errors import GatewayError, InvalidRequest
from schemas import messages as wire
from schemas.responses import McpToolParam

_TOOLS = re.compile(r"\btools\[(\d+)\]")


def _renamed(text: str, positions: Sequence[int]) -> str:
    """``tools[i].server_url`` (Responses' names) → ``mcp_servers[j].url`` (the request's)."""
    text = _TOOLS.sub(lambda m: f"mcp_servers[{positions[int(m.group(1))]}]", text)
    return text.replace(".server_url", ".url").replace(".server_label", ".name")


async def open_mcp(servers: Sequence[wire.McpServer] | None, settings: ToolSettings,
                   tenant: str) -> Hosted | None:
    """The request's MCP servers connected and listed; None without any enabled one."""
    params: list[McpToolParam] = []
    positions: list[int] = []
    for i, s in enumerate(servers or []):
        config = s.tool_configuration
        if config is not None and not config.enabled:
            continue
        params.append(McpToolParam(type="mcp", server_label=s.name, server_url=s.url,
                                   authorization=s.authorization_token,
                                   allowed_tools=config.allowed_tools if config else None,
                                   require_approval="never"))
        positions.append(i)
    if not params:
        return None
    tools = RequestTools((), {}, (), tuple({"type": "mcp"} for _ in params), tuple(params))
    try:
        hosted = await open_hosted(tools, settings, (), owner=tenant)
    except GatewayError as exc:  # open_hosted names tools[i]: here they are mcp_servers[i]
        exc.param = _renamed(exc.param, positions) if exc.param else exc.param
        exc.message = _renamed(exc.message, positions)
        if exc.param and exc.param not in exc.message:  # Anthropic's envelope has no param
            exc.message = f"{exc.param}: {exc.message}"
        exc.args = (exc.message,)
        raise
    assert hosted is not None
    waiting = sorted({f"{t.namespace}.{t.name}" for t in hosted.wire.values() if t.kind == "mcp_approval"})
    if waiting:
        await hosted.toolbox.aclose()
        raise InvalidRequest(f"mcp_servers: this gateway's operator requires approval for "
                             f"{', '.join(waiting)}, and the Messages API has no approval step; "
                             "leave the server out or use /v1/responses.", param="mcp_servers")
    return hosted
