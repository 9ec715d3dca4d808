"""What a Responses run does when it starts and ends: :class:`StoreHooks` persist a stored
response at both (a process that dies mid-run leaves a response that reads ``failed`` /
``run_lost``, never a 404), :class:`EndHooks` report the run's tokens once it has ended (budgets,
usage), whatever ended it and however often the end is retried.

The start of a non-stream foreground run (``wait``) is written alongside its generation, not
before it, and only once the run has lasted :data:`START_AFTER`: its client learns its id only
from the answer, so no one can read or cancel it while it runs, and a crash before its end
leaves nothing its client could ask for.  A run that ends sooner (a short answer) is written
once, at its end, instead of twice; a longer one gets its start written (listed while it runs,
read as ``failed`` after a crash).  Its end is written after its start, before the answer (the
answer still comes only once the end is committed).
A streamed or background run's start is written before its first event, as before: its
client has its id at once and may read or cancel it from any replica."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from app.api.responses.encode import ResponsesEncoder
from app.engine.run import Run, RunHooks
from app.stores.base import ResponseStore

Json = dict[str, Any]
log = logging.getLogger(__name__)
START_AFTER = 0.1  # seconds a wait run lasts before its start is written (see above)


class StoreHooks:
    """Persist a stored response when its run starts (a crash mid-run then leaves a failed
    response, not a 404) and when it ends."""

    def __init__(self, store: ResponseStore, context: list[Json], tenant: str) -> None:
        self._store = store
        self._context = context
        self._tenant = tenant
        self._starting: asyncio.Task[None] | None = None  # a wait run's start, due or being written
        self._writing = False  # that start's write has begun: it is awaited, never cancelled

    async def started(self, run: Run) -> None:
        resource = snapshot(run)
        if run.mode == "wait":  # written while the generation runs (see the module's docstring)
            self._starting = asyncio.get_running_loop().create_task(self._start_later(resource))
            return
        await self._store.put(resource, self._context, self._tenant)

    async def _start_later(self, resource: Json) -> None:
        await asyncio.sleep(START_AFTER)
        self._writing = True
        await self._store.put(resource, self._context, self._tenant)

    async def ended(self, run: Run) -> None:
        starting = self._starting
        if starting is not None:  # the end's write comes after the start's, never before
            if not self._writing:  # ended before its start was due: the end's write alone
                starting.cancel()
            if not starting.done():  # (a write begun is one transaction: awaited, not cancelled)
                await asyncio.wait([starting])
            self._starting = None
            if not starting.cancelled() and starting.exception() is not None:
                # the end's write below stores the whole response anyway
                log.warning("response %s: could not store that it started (%s)", run.id,
                            type(starting.exception()).__name__)
        if run.replay is not None:  # a background run: its events (the held terminal too)
            await self._store.put_events(run.id, self._tenant, [*run.replay.events, *run.held])
        await self._store.put(snapshot(run), self._context, self._tenant)


class EndHooks:
    """``inner``'s hooks, then ``on_end(total tokens)`` once the run has ended."""

    def __init__(self, inner: RunHooks | None, on_end: Callable[[int], None]) -> None:
        self._inner = inner
        self._on_end: Callable[[int], None] | None = on_end

    async def started(self, run: Run) -> None:
        if self._inner is not None:
            await self._inner.started(run)

    async def ended(self, run: Run) -> None:
        try:
            if self._inner is not None:
                await self._inner.ended(run)
        finally:
            if self._on_end is not None:  # once, however often the end is retried
                on_end, self._on_end = self._on_end, None
                usage = snapshot(run).get("usage") or {}
                on_end(int(usage.get("total_tokens") or 0))


def snapshot(run: Run) -> Json:
    """The response resource as the run's events have folded it so far."""
    assert isinstance(run.encoder, ResponsesEncoder)
    return run.encoder.snapshot()
