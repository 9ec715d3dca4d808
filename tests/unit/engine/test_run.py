"""The run loop: one terminal whatever ends it, the upstream closed, hooks told, errors typed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.api.chat.encode import ChatEncoder
from app.api.responses.encode import ResponsesEncoder
from app.core import events as ev
from app.core.access import ANONYMOUS
from app.core.errors import GatewayError, ServerShutdown
from app.core.output import Usage
from app.engine.run import Mode, Run

pytestmark = pytest.mark.asyncio


class Source:
    """An event stream that records whether it was closed; ``hang`` waits after its events."""

    def __init__(self, events: list[ev.Event], hang: bool = False) -> None:
        self.events = events
        self.hang = hang
        self.closed = False

    def __aiter__(self) -> AsyncIterator[ev.Event]:
        return self._gen()

    async def _gen(self) -> AsyncIterator[ev.Event]:
        try:
            for e in self.events:
                yield e
            if self.hang:
                await asyncio.Event().wait()
        finally:
            self.closed = True


class Hooks:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def started(self, run: Run) -> None:
        self.calls.append(("started", str(run.encoder.result().get("status"))))

    async def ended(self, run: Run) -> None:
        self.calls.append(("ended", str(run.encoder.result().get("status"))))


def chat_run(mode: Mode = "stream", hooks: Hooks | None = None) -> Run:
    enc = ChatEncoder("chatcmpl-1", "m", 0, include_usage=False, logprobs=False, stream=mode == "stream")
    return Run("chatcmpl-1", "m", ANONYMOUS, enc, mode, hooks, {})


def responses_run(hooks: Hooks | None = None) -> Run:
    resource: dict[str, Any] = {"id": "resp_1", "status": "queued", "output": [], "error": None}
    return Run("resp_1", "m", ANONYMOUS, ResponsesEncoder(resource), "stream", hooks, {})


async def drain(run: Run) -> list[dict[str, Any]]:
    return [p async for p in run.frames()]


async def test_finished_run_frames_end_with_one_terminal_and_close_upstream() -> None:
    src = Source([ev.TextDelta("hi"), ev.PartDone("text"), ev.Finished("stop", Usage(1, 1))])
    run = chat_run()
    run.begin(src.__aiter__())
    frames = await drain(run)
    assert frames[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert [f["choices"][0]["finish_reason"] for f in frames].count("stop") == 1
    assert src.closed and run.error is None


async def test_stop_ends_a_waiting_run_with_the_reason_as_its_terminal() -> None:
    hooks = Hooks()
    src = Source([ev.ReasoningDelta("thinking")], hang=True)
    run = responses_run(hooks)
    run.begin(src.__aiter__())
    frames = run.frames()
    seen = [await frames.__anext__() for _ in range(5)]  # created, in_progress, item, part, delta
    assert seen[-1]["type"] == "response.reasoning.delta"
    run.stop(ServerShutdown("bye"))
    rest = [p async for p in frames]
    assert [p["type"] for p in rest][-2:] == ["error", "response.failed"]
    assert rest[-2]["error"]["code"] == "server_shutdown"
    assert rest[-1]["response"]["status"] == "failed"
    assert src.closed and run.error is not None and run.error.code == "server_shutdown"
    assert hooks.calls == [("ended", "failed")]


async def test_cancel_is_the_encoders_cancel_and_frames_closed_early_cancel_the_run() -> None:
    src = Source([ev.TextDelta("a")], hang=True)
    run = responses_run()
    run.begin(src.__aiter__())
    frames = run.frames()
    while (await frames.__anext__())["type"] != "response.output_text.delta":
        pass
    await frames.aclose()  # the client went away
    await run.finished(within=5)
    assert src.closed and run.encoder.result()["status"] == "cancelled"


async def test_a_failing_encoder_still_ends_the_stream_with_an_error() -> None:
    class Broken(ChatEncoder):
        def _chunks(self, event: ev.Event) -> list[dict[str, Any]]:
            if isinstance(event, ev.TextDelta):
                raise RuntimeError("bug")
            return super()._chunks(event)

    run = Run("c", "m", ANONYMOUS, Broken("c", "m", 0, include_usage=False, logprobs=False),
              "stream", None, {})
    src = Source([ev.TextDelta("x")], hang=True)
    run.begin(src.__aiter__())
    frames = await drain(run)
    assert frames[-1]["error"]["code"] == "internal_error" and src.closed


async def test_result_raises_the_terminal_error_with_the_status_of_its_code() -> None:
    run = chat_run("wait")
    run.begin(Source([ev.TextDelta("x"), ev.Error("too slow", code="upstream_timeout")]).__aiter__())
    with pytest.raises(GatewayError) as info:
        await run.result()
    assert info.value.status == 504 and info.value.code == "upstream_timeout"


async def test_result_is_the_fold_and_a_waiter_that_leaves_cancels_the_run() -> None:
    run = chat_run("wait")
    run.begin(Source([ev.TextDelta("hello"), ev.PartDone("text"), ev.Finished("stop", Usage())]).__aiter__())
    body = await run.result()
    assert body["choices"][0]["message"]["content"] == "hello"
    src = Source([], hang=True)
    waiting = chat_run("wait")
    waiting.begin(src.__aiter__())
    task = asyncio.ensure_future(waiting.result())
    await asyncio.sleep(0.01)
    task.cancel()
    await waiting.finished(within=5)
    assert src.closed


async def test_a_background_run_survives_its_waiter_and_opens_its_stream_itself() -> None:
    src = Source([ev.TextDelta("x"), ev.PartDone("text"), ev.Finished("stop", Usage())])
    registry: dict[str, Run] = {}
    hooks = Hooks()
    enc = ResponsesEncoder({"id": "resp_b", "status": "queued", "output": [], "error": None})
    run = Run("resp_b", "m", ANONYMOUS, enc, "background", hooks, registry)

    async def opening() -> AsyncIterator[ev.Event]:
        await asyncio.sleep(0.01)
        return src.__aiter__()

    run.begin(opening())
    assert registry == {"resp_b": run}
    waiter = asyncio.ensure_future(run.result())
    await asyncio.sleep(0)
    waiter.cancel()
    await run.finished(within=5)
    assert enc.result()["status"] == "completed" and registry == {}
    # stored again once it generates (queued → in_progress: what other replicas read), then its end
    assert hooks.calls == [("started", "in_progress"), ("ended", "completed")]


async def test_batches_hold_what_was_produced_together_and_nothing_is_lost() -> None:
    """A burst (many events from one upstream read) is one batch: one write to the client. The
    batches hold exactly the payloads, in order, ending with the one terminal."""
    events: list[ev.Event] = [ev.TextDelta(f"t{i}") for i in range(20)]
    src = Source([*events, ev.PartDone("text"), ev.Finished("stop", Usage(1, 20))])
    one_by_one = chat_run()
    one_by_one.begin(src.__aiter__())
    expected = await drain(one_by_one)
    src = Source([*events, ev.PartDone("text"), ev.Finished("stop", Usage(1, 20))])
    run = chat_run()
    run.begin(src.__aiter__())
    batches = [b async for b in run.frames().batched()]
    assert len(batches) < len(expected) // 4  # the source never waits: a few batches at most
    flat = [p for b in batches for p in b]
    assert [p["choices"][0]["delta"] for p in flat] == [p["choices"][0]["delta"] for p in expected]
    assert sum(p["choices"][0]["finish_reason"] == "stop" for p in flat) == 1


async def test_batches_closed_early_cancel_the_run() -> None:
    src = Source([ev.TextDelta("a")], hang=True)
    run = responses_run()
    run.begin(src.__aiter__())
    batches = run.frames().batched()
    while not any(p["type"] == "response.output_text.delta" for p in await batches.__anext__()):
        pass
    await batches.aclose()
    await run.finished(within=5)
    assert src.closed and run.encoder.result()["status"] == "cancelled"
