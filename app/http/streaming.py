"""A run as an HTTP response: SSE (drained on shutdown), JSON lines, or one JSON body.

The only place a run's encoded events meet the wire.  Each API passes its framing
(``data:`` lines for chat, named events for Responses); the ``[DONE]`` sentinel, the
shutdown deadline, keep-alive pings and proxy headers are the same for both.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from sse_starlette import ServerSentEvent
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from app.core.errors import ServerShutdown
from app.engine.run import Run, Streamable
from app.http.disconnect import cancel_on_disconnect
from app.http.responses import JSONResponse
from app.http.sse import DONE
from app.http.sse_send import SSEStream

Frame = Callable[[dict[str, Any]], bytes]
PING_SECONDS = 15.0  # keep-alive interval of SSE streams
SETTLE_SECONDS = 1.0  # a stream cut short waits this long at most for its run's end


async def _framed(batches: AsyncIterator[list[dict[str, Any]]], frame: Frame,
                  done: bytes | None) -> AsyncIterator[bytes]:
    """Each batch of payloads (what the run produced at once) as one body chunk."""
    try:
        async for batch in batches:
            yield frame(batch[0]) if len(batch) == 1 else b"".join(map(frame, batch))
        if done is not None:
            yield done
    finally:
        aclose = getattr(batches, "aclose", None)
        if aclose is not None:
            await aclose()


def sse_response(run: Streamable, frame: Frame, grace: float, *, done: bytes | None = DONE,
                 ping: Callable[[], ServerSentEvent] | None = None) -> Response:
    """``done``: the sentinel after the last event (None: none, Anthropic's stream); ``ping``:
    the keep-alive sent every :data:`PING_SECONDS` (default: an SSE comment; Anthropic's: a
    ``ping`` event).  Shutdown: ``grace`` seconds more, then the run is stopped with
    ``server_shutdown`` (:mod:`app.http.sse_send`)."""
    def stop() -> None:
        run.stop(ServerShutdown("The gateway is shutting down; the answer was cut short."))

    async def settle() -> None:  # a run cut short has charged its tokens when the response returns
        assert isinstance(run, Run)
        await run.finished(SETTLE_SECONDS)

    return SSEStream(run.frames().batched(), frame, grace=grace, stop=stop, done=done,
                     ping_seconds=PING_SECONDS, ping=ping,
                     settle=settle if isinstance(run, Run) else None)


def jsonlines_response(run: Streamable, frame: Frame) -> Response:
    return StreamingResponse(_framed(run.frames().batched(), frame, None),
                             media_type="application/jsonlines")


async def json_answer(request: Request, starting: Awaitable[Run]) -> Response:
    """Start a run and answer with its non-streaming body; a client that leaves at any point
    cancels it (one disconnect watcher for the whole request)."""
    async def answer() -> dict[str, Any]:
        return await (await starting).result()

    return JSONResponse(await cancel_on_disconnect(request, answer()))
