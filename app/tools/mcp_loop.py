"""The event loop the MCP sessions run on: a thread of its own, one per process.

The ``mcp`` SDK does real work per message: anyio task groups per request, pydantic over
whatever a server sends (a listing of 1,000 tools is ~1 MB to validate and convert), and a
handshake of five HTTP requests per session.  On the gateway's event loop that held
``/health`` for 100-300 ms per large listing and 50-100 ms per twenty sessions; here it
only shares the GIL (the interpreter switches threads every 5 ms).  :class:`app.tools.mcp.
McpSession` runs all of its work here (its sessions' tasks, events and HTTP clients belong to
this loop alone); callers await it from their own loop, and cancelling the caller cancels the
work (:func:`run`), except for closing, which always runs to its end (:func:`run_to_end`).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()


def loop() -> asyncio.AbstractEventLoop:
    """The MCP loop, started on first use."""
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            started = asyncio.new_event_loop()
            threading.Thread(target=started.run_forever, name="mcp-sessions", daemon=True).start()
            _loop = started
        return _loop


async def run(work: Coroutine[Any, Any, T]) -> T:
    """``work`` on the MCP loop, awaited from the caller's; cancelling the caller cancels it."""
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, loop()))


async def run_to_end(work: Coroutine[Any, Any, T]) -> T:
    """Like :func:`run`, but a cancelled caller leaves ``work`` running to its end."""
    return await asyncio.shield(asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, loop())))
