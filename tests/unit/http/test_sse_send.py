"""The plain ASGI SSE response (app/http/sse_send.py): the bytes sse-starlette's
EventSourceResponse wrote, a disconnect cancels the run once, shutdown ends the stream with its
terminal event within the grace period, keep-alive pings, a failed write ends quietly."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from sse_starlette import EventSourceResponse, ServerSentEvent
from sse_starlette import sse as sse_starlette

from app.api.chat.encode import ChatEncoder
from app.api.messages.routes import _ping as anthropic_ping
from app.core import events as ev
from app.core.access import ANONYMOUS
from app.core.output import Usage
from app.engine.run import Run
from app.http import streaming
from app.http.shutdown import Drain, drained
from app.http.sse import DONE, data_event, typed_event
from app.http.sse_send import SSEStream
from app.http.streaming import _framed, sse_response

Json = dict[str, Any]
POST = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}


class Encoder(ChatEncoder):
    """The chat encoder, counting its cancels (a run is cancelled at most once)."""

    cancels = 0

    def cancel(self) -> list[Json]:
        self.cancels += 1
        return super().cancel()


class Source:
    """``events`` one per ``gap`` seconds, then (``endless``) a token every ``gap`` for ever."""

    def __init__(self, events: list[ev.Event], gap: float = 0.0, endless: bool = False,
                 closing: float = 0.0) -> None:
        self.events, self.gap, self.endless, self.closing = events, gap, endless, closing
        self.sent = 0
        self.closed_at: float | None = None

    def __aiter__(self) -> AsyncIterator[ev.Event]:
        return self._gen()

    async def _gen(self) -> AsyncIterator[ev.Event]:
        try:
            for e in self.events:
                self.sent += 1
                yield e
                if self.gap:
                    await asyncio.sleep(self.gap)
            while self.endless:
                self.sent += 1
                yield ev.TextDelta("x")
                await asyncio.sleep(self.gap)
        finally:
            if self.closing:  # closing the upstream takes a few loop turns (a transport's close)
                await asyncio.sleep(self.closing)
            self.closed_at = time.monotonic()


def words(n: int) -> list[ev.Event]:
    return [*(ev.TextDelta(f" w{i}\n\"é\u2028") for i in range(n)), ev.PartDone("text"),
            ev.Finished("stop", Usage(3, n))]


def chat_run(source: Source) -> Run:
    run = Run("chatcmpl-1", "m", ANONYMOUS, Encoder("chatcmpl-1", "m", 0, include_usage=True,
                                                    logprobs=False, stream=True), "stream", None, {})
    run.begin(source.__aiter__())
    return run


class Client:
    """ASGI ``receive``/``send`` of a client that stays until ``leave()`` (or a failed write)."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.messages: list[Json] = []
        self.left = asyncio.Event()
        self.fail_after = fail_after
        self.wrote = asyncio.Event()

    async def receive(self) -> Json:
        await self.left.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Json) -> None:
        if self.fail_after is not None and len(self.messages) >= self.fail_after:
            raise OSError("connection reset by peer")
        self.messages.append(message)
        self.wrote.set()

    async def until(self, events: int) -> None:
        while len(self.payloads()) < events:
            self.wrote.clear()
            await self.wrote.wait()

    def leave(self) -> None:
        self.left.set()

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.messages[1:])

    def payloads(self) -> list[str]:
        return [line[6:] for line in self.body.decode().split("\n") if line.startswith("data: ")]


def before(run: Run, frame: Callable[[Json], bytes], done: bytes | None,
           ping: Callable[[], ServerSentEvent] | None = None) -> EventSourceResponse:
    """``sse_response`` as it was before app/http/sse_send.py (sse-starlette)."""
    drain = Drain(30.0)
    return EventSourceResponse(_framed(drained(run.frames().batched(), drain, lambda: None), frame, done),
                               ping=15.0, ping_message_factory=ping, sep="\n",
                               shutdown_event=drain.event, shutdown_grace_period=drain.grace + 5,
                               headers={"x-accel-buffering": "no", "cache-control": "no-cache"})


async def serve(response: Any, client: Client, scope: Json = POST) -> None:
    await asyncio.wait_for(response(scope, client.receive, client.send), 10)


@pytest.mark.parametrize("paced", [False, True])
async def test_the_same_status_headers_and_body_as_sse_starlette(paced: bool) -> None:
    old, new = Client(), Client()
    gap = 0.001 if paced else 0.0
    await serve(before(chat_run(Source(words(40), gap)), data_event, DONE), old)
    await serve(sse_response(chat_run(Source(words(40), gap)), data_event, 30.0), new)
    assert new.messages[0] == old.messages[0]  # status and raw headers, in their order
    assert new.body == old.body and new.body.endswith(b"\n\n" + DONE)
    assert len(new.payloads()) == 1 + 40 + 3  # the role, every delta, the finish, the usage, [DONE]
    assert new.messages[-1]["more_body"] is False


