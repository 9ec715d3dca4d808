"""CPU per streamed answer of the SSE response alone (no network): sse-starlette's
``EventSourceResponse`` as the gateway used it, against :class:`app.http.sse_send.SSEStream` and a
minimal sender (a loop of ``await send``, no disconnect watcher, no pings, no shutdown).

Each case is an ASGI call of the response with a fake ``send`` (counts bytes) and ``receive``
(waits for ever, as a client that stays), fed by a run's real :class:`app.engine.run.Frames`
whose producer task puts ``--events`` chat chunks either all at once (``burst``: one batch, the
fake's 80 tokens in one read) or one per loop turn (``paced``: ``--events`` batches).  CPU time
(``time.process_time``) per stream over ``--streams`` streams, the cases interleaved in
``--rounds`` rounds, best round per case.  Run: ``python -m benchmarks.bench_sse_send``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable
from typing import Any

from sse_starlette import EventSourceResponse
from starlette.types import Message

from app.core.errors import ServerShutdown
from app.engine.run import Frames
from app.http.shutdown import Drain, drained
from app.http.sse import DONE, data_event
from app.http.sse_send import SSEStream
from app.http.streaming import _framed

Json = dict[str, Any]
SCOPE = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}


class FakeRun:
    """What :class:`Frames` reads of a run: its queue, its mode, cancel and stop."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[Json | None] = asyncio.Queue()
        self.mode = "stream"
        self.cancelled = 0

    def cancel(self) -> None:
        self.cancelled += 1

    def stop(self, reason: Exception) -> None:
        self.cancel()


async def produce(run: FakeRun, events: int, paced: bool) -> None:
    for i in range(events):
        run._queue.put_nowait({"id": "chatcmpl-1", "object": "chat.completion.chunk",
                               "created": 1, "model": "m", "choices": [
                                   {"index": 0, "delta": {"content": f" word{i}"},
                                    "finish_reason": None}]})
        if paced:
            await asyncio.sleep(0)
    run._queue.put_nowait(None)


def old_response(run: FakeRun) -> EventSourceResponse:
    """The gateway's ``sse_response`` before ``app/http/sse_send.py`` (commit 2a9988e)."""
    drain = Drain(30.0)

    def stop() -> None:
        run.stop(ServerShutdown("shutting down"))

    return EventSourceResponse(_framed(drained(Frames(run).batched(), drain, stop), data_event, DONE),  # type: ignore[arg-type]
                               ping=15.0, sep="\n", shutdown_event=drain.event,
                               shutdown_grace_period=drain.grace + 5,
                               headers={"x-accel-buffering": "no", "cache-control": "no-cache"})


def new_response(run: FakeRun) -> SSEStream:
    return SSEStream(Frames(run).batched(), data_event, grace=30.0, stop=lambda: None,  # type: ignore[arg-type]
                     done=DONE, ping_seconds=15.0)


class Minimal:
    """The floor: every batch one ``await send``, nothing else."""

    def __init__(self, run: FakeRun) -> None:
        self.batches = Frames(run).batched()  # type: ignore[arg-type]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        async for batch in self.batches:
            body = data_event(batch[0]) if len(batch) == 1 else b"".join(map(data_event, batch))
            await send({"type": "http.response.body", "body": body, "more_body": True})
        await send({"type": "http.response.body", "body": DONE, "more_body": False})


CASES: dict[str, Callable[[FakeRun], Any]] = {
    "sse-starlette": old_response, "sse_send": new_response, "minimal": Minimal}


async def one(make: Callable[[FakeRun], Any], events: int, paced: bool) -> int:
    run = FakeRun()
    out = 0
    forever: asyncio.Future[Message] = asyncio.get_running_loop().create_future()

    async def receive() -> Message:
        return await asyncio.shield(forever)

    async def send(message: Message) -> None:
        nonlocal out
        out += len(message.get("body", b""))

    producer = asyncio.get_running_loop().create_task(produce(run, events, paced))
    await make(run)(SCOPE, receive, send)
    await producer
    return out


async def measure(name: str, events: int, paced: bool, streams: int) -> float:
    make = CASES[name]
    t0 = time.process_time()
    for _ in range(streams):
        await one(make, events, paced)
    return (time.process_time() - t0) / streams * 1e6


async def main_async(args: argparse.Namespace) -> None:
    sizes = {name: await one(make, args.events, False) for name, make in CASES.items()}
    print(f"body bytes per stream: {sizes}")
    for shape in ("burst", "paced"):
        best: dict[str, float] = {}
        for _ in range(args.rounds):
            for name in CASES:
                took = await measure(name, args.events, shape == "paced", args.streams)
                best[name] = min(best.get(name, float("inf")), took)
        old = best["sse-starlette"]
        print(f"{shape} ({args.events} events, {'one batch each' if shape == 'paced' else 'one batch'}):")
        for name, took in best.items():
            print(f"  {name:14s} {took:8.1f} us/stream  x{took / old:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=80)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
