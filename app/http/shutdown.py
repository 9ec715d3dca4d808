"""Graceful shutdown for streams.

On SIGTERM uvicorn stops accepting connections and sse-starlette sets each stream's
``shutdown_event``.  In-flight streams then keep going for ``shutdown_grace_seconds``;
a stream still running at the deadline is stopped by the gateway itself and ends with
its API's terminal error (code ``server_shutdown``: chat an ``error`` chunk and
``[DONE]``, responses ``error`` + ``response.failed``), never cut off.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

import anyio

T = TypeVar("T")
_FAREWELL_SECONDS = 5.0  # for a stopped run to write its terminal events


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


async def drained(frames: AsyncIterator[T], drain: Drain, stop: Callable[[], None],
                  ) -> AsyncIterator[T]:
    """Forward ``frames``; once shutdown's grace period is over, call ``stop()`` (the run
    ends itself with its terminal events) and forward what is left.  ``frames`` must be
    safe to cancel while waiting (:class:`app.engine.run.Frames` is)."""
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
                got: list[T] = []
                with anyio.move_on_after(max(0.0, left)):
                    try:
                        got.append(await iterator.__anext__())
                    except StopAsyncIteration:
                        return
                if not got:
                    stop()
                    with anyio.move_on_after(_FAREWELL_SECONDS):
                        async for frame in iterator:
                            yield frame
                    return
                frame = got[0]
            yield frame
    finally:
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            await aclose()
