"""The agentic loop: hosted tools run inside one response (Open Responses, "the agentic loop").

A step is one generation.  Its events stream through as they come, except its ``Finished``;
when it ends, its output is classified **once** into a typed :data:`Decision`:

* :class:`Final` — no hosted call: the run ends with the step's end (usage summed over steps);
* :class:`RunHosted` — hosted calls to run (concurrently, at most ``max_parallel`` at once,
  their results reported in the model's order); then ``then == "sample"`` feeds the results
  back and samples again, while ``"return"`` ends the response after running them, because
  the step also called a client function or a tool that waits for the client's approval;
* :class:`Stop` — a bound was reached (``max_tool_calls``, ``max_rounds``, ``deadline``): the
  response ends incomplete with that reason; calls it did not run say so.

The deadline bounds the whole response: a generation still running when it passes is stopped
(its upstream request closed), a tool call is cut at it, and no step is sampled after it;
each ends the response incomplete with reason ``deadline``.

:class:`LoopState` is the one state object per response (conversation so far, usage, rounds,
calls run).  A tool's failure is an outcome the model reads, never an error of the run
(:mod:`app.tools.base`); cancellation stops the current generation or the running tool.  The
toolbox is closed when the loop ends, whatever ends it.  Calls the client approved in the
previous response (``approved``) run before the first step, whose generation then opens here.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from app import metrics
from app.core import events as ev
from app.core import tracing
from app.core.conversation import Conversation, GenerationParams, Message, TextPart, ToolCall, ToolChoice
from app.core.errors import GatewayError, to_event
from app.core.output import Usage
from app.engine.generation import ModelRoute, Prepared, open_stream, prepare
from app.tools.base import Toolbox, ToolOutcome


@dataclass(frozen=True, slots=True)
class LoopLimits:
    max_tool_calls: int | None = None  # the request's bound on hosted calls
    max_rounds: int = 8
    deadline_seconds: float = 300.0
    max_parallel: int = 4


@dataclass(frozen=True, slots=True)
class Final:
    finished: ev.Finished


@dataclass(frozen=True, slots=True)
class RunHosted:
    calls: tuple[ToolCall, ...]
    then: Literal["sample", "return"]


@dataclass(frozen=True, slots=True)
class Stop:
    limit: Literal["max_tool_calls", "max_rounds", "deadline"]
    unrun: tuple[ToolCall, ...] = ()


Decision = Final | RunHosted | Stop


@dataclass
class StepOutput:
    """What one generation produced, as the next prompt needs it."""

    reasoning: list[str] = field(default_factory=list)
    content: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)

    def observe(self, event: ev.Event) -> None:
        if isinstance(event, ev.ReasoningDelta):
            self.reasoning.append(event.text)
        elif isinstance(event, ev.PreambleDelta | ev.TextDelta):
            self.content.append(event.text)
        elif isinstance(event, ev.ToolCallDone):
            self.calls.append(ToolCall(event.call_id, event.name, event.arguments))

    def message(self) -> Message:
        text = "".join(self.content)
        return Message("assistant", (TextPart(text),) if text else (), tool_calls=tuple(self.calls),
                       reasoning="".join(self.reasoning) or None)


def add_usage(a: Usage, b: Usage) -> Usage:
    return Usage(a.prompt_tokens + b.prompt_tokens, a.completion_tokens + b.completion_tokens,
                 a.reasoning_tokens + b.reasoning_tokens, a.cached_tokens + b.cached_tokens)


@dataclass
class LoopState:
    """One response's loop: the conversation so far, usage, rounds and hosted calls run."""

    conversation: Conversation
    limits: LoopLimits
    started: float = field(default_factory=time.monotonic)
    usage: Usage = field(default_factory=Usage)
    rounds: int = 0
    calls_run: int = 0

    def decide(self, step: StepOutput, finished: ev.Finished, toolbox: Toolbox) -> Decision:
        hosted = tuple(c for c in step.calls if toolbox.owns(c.name) and not toolbox.needs_approval(c.name))
        if not hosted:
            return Final(finished)
        limits = self.limits
        if limits.max_tool_calls is not None and self.calls_run + len(hosted) > limits.max_tool_calls:
            return Stop("max_tool_calls", hosted)
        if time.monotonic() - self.started > limits.deadline_seconds:
            return Stop("deadline", hosted)
        returns = len(hosted) < len(step.calls)  # a client function, or a call awaiting approval
        if not returns and self.rounds >= limits.max_rounds:
            return Stop("max_rounds", hosted)
        return RunHosted(hosted, "return" if returns else "sample")

    def remaining(self) -> float:
        return self.limits.deadline_seconds - (time.monotonic() - self.started)


async def _run_calls(toolbox: Toolbox, calls: Sequence[ToolCall], state: LoopState,
                     ) -> AsyncIterator[tuple[ToolCall, ToolOutcome]]:
    """Run ``calls`` concurrently (bounded), yielding each outcome in the model's order."""
    gate = asyncio.Semaphore(state.limits.max_parallel)

    async def one(call: ToolCall) -> ToolOutcome:
        async with gate:
            try:
                with tracing.span(f"execute_tool {call.name}", {
                        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call.name,
                        "gen_ai.tool.call.id": call.id}) as span:
                    async with asyncio.timeout(max(state.remaining(), 0.001)):
                        outcome = await toolbox.call(call.name, call.arguments)
                    if span is not None and outcome.error is not None:
                        tracing.failed(span, "tool_error")
                    return outcome
            except TimeoutError:
                return ToolOutcome("", "The response reached its time limit during this call.")

    tasks = [asyncio.ensure_future(one(call)) for call in calls]
    try:
        for call, task in zip(calls, tasks, strict=True):
            yield call, await task
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    state.calls_run += len(calls)


