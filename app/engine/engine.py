"""Plan and start runs: the one entry point both APIs call.

:meth:`Engine.start` looks the model up, applies the model's configured defaults, checks
what the backend can do, renders the prompt and fits it to the real context window
(truncating the oldest turns when the request allows it), then asks the API for its
encoder (which may describe the :class:`Plan`), opens the generation and starts the
:class:`~app.engine.run.Run`.  Everything that fails before the run starts raises a
:class:`~app.core.errors.GatewayError` (an HTTP error); a background run opens its generation
inside its task, so only the planning can fail its request.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace

from app.core import events as ev
from app.core.access import ANONYMOUS, Principal
from app.core.conversation import Conversation, GenerationParams, ReasoningEffort, ToolCall
from app.engine.choices import Choices
from app.engine.count import TokenCount, count_tokens
from app.engine.generation import ModelRoute, Prepared, open_stream, prepare
from app.engine.loop import LoopLimits, agent_loop
from app.engine.registry import Registry
from app.engine.replay import Mirror
from app.engine.run import Encoder, Json, Mode, Run, RunHooks
from app.tools.base import Toolbox


@dataclass(frozen=True, slots=True)
class RunRequest:
    """What an API asks for, in the internal model."""

    model: str
    conversation: Conversation
    params: GenerationParams
    truncate: bool = False  # drop the oldest turns to fit the window (Responses ``truncation: auto``)
    # hosted tools: the run becomes an agentic loop (:mod:`app.engine.loop`) that owns the toolbox
    toolbox: Toolbox | None = None
    limits: LoopLimits = field(default_factory=LoopLimits)
    approved: tuple[tuple[ToolCall, str], ...] = ()  # approved calls (and their requests) to run first


@dataclass(frozen=True, slots=True)
class Plan:
    """What the engine decided before generating (encoders echo parts of it)."""

    route: ModelRoute
    params: GenerationParams  # with the model's defaults and within the context budget
    reasoning_effort: ReasoningEffort  # the effort the model runs at
    dropped_messages: int  # removed by truncation


class Engine:
    """Starts runs and knows the ones in flight (by id) in this process."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.runs: dict[str, Run] = {}
        self.mirror: Callable[[str], Mirror] | None = None  # set with [redis]: app/engine/signals.py

    async def plan(self, request: RunRequest) -> tuple[Plan, Prepared]:
        route = self.registry.route(request.model)
        params = self.registry.with_defaults(request.model, request.params)
        prepared = await prepare(route, request.conversation, params, truncate=request.truncate)
        effort = params.reasoning_effort or route.default_reasoning_effort
        return Plan(route, prepared.params, effort, prepared.dropped_messages), prepared

    def _mirrored(self, run: Run) -> Run:
        """A background run's events copied for readers on other replicas (``mirror``)."""
        if run.replay is not None and self.mirror is not None:
            run.replay.mirror = self.mirror(run.id)
        return run

    async def count(self, request: RunRequest) -> TokenCount:
        """The tokens of the prompt this request would send (planned, never opened)."""
        return await count_tokens(self.registry, request.model, request.conversation, request.params,
                                  truncate=request.truncate)

    async def start_prepared(self, model: str, route: ModelRoute, prepared: Prepared, encoder: Encoder, *,
                             run_id: str, mode: Mode, owner: Principal = ANONYMOUS) -> Run:
        """A run of a prompt the caller prepared itself (a raw completion: no conversation to
        render); opened here, like every generation."""
        assert mode != "background"
        stream = await open_stream(route, prepared)
        run = Run(run_id, model, owner, encoder, mode, None, self.runs)
        run.begin(stream)
        return run

    async def start_prepared_choices(self, model: str, prepared: list[tuple[ModelRoute, Prepared, Encoder]],
                                     *, run_id: str, mode: Mode, owner: Principal = ANONYMOUS,
                                     closing: Callable[[list[Run]], list[Json]] | None = None) -> Choices:
        """Several prepared generations as the choices of one answer (``{run_id}-{i}``)."""
        assert mode != "background"
        choices = Choices(len(prepared), closing)

        async def start(run: Run, route: ModelRoute, ready: Prepared) -> None:
            run.begin(await open_stream(route, ready))

        starts = []
        for i, (route, ready, encoder) in enumerate(prepared):
            run = Run(f"{run_id}-{i}", model, owner, encoder, mode, None, self.runs, sink=choices.sink(i))
            choices.runs.append(run)
            starts.append(start(run, route, ready))
        await choices.open(starts)
        return choices

    async def start(self, request: RunRequest, encoder: Callable[[Plan], Encoder], *, run_id: str,
                    mode: Mode, owner: Principal = ANONYMOUS, hooks: RunHooks | None = None) -> Run:
        """Plan, open and start a run.  ``stream`` / ``wait`` runs are opened here, so a
        failure before the first upstream chunk raises; ``background`` runs are persisted
        first and opened by their task."""
        toolbox = request.toolbox
        if toolbox is not None:
            try:
                return await self._start_loop(request, toolbox, encoder, run_id, mode, owner, hooks)
            except BaseException:
                await toolbox.aclose()  # the loop owns it only once it has started
                raise
        plan, prepared = await self.plan(request)
        run = self._mirrored(Run(run_id, request.model, owner, encoder(plan), mode, hooks, self.runs))
        if mode == "background":
            if hooks is not None:
                await hooks.started(run)
            run.begin(open_stream(plan.route, prepared))
            return run
        stream = await open_stream(plan.route, prepared)
        if hooks is not None:
            try:
                await hooks.started(run)
            except BaseException:
                await stream.aclose()
                raise
        run.begin(stream)
        return run

    async def _start_loop(self, request: RunRequest, toolbox: Toolbox, encoder: Callable[[Plan], Encoder],
                          run_id: str, mode: Mode, owner: Principal, hooks: RunHooks | None) -> Run:
        """A run with hosted tools: its first generation opens here (errors before the first
        chunk stay HTTP errors) unless approved calls must run first; the loop does the rest."""
        plan, prepared = await self.plan(request)
        run = self._mirrored(Run(run_id, request.model, owner, encoder(plan), mode, hooks, self.runs))
        params = self.registry.with_defaults(request.model, request.params)

        async def events() -> AsyncIterator[ev.Event]:
            try:
                first = None if request.approved else await open_stream(plan.route, prepared)
            except BaseException:
                await toolbox.aclose()  # idempotent: start() may close it too
                raise
            return agent_loop(plan.route, first, prepared, params, toolbox, request.limits,
                              truncate=request.truncate, approved=request.approved)

        if mode == "background" or request.approved:
            if hooks is not None:
                await hooks.started(run)
            run.begin(events())
            return run
        stream = await events()
        if hooks is not None:
            try:
                await hooks.started(run)
            except BaseException:
                await stream.aclose()  # type: ignore[attr-defined]
                raise
        run.begin(stream)
        return run

    async def start_choices(self, request: RunRequest, encoder: Callable[[Plan, int], Encoder],
                            n: int, *, run_id: str, mode: Mode, owner: Principal = ANONYMOUS,
                            closing: Callable[[list[Run]], list[Json]] | None = None) -> Choices:
        """Plan once, then open ``n`` generations of the same prompt, each its own run (choice
        ``i`` with ``seed + i``; see :mod:`app.engine.choices`).  Streamed or waited for,
        never in the background."""
        assert mode != "background"
        plan, prepared = await self.plan(request)
        choices = Choices(n, closing)

        async def start(run: Run, prepared: Prepared) -> None:
            run.begin(await open_stream(plan.route, prepared))

        starts = []
        for i in range(n):
            seed = prepared.params.seed
            params = replace(prepared.params, n=1, seed=None if seed is None else seed + i)
            run = Run(f"{run_id}-{i}", request.model, owner, encoder(replace(plan, params=params), i),
                      mode, None, self.runs, sink=choices.sink(i))
            choices.runs.append(run)
            starts.append(start(run, replace(prepared, params=params)))
        await choices.open(starts)
        return choices

    def find(self, run_id: str) -> Run | None:
        return self.runs.get(run_id)

    async def shutdown(self, within: float) -> None:
        """Cancel every run and give them ``within`` seconds to persist their end."""
        runs = list(self.runs.values())
        for run in runs:
            run.cancel()
        tasks = [run.task for run in runs if run.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=within)
