"""Run a coroutine but cancel it if the HTTP client disconnects first.

Used while a request waits for its first upstream event (both APIs, streaming or not) and
for whole non-streaming answers: the upstream generation is cancelled (its connection
closed) as soon as the client goes away, instead of running to the end or being retried.
Once a stream has started, the SSE sender's watcher does the same (app/http/sse_send.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from starlette.requests import Request

from app.core.errors import GatewayError

T = TypeVar("T")


class ClientDisconnected(GatewayError):
    status = 499
    type = "client_disconnected"
    code = "client_disconnected"


async def cancel_on_disconnect(request: Request, work: Awaitable[T]) -> T:
    """``await work``, unless the client disconnects first: then ``work`` is cancelled (which
    closes its upstream request) and :class:`ClientDisconnected` is raised. An exception of
    ``work`` propagates as itself.

    ``work`` runs in the calling task; one watcher task reads the request's messages and
    cancels the caller on ``http.disconnect`` (a task group would cost two tasks and two
    cancel scopes per call on the hot path)."""
    caller = asyncio.current_task()
    assert caller is not None
    gone = False

    async def watch() -> None:
        nonlocal gone
        while (await request.receive())["type"] != "http.disconnect":
            pass
        gone = True
        caller.cancel()

    watcher = asyncio.get_running_loop().create_task(watch())
    try:
        return await work
    except asyncio.CancelledError:
        if not gone:
            raise  # cancelled from outside (shutdown): not ours to turn into an error
        raise ClientDisconnected("The client disconnected before the answer was complete.") from None
    finally:
        watcher.cancel()  # a watcher woken but not yet run never cancels the caller
        if gone:
            caller.uncancel()  # the watcher only runs while the caller waits inside ``work``