async def test_an_answer_that_arrives_at_once_is_one_write_with_its_end() -> None:
    """80 events in one upstream read: one body message with the end (``more_body`` false), not
    a write every 32 events and another for the end."""
    client = Client()
    await serve(sse_response(chat_run(Source(words(80))), data_event, 30.0), client)
    bodies = client.messages[1:]
    assert len(bodies) == 1 and bodies[0]["more_body"] is False, [len(m["body"]) for m in bodies]
    assert len(client.payloads()) == 1 + 80 + 3 and client.body.endswith(b"\n\n" + DONE)


async def test_the_same_bytes_for_a_stream_without_a_sentinel_and_a_custom_ping() -> None:
    """Anthropic's framing: named events, no [DONE]."""
    payloads: list[Json] = [{"type": "message_start", "message": {"id": "msg_1"}},
                            {"type": "content_block_delta", "index": 0,
                             "delta": {"type": "text_delta", "text": "a\u2028\"b"}},
                            {"type": "message_stop"}]

    class Fixed:
        def __init__(self) -> None:
            self.queue = list(payloads)

        def frames(self) -> Fixed:
            return self

        def batched(self) -> Fixed:
            return self

        def __aiter__(self) -> Fixed:
            return self

        async def __anext__(self) -> list[Json]:
            if not self.queue:
                raise StopAsyncIteration
            return [self.queue.pop(0)]

        def stop(self, reason: Exception) -> None:
            pass

    old, new = Client(), Client()
    await serve(EventSourceResponse(_framed(Fixed().batched(), typed_event, None), ping=15.0,
                                    ping_message_factory=anthropic_ping, sep="\n",
                                    headers={"x-accel-buffering": "no", "cache-control": "no-cache"}),
                old)
    await serve(sse_response(Fixed(), typed_event, 30.0, done=None, ping=anthropic_ping), new)
    assert new.messages[0] == old.messages[0] and new.body == old.body
    assert new.body == b"".join(map(typed_event, payloads))


async def test_a_disconnect_mid_stream_cancels_the_run_once_and_closes_upstream() -> None:
    source = Source([], gap=0.005, endless=True, closing=0.02)
    run = chat_run(source)
    client = Client()
    served = asyncio.get_running_loop().create_task(
        serve(sse_response(run, data_event, 30.0), client))
    await client.until(5)
    client.leave()
    t_left = time.monotonic()
    await served  # the response ends quietly (no exception), once the run has ended
    # the run has ended (its upstream closed, its tokens charged) before the limits read them
    assert run.task is not None and run.task.done() and source.closed_at is not None
    assert source.closed_at - t_left < 0.5
    assert isinstance(run.encoder, Encoder) and run.encoder.cancels == 1
    sent = source.sent
    await asyncio.sleep(0.05)
    assert source.sent == sent  # nothing more pulled from upstream
    assert client.messages[-1]["more_body"] is True  # no end written to a client that left
    assert DONE not in client.body and b"finish_reason\":\"stop" not in client.body
    run.cancel()  # a later cancel is a no-op: still one
    assert run.encoder.cancels == 1


async def test_a_failed_write_ends_the_stream_quietly_and_cancels_the_run() -> None:
    source = Source([], gap=0.002, endless=True)
    run = chat_run(source)
    client = Client(fail_after=4)  # the start and three writes, then the socket is gone
    await serve(sse_response(run, data_event, 30.0), client)
    assert run.task is not None and run.task.done()
    assert source.closed_at is not None and len(client.messages) == 4
    assert isinstance(run.encoder, Encoder) and run.encoder.cancels == 1