def _tool_messages(results: Sequence[tuple[ToolCall, ToolOutcome]]) -> tuple[Message, ...]:
    return tuple(Message("tool", (TextPart(outcome.output if outcome.error is None
                                           else outcome.output or f"Error: {outcome.error}"),),
                         tool_call_id=call.id) for call, outcome in results)


async def agent_loop(route: ModelRoute, first: AsyncIterator[ev.Event] | None, prepared: Prepared,
                     params: GenerationParams, toolbox: Toolbox, limits: LoopLimits, *,
                     truncate: bool = False, approved: Sequence[tuple[ToolCall, str]] = (),
                     ) -> AsyncIterator[ev.Event]:
    """The events of every step of one response (see the module docstring).  ``params`` are
    the request's, before any step's budget; ``approved`` pairs a call with the approval
    request it answers."""
    state = LoopState(prepared.conversation, limits)
    stream = first
    try:
        if approved:
            for call, request_id in approved:
                yield ev.HostedCallStarted(call.id, call.name, call.arguments, request_id)
            results = []
            async for call, outcome in _run_calls(toolbox, [c for c, _ in approved], state):
                results.append((call, outcome))
                yield ev.HostedCallDone(call.id, outcome.output, outcome.error, outcome.detail)
            state.conversation = replace(state.conversation, messages=(
                *state.conversation.messages, Message("assistant", tool_calls=tuple(c for c, _ in results)),
                *_tool_messages(results)))
        while True:
            if stream is None:
                step_params = _step_params(params, state)
                if step_params is None:
                    yield ev.Finished("length", state.usage)
                    return
                try:
                    nxt = await prepare(route, state.conversation, step_params, truncate=truncate)
                    state.conversation = nxt.conversation
                    stream = await open_stream(route, nxt)
                except GatewayError as exc:
                    yield to_event(exc)
                    return
            state.rounds += 1
            if state.rounds > 1 and (stats := metrics.current()) is not None:
                stats.tool_rounds += 1  # a generation after hosted tools ran
            step = StepOutput()
            finished: ev.Finished | None = None
            deadline = asyncio.get_running_loop().time() + state.remaining()
            while True:
                try:  # the deadline bounds the wait for the model, never the time spent at yield
                    async with asyncio.timeout_at(deadline):
                        event = await anext(stream)
                except StopAsyncIteration:
                    break
                except TimeoutError:  # the generation is stopped (its upstream request closed)
                    await _close(stream)
                    stream = None
                    yield ev.Finished("length", state.usage, limit="deadline")
                    return
                if isinstance(event, ev.Finished):
                    finished = event
                    break
                yield event
                if isinstance(event, ev.Error):
                    return
                step.observe(event)
            await _close(stream)
            stream = None
            if finished is None:  # pragma: no cover - every stream ends with a terminal
                yield ev.Error("The model's output ended without an end.", code="invalid_model_output")
                return
            state.usage = add_usage(state.usage, finished.usage)
            decision = state.decide(step, finished, toolbox)
            if (stats := metrics.current()) is not None:  # per step in the access log
                calls = len(decision.calls) if isinstance(decision, RunHosted) else 0
                stats.steps.append({"prompt_tokens": finished.usage.prompt_tokens,
                                    "completion_tokens": finished.usage.completion_tokens,
                                    "hosted_calls": calls})
            if isinstance(decision, Final):
                yield replace(decision.finished, usage=state.usage)
                return
            if isinstance(decision, Stop):
                for call in decision.unrun:
                    yield ev.HostedCallDone(call.id, "", f"Not run: the response reached {decision.limit}.")
                yield ev.Finished("length", state.usage, limit=decision.limit)
                return
            results = []
            async for call, outcome in _run_calls(toolbox, decision.calls, state):
                results.append((call, outcome))
                yield ev.HostedCallDone(call.id, outcome.output, outcome.error, outcome.detail)
            if decision.then == "return":
                yield ev.Finished("tool_calls", state.usage)
                return
            if state.remaining() <= 0:  # the calls used up the time: no generation after them
                yield ev.Finished("length", state.usage, limit="deadline")
                return
            state.conversation = replace(state.conversation, messages=(
                *state.conversation.messages, step.message(), *_tool_messages(results)))
    finally:
        if stream is not None:
            await _close(stream)
        await toolbox.aclose()


def _step_params(params: GenerationParams, state: LoopState) -> GenerationParams | None:
    """A later step's parameters: a forced tool is forced once (then ``auto``), and
    ``max_tokens`` is what the earlier steps left; None when nothing is left."""
    choice = params.tool_choice
    if state.rounds and choice.mode == "required":
        choice = ToolChoice("auto", choice.allowed)
    left = None
    if params.max_tokens is not None:
        left = params.max_tokens - state.usage.completion_tokens
        if left <= 0:
            return None
    return replace(params, tool_choice=choice, max_tokens=left)


async def _close(stream: AsyncIterator[ev.Event]) -> None:
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await aclose()
