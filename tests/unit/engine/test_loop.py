"""app.engine.loop's step decision and call runner, without a model: independent hosted calls
of one step run concurrently (at most ``max_parallel`` at once) and come back in the model's
order; a step that also calls a client function (or a tool awaiting approval) runs the hosted
calls and returns; the bounds stop the loop."""

from __future__ import annotations

import asyncio

from app.core import events as ev
from app.core.conversation import Conversation, FunctionTool, ToolCall
from app.core.output import Usage
from app.engine.loop import Final, LoopLimits, LoopState, RunHosted, StepOutput, Stop, _run_calls
from app.tools.base import ToolOutcome


class Sleepy:
    """A toolbox whose ``wait`` sleeps the seconds it is given; ``ask`` needs approval."""

    functions: tuple[FunctionTool, ...] = ()

    def __init__(self) -> None:
        self.running = 0
        self.most = 0

    def owns(self, name: str) -> bool:
        return name in ("wait", "ask")

    def needs_approval(self, name: str) -> bool:
        return name == "ask"

    async def call(self, name: str, arguments: str) -> ToolOutcome:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await asyncio.sleep(float(arguments))
        finally:
            self.running -= 1
        return ToolOutcome(f"slept {arguments}")

    async def aclose(self) -> None:
        return None


def step(*calls: ToolCall) -> StepOutput:
    out = StepOutput()
    for c in calls:
        out.observe(ev.ToolCallDone(0, c.id, c.name, c.arguments))
    return out


def state(**limits: object) -> LoopState:
    return LoopState(Conversation(()), LoopLimits(**limits))  # type: ignore[arg-type]


async def test_calls_run_concurrently_bounded_and_come_back_in_the_models_order() -> None:
    box = Sleepy()
    calls = [ToolCall(f"c{n}", "wait", s) for n, s in enumerate(("0.3", "0.1", "0.2", "0.1", "0.1"))]
    loop = state(max_parallel=3)
    got = [(call.id, outcome.output) async for call, outcome in _run_calls(box, calls, loop)]
    assert got == [(c.id, f"slept {c.arguments}") for c in calls]  # the model's order, not finishing order
    assert box.most == 3  # three at a time: concurrent, and never more
    assert loop.calls_run == 5


async def test_a_mixed_step_runs_the_hosted_call_and_returns() -> None:
    box, done = Sleepy(), ev.Finished("tool_calls", Usage(10, 5))
    mixed = step(ToolCall("h", "wait", "0"), ToolCall("f", "get_weather", "{}"))
    assert state().decide(mixed, done, box) == RunHosted((ToolCall("h", "wait", "0"),), "return")
    waiting = step(ToolCall("h", "wait", "0"), ToolCall("a", "ask", "0"))
    assert state().decide(waiting, done, box) == RunHosted((ToolCall("h", "wait", "0"),), "return")
    assert state().decide(step(ToolCall("h", "wait", "0")), done, box).then == "sample"  # type: ignore[union-attr]
    assert state().decide(step(ToolCall("f", "get_weather", "{}")), done, box) == Final(done)


def test_the_bounds_stop_the_loop() -> None:
    box, done = Sleepy(), ev.Finished("tool_calls", Usage(10, 5))
    two = step(ToolCall("a", "wait", "0"), ToolCall("b", "wait", "0"))
    capped = state(max_tool_calls=1).decide(two, done, box)
    assert capped == Stop("max_tool_calls", tuple(two.calls))
    rounds = state(max_rounds=2)
    rounds.rounds = 2
    assert rounds.decide(two, done, box) == Stop("max_rounds", tuple(two.calls))
    late = state(deadline_seconds=1.0)
    late.started -= 2
    assert late.decide(two, done, box) == Stop("deadline", tuple(two.calls))