@pytest.mark.parametrize("idle", [False, True])
async def test_shutdown_ends_the_stream_with_its_terminal_error_after_the_grace_period(
        monkeypatch: pytest.MonkeyPatch, idle: bool) -> None:
    """uvicorn's exit flag (sse-starlette's watcher, polled every 0.5 s) starts the grace
    period; an idle stream (no event for ever) is stopped at the deadline too."""
    source = Source([ev.TextDelta("a")], gap=3600.0) if idle else Source([], 0.01, endless=True)
    run = chat_run(source)
    client = Client()
    grace = 0.4
    served = asyncio.get_running_loop().create_task(serve(sse_response(run, data_event, grace), client))
    await client.until(1)
    monkeypatch.setattr(sse_starlette.AppStatus, "should_exit", True)
    t_exit = time.monotonic()
    await served
    took = time.monotonic() - t_exit
    assert grace <= took < grace + 0.5 + 0.5  # the grace, plus at most one poll of the watcher
    data = client.payloads()
    assert data[-1] == "[DONE]" and client.messages[-1]["more_body"] is False
    assert json.loads(data[-2])["error"]["code"] == "server_shutdown"
    assert sum("server_shutdown" in d for d in data) == 1
    assert source.closed_at is not None
    assert isinstance(run.encoder, Encoder) and run.encoder.cancels == 0  # stopped, not cancelled


async def test_a_stream_started_after_shutdown_began_gets_its_grace_period(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sse_starlette.AppStatus, "should_exit", True)
    run = chat_run(Source([], 0.01, endless=True))
    client = Client()
    t0 = time.monotonic()
    await serve(sse_response(run, data_event, 0.2), client)
    assert 0.2 <= time.monotonic() - t0 < 1.0
    assert json.loads(client.payloads()[-2])["error"]["code"] == "server_shutdown"


async def test_a_stream_that_ignores_the_stop_is_cut_after_the_farewell(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from app.http import sse_send

    monkeypatch.setattr(sse_send, "FAREWELL_SECONDS", 0.2)
    monkeypatch.setattr(sse_starlette.AppStatus, "should_exit", True)
    stops: list[float] = []

    class Deaf:
        """Frames that never end, whose stop does nothing."""

        def frames(self) -> Deaf:
            return self

        def batched(self) -> Deaf:
            return self

        def __aiter__(self) -> Deaf:
            return self

        async def __anext__(self) -> list[Json]:
            await asyncio.sleep(0.01)
            return [{"x": 1}]

        def stop(self, reason: Exception) -> None:
            stops.append(time.monotonic())

    client = Client()
    t0 = time.monotonic()
    await serve(sse_response(Deaf(), data_event, 0.1), client)
    assert len(stops) == 1 and 0.1 <= stops[0] - t0 < 0.3
    assert 0.3 <= time.monotonic() - t0 < 1.0 and client.messages[-1]["more_body"] is True


@pytest.mark.parametrize("custom", [False, True])
async def test_an_idle_stream_gets_keep_alive_pings(monkeypatch: pytest.MonkeyPatch,
                                                    custom: bool) -> None:
    monkeypatch.setattr(streaming, "PING_SECONDS", 0.05)
    run = chat_run(Source([ev.TextDelta("a"), ev.TextDelta("b"), *words(0)], gap=0.3))
    client = Client()
    await serve(sse_response(run, data_event, 30.0, ping=anthropic_ping if custom else None), client)
    bodies = [m["body"] for m in client.messages[1:]]
    pings = [b for b in bodies if b"ping" in b]
    assert len(pings) >= 6  # ~0.6 s of waiting, a ping every 0.05 s
    if custom:
        assert set(pings) == {b'event: ping\ndata: {"type":"ping"}\n\n'}
    else:
        assert all(p.startswith(b": ping - ") and p.endswith(b"\n\n") for p in pings)
    assert client.payloads()[-1] == "[DONE]"
    events = [b for b in bodies if b"ping" not in b]  # pings never split an event
    assert all(b.startswith(b"data: ") and b.endswith(b"\n\n") for b in events)
    assert b"".join(events).count(b"data: ") == 1 + 2 + 3  # the role, a, b, finish, usage, [DONE]


async def test_head_sends_the_headers_only_and_cancels_the_run() -> None:
    source = Source([], 0.01, endless=True)
    run = chat_run(source)
    client = Client()
    await serve(sse_response(run, data_event, 30.0), client, {**POST, "method": "HEAD"})
    assert [m["type"] for m in client.messages] == ["http.response.start", "http.response.body"]
    assert client.body == b"" and run.task is not None
    await asyncio.wait_for(asyncio.shield(run.task), 1)
    assert source.closed_at is not None


async def test_the_response_is_a_starlette_response_with_fresh_headers() -> None:
    """FastAPI returns any Response as is; middleware may append to the raw headers."""
    from starlette.responses import Response

    one = sse_response(chat_run(Source(words(1))), data_event, 1.0)
    two = sse_response(chat_run(Source(words(1))), data_event, 1.0)
    assert isinstance(one, SSEStream) and isinstance(one, Response)
    assert one.raw_headers == two.raw_headers and one.raw_headers is not two.raw_headers
    for r in (one, two):
        await serve(r, Client())
