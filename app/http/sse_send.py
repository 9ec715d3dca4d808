"""A run's stream as a plain ASGI Server-Sent Events response: one sender, one watcher.

:class:`SSEStream` writes what sse-starlette's ``EventSourceResponse`` wrote for a run (the same
status, headers and body bytes: ``tests/unit/http/test_sse_send.py`` compares them byte for
byte) without its anyio task group of four tasks and a cancel scope per write.  The response's
own task is the sender: it awaits each batch of the run's payloads, frames it and ``await``\\ s
``send`` (backpressure: a slow client slows the sender, never a buffer).  Beside it:

* **one watcher task** reads the request's messages; on ``http.disconnect`` it cancels the
  sender, which then closes the run's frames (:meth:`app.engine.run.Frames.aclose`: the run is
  cancelled, its upstream request closed, at once) and ends quietly.  The run ends with its
  own terminal event exactly once; nothing here makes one.
* **a timer** (``loop.call_later``) for keep-alive pings every ``ping_seconds``: a ping is sent
  by a short task while the sender waits for the run, skipped while a write is in progress
  (the connection is busy anyway); its bytes are sse-starlette's ``ServerSentEvent`` encoding
  (the default comment ``: ping - <UTC time>``, or the route's factory: Anthropic's ``ping``).
* **shutdown**: the gateway's one shutdown watcher per event loop (uvicorn's ``should_exit``,
  polled every 0.5 s: :func:`app.http.shutdown.watch_shutdown`) calls :meth:`_Shutdown.set`;
  the stream then runs on for ``grace`` seconds, ``stop()`` ends the run with its terminal
  error (``server_shutdown``), and what the run still writes is forwarded for
  :data:`FAREWELL_SECONDS` more before the stream is cut.
  A stream idle at shutdown is stopped at the deadline too (no event is needed to notice it).
* a stream cut short (client gone, failed write, shutdown's last deadline) waits for
  ``settle()`` before it returns (the gateway: the run's end, at most 1 s): the run has then
  charged the tokens it cost, which the per-key limits read when the response returns.
* a write that fails because the client is gone (``OSError``) ends the stream quietly.

The ``done`` sentinel (chat's ``data: [DONE]``) goes out with the last write
(``more_body: False``): one write fewer per stream, the same bytes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from sse_starlette import ServerSentEvent
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from app.http.shutdown import unwatch_shutdown, watch_shutdown

Json = dict[str, Any]
Frame = Callable[[Json], bytes]
FAREWELL_SECONDS = 5.0  # after stop(): for the run to write its terminal events

# What EventSourceResponse(headers={"x-accel-buffering": "no", "cache-control": "no-cache"})
# sends, in its order (a fresh list per response: middleware may append to it)
_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"x-accel-buffering", b"no"), (b"cache-control", b"no-cache"),
    (b"connection", b"keep-alive"), (b"content-type", b"text/event-stream; charset=utf-8"))


def default_ping() -> ServerSentEvent:
    """sse-starlette's own keep-alive: an SSE comment with the time."""
    return ServerSentEvent(comment=f"ping - {datetime.now(UTC)}", sep="\n")


class _Shutdown:
    """What the shutdown watcher sets: starts this stream's grace period."""

    __slots__ = ("_stream",)

    def __init__(self, stream: SSEStream) -> None:
        self._stream = stream

    def set(self) -> None:
        self._stream._shutdown()


