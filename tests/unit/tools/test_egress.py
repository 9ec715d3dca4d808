"""The operator's allow-list (app/tools/egress.py), attacked: whatever URL a request writes,
when it is allowed, the request an HTTP client actually makes for it stays on the prefix's
scheme, host, port and path."""

from __future__ import annotations

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st

from app.tools.egress import allowed

PREFIX = "http://mcp.internal:8931/mcp"
segment = st.sampled_from(["mcp", "..", ".", "%2e%2e", "%2E", "a", "", "%2f", "x%5c", "mcp..", "..mcp"])
host = st.sampled_from(["mcp.internal", "MCP.internal", "mcp.internal.", "mcp.internal.evil", "evil",
                        "mcp.internal:8931@evil", "127.0.0.1"])
port = st.sampled_from(["", ":8931", ":80", ":08931", ":8931:1"])
scheme = st.sampled_from(["http", "HTTP", "https", "file", "gopher"])


@settings(max_examples=2000, deadline=None)
@given(scheme, host, port, st.lists(segment, max_size=5), st.sampled_from(["", "?q=1", "#f"]))
def test_an_allowed_url_is_fetched_under_the_prefix(s: str, h: str, p: str, path: list[str],
                                                    tail: str) -> None:
    url = f"{s}://{h}{p}/" + "/".join(path) + tail
    if not allowed(url, [PREFIX]):
        return
    fetched = httpx.URL(url)  # what the MCP client's HTTP client requests
    # (a trailing dot is the same DNS name)
    where = (fetched.scheme, fetched.host.rstrip("."), fetched.port or 80)
    assert where == ("http", "mcp.internal", 8931), url
    assert fetched.path == "/mcp" or fetched.path.startswith("/mcp/"), url


def test_examples() -> None:
    assert allowed("http://mcp.internal:8931/mcp", [PREFIX])
    assert allowed("http://mcp.internal:8931/mcp/sub", [PREFIX])
    assert not allowed("http://mcp.internal:8931/mcpx", [PREFIX])
    assert not allowed("http://mcp.internal:8931/mcp/../admin", [PREFIX])
    assert not allowed("http://mcp.internal:8931/mcp/%2e%2e/admin", [PREFIX])
    assert not allowed("http://user@mcp.internal:8931/mcp", [PREFIX])
    assert not allowed("https://mcp.internal:8931/mcp", [PREFIX])
    assert not allowed("http://mcp.internal/mcp", [PREFIX])
    assert not allowed("http://mcp.internal:8931/mcp", [])
