"""Several choices of one request (``n > 1``): one run per choice, merged by choice index.

Each choice is its own :class:`~app.engine.run.Run` of the same prepared prompt (rendered
and tokenized once), so each has its own parser, stop strings, tool guard and encoder
(which writes its choice ``index``), and each holds its own admission slot: ``n`` counts
against ``max_inflight`` like ``n`` requests.  With a ``seed``, choice ``i`` samples with
``seed + i`` (the same seed would make every choice the same answer).

:class:`Choices` is what the http layer streams: the runs' payloads in the order they are
produced (interleaved by choice), then what the API adds at the end (chat: the usage summed
over the choices).  An error in one choice ends the whole answer with that error and cancels
the others; closing the stream (client gone) or :meth:`Choices.stop` (shutdown) ends every
choice, so no generation is left running upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any

from app.core.errors import GatewayError, from_event
from app.engine.run import Json, Run

Item = tuple[int, Json | None, bool]  # (choice, payload or None at its end, the payload is its error's)


class Choices:
    """The runs of one request's choices; see the module docstring."""

    def __init__(self, n: int, closing: Callable[[list[Run]], list[Json]] | None = None) -> None:
        self.n = n
        self.runs: list[Run] = []
        self._closing = closing  # payloads after every choice ended well (usage)
        self._queue: asyncio.Queue[Item] = asyncio.Queue()

    def sink(self, index: int) -> Callable[[Json | None], None]:
        """Where choice ``index``'s run puts its payloads; whether one belongs to the run's
        terminal error is decided when it is produced (the error is set just before)."""
        def put(payload: Json | None) -> None:
            self._queue.put_nowait((index, payload, self.runs[index].error is not None))
        return put

    async def open(self, starts: list[Coroutine[Any, Any, None]]) -> None:
        """Run every choice's start (open its generation, begin its run) at once, so a choice
        that got its admission slot streams while others wait for theirs.  When one fails,
        or the caller is cancelled, every choice is ended before the error propagates."""
        tasks = [asyncio.ensure_future(start) for start in starts]
        try:
            for task in asyncio.as_completed(tasks):
                await task
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.close()
            raise

    async def close(self) -> None:
        """Cancel every choice and wait until each has closed its upstream request."""
        self.cancel()
        tasks = [run.task for run in self.runs if run.task is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def cancel(self, *, keep: int | None = None) -> None:
        for i, run in enumerate(self.runs):
            if i != keep:
                run.cancel()

    def stop(self, reason: GatewayError) -> None:
        for run in self.runs:
            run.stop(reason)

    def frames(self) -> ChoiceFrames:
        return ChoiceFrames(self)

    async def results(self) -> list[Json]:
        """Every choice's non-streaming body, by index; the first choice that fails fails the
        request (its error raised, the other choices cancelled), as does leaving early."""
        tasks = {run.task for run in self.runs if run.task is not None}
        try:
            while tasks:
                _, tasks = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                failed = next((r for r in self.runs if r.error is not None and r.task is not None
                               and r.task.done()), None)
                if failed is not None and failed.error is not None:
                    self.cancel()
                    raise from_event(failed.error)
        except asyncio.CancelledError:
            self.cancel()
            raise
        return [run.encoder.result() for run in self.runs]


class ChoiceFrames:
    """The merged payloads of :class:`Choices` as an async iterator (safe to cancel while
    waiting; closing it before the end cancels every choice)."""

    def __init__(self, choices: Choices) -> None:
        self._choices = choices
        self._ended = 0
        self._failed: int | None = None  # the choice whose error ends the answer
        self._ready: list[Json] = []
        self._done = False

    def __aiter__(self) -> ChoiceFrames:
        return self

    def _take(self, item: Item) -> None:
        index, payload, is_error = item
        choices = self._choices
        if payload is None:
            self._ended += 1
            if self._failed == index:
                self._done = True
            elif self._failed is None and self._ended == choices.n:
                self._done = True
                if choices._closing is not None:
                    self._ready.extend(choices._closing(choices.runs))
            return
        if self._failed is None and is_error:
            self._failed = index
            choices.cancel(keep=index)
        if self._failed is None or self._failed == index:
            self._ready.append(payload)

    async def _fill(self) -> None:
        while not self._ready and not self._done:
            self._take(await self._choices._queue.get())

    async def __anext__(self) -> Json:
        await self._fill()
        if not self._ready:
            raise StopAsyncIteration
        return self._ready.pop(0)

    async def batch(self) -> list[Json]:
        """The next payloads and every one already produced behind them."""
        await self._fill()
        queue = self._choices._queue
        while not self._done and not queue.empty():
            self._take(queue.get_nowait())
        if not self._ready:
            raise StopAsyncIteration
        out, self._ready = self._ready, []
        return out

    def batched(self) -> ChoiceBatches:
        return ChoiceBatches(self)

    async def aclose(self) -> None:
        if not self._done:
            self._done = True
            with contextlib.suppress(Exception):
                self._choices.cancel()


class ChoiceBatches:
    """:class:`ChoiceFrames` in lists of what is ready at once (same end, same cancellation)."""

    def __init__(self, frames: ChoiceFrames) -> None:
        self._frames = frames

    def __aiter__(self) -> ChoiceBatches:
        return self

    async def __anext__(self) -> list[Json]:
        return await self._frames.batch()

    async def aclose(self) -> None:
        await self._frames.aclose()
