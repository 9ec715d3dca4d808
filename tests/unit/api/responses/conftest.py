"""Shared by the hosted-tool tests here: the loopback MCP server of
``tests/support/mcp_server.py`` over Streamable HTTP, one per test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.mcp_server import running


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with running("streamable") as url:
        yield url
