"""Graceful shutdown for streams.

On SIGTERM uvicorn stops accepting connections; :func:`watch_shutdown` tells each open stream
(:class:`app.http.sse_send.SSEStream`), from one watcher per event loop that looks every
:data:`POLL_SECONDS` whether uvicorn is shutting down: sse-starlette's public
``AppStatus.should_exit`` (its patch of uvicorn's exit handler sets it), or the ``should_exit``
of the uvicorn server behind the SIGTERM handler, read again each time (a server draining its
last streams is still found there).  In-flight streams then keep going for
``shutdown_grace_seconds``; a stream still running at the deadline is stopped by the gateway
itself and ends with its API's terminal error (code ``server_shutdown``: chat an ``error`` chunk
and ``[DONE]``, responses ``error`` + ``response.failed``), never cut off.

:class:`Drain` and :func:`drained` are the same contract for a generic stream of frames (the
benchmark that compares the SSE sender with sse-starlette's ``EventSourceResponse`` uses them).
"""

from __future__ import annotations

import asyncio
import signal
import time
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Protocol, TypeVar

import anyio
from sse_starlette.sse import AppStatus

T = TypeVar("T")
_FAREWELL_SECONDS = 5.0  # for a stopped run to write its terminal events
POLL_SECONDS = 0.5  # how often the watcher looks whether uvicorn is shutting down


class Listener(Protocol):
    def set(self) -> None: ...


def shutting_down() -> bool:
    """Whether the uvicorn serving this process has begun to shut down."""
    if AppStatus.should_exit:
        return True
    server = getattr(signal.getsignal(signal.SIGTERM), "__self__", None)
    return bool(getattr(server, "should_exit", False))


class _Watch:
    """One event loop's listeners and the task that tells them."""

    def __init__(self) -> None:
        self.listeners: set[Listener] = set()
        self.task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        try:
            while not shutting_down():
                if not self.listeners:
                    return  # started again by the next stream
                await asyncio.sleep(POLL_SECONDS)
            for listener in list(self.listeners):
                listener.set()
            self.listeners.clear()
        finally:
            self.task = None


_WATCHES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Watch] = weakref.WeakKeyDictionary()


def watch_shutdown(listener: Listener) -> None:
    """Call ``listener.set()`` once when uvicorn begins to shut down (soon, if it has)."""
    loop = asyncio.get_running_loop()
    if shutting_down():
        loop.call_soon(listener.set)
        return
    watch = _WATCHES.get(loop)
    if watch is None:
        watch = _WATCHES[loop] = _Watch()
    watch.listeners.add(listener)
    if watch.task is None:
        watch.task = loop.create_task(watch.run())


def unwatch_shutdown(listener: Listener) -> None:
    watch = _WATCHES.get(asyncio.get_running_loop())
    if watch is not None:
        watch.listeners.discard(listener)


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
