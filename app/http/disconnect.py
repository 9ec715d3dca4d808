"""Run a coroutine but cancel it if the HTTP client disconnects first.

Used while a request waits for its first upstream event (both APIs, streaming or not) and
for whole non-streaming answers: the upstream generation is cancelled (its connection
closed) as soon as the client goes away, instead of running to the end or being retried.
Once a stream has started, sse-starlette's disconnect listener does the same.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

import anyio
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
    ``work`` propagates as itself (not wrapped in an exception group)."""
    result: list[T] = []
    failure: list[BaseException] = []

    async with anyio.create_task_group() as tg:
        async def run() -> None:
            try:
                result.append(await work)
            except Exception as exc:
                failure.append(exc)
            tg.cancel_scope.cancel()

        async def watch() -> None:
            while True:
                message = await request.receive()
                if message["type"] == "http.disconnect":
                    tg.cancel_scope.cancel()
                    return

        tg.start_soon(run)
        tg.start_soon(watch)
    if failure:
        raise failure[0]
    if not result:
        raise ClientDisconnected("The client disconnected before the answer was complete.")
    return result[0]
