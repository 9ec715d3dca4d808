"""Several choices merged by index: their payloads interleaved, the closing payloads once, one
choice's error ending everything (the others cancelled), a close cancelling all; and a run
cancelled before its task ever ran still closes its upstream."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.api.chat.encode import ChatEncoder
from app.core import events as ev
from app.core.access import ANONYMOUS
from app.core.output import Usage
from app.engine.choices import Choices
from app.engine.run import Json, Run

pytestmark = pytest.mark.asyncio


class Events:
    """An async iterator of events that records its close; ``hang`` waits after its events."""

    def __init__(self, events: list[ev.Event], hang: bool = False) -> None:
        self._events = list(events)
        self.hang = hang
        self.closed = False

    def __aiter__(self) -> Events:
        return self

    async def __anext__(self) -> ev.Event:
        await asyncio.sleep(0)
        if self._events:
            return self._events.pop(0)
        if self.hang:
            await asyncio.Event().wait()
        raise StopAsyncIteration

    async def aclose(self) -> None:
        self.closed = True


def answer(text: str, tokens: int = 2) -> list[ev.Event]:
    return [ev.TextDelta(text), ev.PartDone("text"), ev.Finished("stop", Usage(3, tokens))]


def group(n: int, closing: Any = None) -> Choices:
    choices = Choices(n, closing)
    for i in range(n):
        enc = ChatEncoder("chatcmpl-1", "m", 0, include_usage=False, logprobs=False, index=i)
        choices.runs.append(Run(f"chatcmpl-1-{i}", "m", ANONYMOUS, enc, "stream", None, {},
                                sink=choices.sink(i)))
    return choices


async def collect(choices: Choices) -> list[Json]:
    out: list[Json] = []
    async for batch in choices.frames().batched():
        out.extend(batch)
    return out


async def test_payloads_of_every_choice_then_the_closing_ones() -> None:
    choices = group(2, lambda runs: [{"usage": len(runs)}])
    for i, run in enumerate(choices.runs):
        run.begin(Events(answer(f"choice {i}")))
    payloads = await asyncio.wait_for(collect(choices), 2)
    assert payloads[-1] == {"usage": 2}
    by_index: dict[int, str] = {0: "", 1: ""}
    finishes = []
    for p in payloads[:-1]:
        (choice,) = p["choices"]
        by_index[choice["index"]] += choice["delta"].get("content", "")
        if choice["finish_reason"]:
            finishes.append(choice["index"])
    assert by_index == {0: "choice 0", 1: "choice 1"} and sorted(finishes) == [0, 1]


async def test_an_error_ends_the_answer_and_cancels_the_other_choices() -> None:
    choices = group(3, lambda runs: [{"usage": "never"}])
    sources = [Events([ev.TextDelta("a")], hang=True),
               Events([ev.TextDelta("b"), ev.Error("boom", code="stream_truncated")]),
               Events([ev.TextDelta("c")], hang=True)]
    for run, source in zip(choices.runs, sources, strict=True):
        run.begin(source)
    payloads = await asyncio.wait_for(collect(choices), 2)
    assert payloads[-1]["error"]["code"] == "stream_truncated"
    assert sum("error" in p for p in payloads) == 1 and {"usage": "never"} not in payloads
    await asyncio.gather(*(run.task for run in choices.runs if run.task is not None))
    assert all(s.closed for s in sources)


async def test_closing_the_frames_cancels_every_choice() -> None:
    choices = group(2)
    sources = [Events([ev.TextDelta("a")], hang=True), Events([], hang=True)]
    for run, source in zip(choices.runs, sources, strict=True):
        run.begin(source)
    batches = choices.frames().batched()
    assert await batches.__anext__()
    await batches.aclose()
    await asyncio.wait_for(asyncio.gather(*(r.task for r in choices.runs if r.task is not None)), 2)
    assert all(s.closed for s in sources)


async def test_results_raise_the_first_error_and_cancel_the_rest() -> None:
    choices = Choices(2)
    for i in range(2):
        enc = ChatEncoder("c", "m", 0, include_usage=False, logprobs=False, stream=False, index=i)
        choices.runs.append(Run(f"c-{i}", "m", ANONYMOUS, enc, "wait", None, {}, sink=choices.sink(i)))
    hanging = Events([], hang=True)
    choices.runs[0].begin(hanging)
    choices.runs[1].begin(Events([ev.Error("no", code="tool_not_allowed")]))
    with pytest.raises(Exception) as info:
        await asyncio.wait_for(choices.results(), 2)
    assert getattr(info.value, "code", None) == "tool_not_allowed"
    await asyncio.sleep(0.01)
    assert hanging.closed


async def test_a_run_cancelled_before_its_task_ran_closes_its_upstream() -> None:
    enc = ChatEncoder("c", "m", 0, include_usage=False, logprobs=False)
    run = Run("c", "m", ANONYMOUS, enc, "stream", None, {})
    source = Events(answer("x"), hang=True)
    run.begin(source)
    run.cancel()  # before the task's first step
    assert run.task is not None
    await asyncio.wait_for(run.task, 2)
    assert source.closed
    frames = [p async for p in run.frames()]
    assert all("error" not in p for p in frames)
