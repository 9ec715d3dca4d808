"""What a Responses run does when it starts and ends: :class:`StoreHooks` persist a stored
response at both (a process that dies mid-run leaves a response that reads ``failed`` /
``run_lost``, never a 404), :class:`EndHooks` report the run's tokens once it has ended (budgets,
usage), whatever ended it and however often the end is retried."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.api.responses.encode import ResponsesEncoder
from app.engine.run import Run, RunHooks
from app.stores.base import ResponseStore

Json = dict[str, Any]


class StoreHooks:
    """Persist a stored response when its run starts (a crash mid-run then leaves a failed
    response, not a 404) and when it ends."""

    def __init__(self, store: ResponseStore, context: list[Json], tenant: str) -> None:
        self._store = store
        self._context = context
        self._tenant = tenant

    async def started(self, run: Run) -> None:
        await self._store.put(snapshot(run), self._context, self._tenant)

    async def ended(self, run: Run) -> None:
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
