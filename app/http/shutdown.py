"""Graceful shutdown for streams.

On SIGTERM uvicorn stops accepting connections and sse-starlette sets each stream's
``shutdown_event``.  In-flight streams then keep going for ``shutdown_grace_seconds``;
a stream still running at the deadline is ended by the gateway itself with a proper
terminal event (chat: an ``error`` chunk with code ``server_shutdown`` and ``[DONE]``;
responses: the run is cancelled, which ends it with ``response.failed``), never cut off.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio


class Drain:
    """One stream's view of shutdown: the event sse-starlette sets, and the grace period."""

    def __init__(self, grace: float) -> None:
        self.event = anyio.Event()
        self.grace = grace
        self._deadline: float | None = None

    def remaining(self) -> float | None:
        """None while not shutting down; else seconds left before the stream must end."""
        if not self.event.is_set():
            return None
        if self._deadline is None:
            self._deadline = time.monotonic() + self.grace
        return self._deadline - time.monotonic()


async def drained(frames: AsyncIterator[bytes], drain: Drain,
                  on_deadline: Callable[[], Awaitable[list[bytes]]]) -> AsyncIterator[bytes]:
    """Forward ``frames``; once shutdown's grace period is over, end with ``on_deadline()``."""
    iterator = frames.__aiter__()
    try:
        while True:
            left = drain.remaining()
            if left is None:
                try:
                    frame = await iterator.__anext__()
                except StopAsyncIteration:
                    return
            else:
                got: list[bytes] = []
                with anyio.move_on_after(max(0.0, left)):
                    try:
                        got.append(await iterator.__anext__())
                    except StopAsyncIteration:
                        return
                if not got:
                    for farewell in await on_deadline():
                        yield farewell
                    return
                frame = got[0]
            yield frame
    finally:
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            await aclose()
