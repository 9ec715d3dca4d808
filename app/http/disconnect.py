"""Run a coroutine but cancel it if the HTTP client disconnects first.

Used for non-streaming answers: the upstream generation is cancelled (its
connection closed) as soon as the client goes away, instead of running to the end.
Streaming responses get the same behaviour from sse-starlette's disconnect listener.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

import anyio
from starlette.requests import Request

from app.errors import GatewayError

T = TypeVar("T")


class ClientDisconnected(GatewayError):
    status = 499
    type = "client_disconnected"
    code = "client_disconnected"


async def cancel_on_disconnect(request: Request, work: Awaitable[T]) -> T:
    result: list[T] = []

    async with anyio.create_task_group() as tg:
        async def run() -> None:
            result.append(await work)
            tg.cancel_scope.cancel()

        async def watch() -> None:
            while True:
                message = await request.receive()
                if message["type"] == "http.disconnect":
                    tg.cancel_scope.cancel()
                    return

        tg.start_soon(run)
        tg.start_soon(watch)
    if not result:
        raise ClientDisconnected("The client disconnected before the answer was complete.")
    return result[0]