class SSEStream(Response):
    """See the module docstring.  ``batches``: the run's payloads in lists of what is ready at
    once (``Frames.batched()``); ``stop``: ends the run with its terminal error (shutdown);
    ``settle``: awaited after a stream cut short, once its frames are closed."""

    media_type = "text/event-stream"

    def __init__(self, batches: Any, frame: Frame, *, grace: float, stop: Callable[[], None],
                 done: bytes | None, ping_seconds: float,
                 ping: Callable[[], ServerSentEvent] | None = None,
                 settle: Callable[[], Awaitable[None]] | None = None) -> None:
        self.status_code = 200
        self.background = None
        self.raw_headers = list(_HEADERS)
        self._batches = batches
        self._frame = frame
        self._grace = grace
        self._stop = stop
        self._done = done or b""
        self._ping_seconds = ping_seconds
        self._ping = ping or default_ping
        self._settle = settle
        self._send: Send | None = None
        self._sender: asyncio.Task[Any] | None = None
        self._writing = False  # a write is in progress (the sender's or a ping's)
        self._pinging: asyncio.Task[None] | None = None
        self._ping_timer: asyncio.TimerHandle | None = None
        self._timers: list[asyncio.TimerHandle] = []
        self._ended = False  # no more writes (the stream ended, or was cut)
        self._cut = False  # the sender was cancelled by us: shutdown's last deadline

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "HEAD":  # as sse-starlette: no stream
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            await self._close()
            return
        loop = asyncio.get_running_loop()
        sender = self._sender = asyncio.current_task()
        assert sender is not None
        self._send = send
        gone = complete = False

        async def watch() -> None:
            nonlocal gone
            while (await receive())["type"] != "http.disconnect":
                pass
            gone = True
            if not self._ended:
                sender.cancel()

        # The run's producer was started just before this response and has not taken its first
        # step: one turn lets it queue what the upstream has already sent, so the head (held
        # for the turn by the server, app/http/server.py) goes out with the first events, often
        # a whole short answer and its end: one write instead of two or three.
        await asyncio.sleep(0)
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        watcher = loop.create_task(watch())
        if self._ping_seconds > 0:
            self._ping_timer = loop.call_later(self._ping_seconds, self._ping_due)
        shutdown = _Shutdown(self)
        watch_shutdown(shutdown)
        frame = self._frame
        try:
            batches = self._batches
            body = b""
            async for batch in batches:
                body = frame(batch[0]) if len(batch) == 1 else b"".join(map(frame, batch))
                if self._pinging is not None:
                    await self._pinging  # a ping in the middle of its write
                if getattr(batches, "ended", False):  # the last batch: written with the end
                    break
                self._writing = True
                await send({"type": "http.response.body", "body": body, "more_body": True})
                self._writing = False
                body = b""
            if self._pinging is not None:
                await self._pinging
            self._ended = True
            await send({"type": "http.response.body", "body": body + self._done, "more_body": False})
            complete = True
        except asyncio.CancelledError:
            if not (gone or self._cut):
                raise  # cancelled from outside: not ours
            sender.uncancel()  # the client left, or shutdown's last deadline: a quiet end
        except OSError:
            pass  # the client is gone (a write failed): the run is cancelled below
        finally:
            self._ended = True
            watcher.cancel()  # a watcher woken but not yet run never cancels the sender
            unwatch_shutdown(shutdown)
            if self._ping_timer is not None:
                self._ping_timer.cancel()
            for timer in self._timers:
                timer.cancel()
            if self._pinging is not None:
                self._pinging.cancel()
            await self._close()
            if not complete and self._settle is not None:
                await self._settle()

    async def _close(self) -> None:
        """Close the frames: a run not at its end is cancelled (its upstream closed)."""
        aclose = getattr(self._batches, "aclose", None)
        if aclose is not None:
            await aclose()

    # -- keep-alive ------------------------------------------------------------------
    def _ping_due(self) -> None:
        loop = asyncio.get_running_loop()
        self._ping_timer = loop.call_later(self._ping_seconds, self._ping_due)
        if not (self._writing or self._ended or self._pinging is not None):
            self._pinging = loop.create_task(self._send_ping())

    async def _send_ping(self) -> None:
        assert self._send is not None
        self._writing = True
        try:
            await self._send({"type": "http.response.body", "body": self._ping().encode(),
                              "more_body": True})
        except OSError:
            pass  # the client is gone: the watcher hears it
        finally:
            self._writing = False
            self._pinging = None

    # -- shutdown ----------------------------------------------------------------------
    def _shutdown(self) -> None:
        if self._ended or self._timers:
            return
        loop = asyncio.get_running_loop()
        self._timers = [loop.call_later(self._grace, self._stop),
                        loop.call_later(self._grace + FAREWELL_SECONDS, self._cut_short)]

    def _cut_short(self) -> None:
        if not self._ended and self._sender is not None:
            self._cut = True
            self._sender.cancel()
