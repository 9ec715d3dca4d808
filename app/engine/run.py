"""One run: a producer task that drives generation events through an API's encoder.

The task pulls :mod:`app.core.events` from the generation, hands each to the run's
:class:`Encoder` (the only API-specific part) and, when the run is streamed, queues
what the encoder returns for :meth:`Run.frames`.  It is the only loop over events in
the gateway.  It always ends with exactly one terminal: the encoder's own for
``Finished`` / ``Error``, an ``Error`` for a failure of the loop itself or for
:meth:`Run.stop` (shutdown), or the encoder's :meth:`Encoder.cancel` for
:meth:`Run.cancel` (client gone, cancel endpoint).  The upstream request is closed
whatever ends the run, and :class:`RunHooks` see it start and end (persistence).  A
background run also keeps its payloads for readers that come and go (:mod:`.replay`).

A run is designed to outlive its HTTP request (background responses, the cancel
endpoint) and to be the unit that later holds several generations with tool calls in
between: the loop only needs an async iterator of events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Literal, Protocol

from app.core import events as ev
from app.core.access import Principal
from app.core.errors import GatewayError, Overloaded, from_event, to_event
from app.engine.replay import Replay

log = logging.getLogger("ocm_gateway")

Json = dict[str, Any]
Mode = Literal["stream", "wait", "background"]
Sink = Callable[[Json | None], None]  # where a streamed run's payloads go (None: its end)


# Storing a run's end is retried for END_WAIT seconds (a database restart, a failover), the
# pause doubling from 0.1 s up to 2 s.  The terminal event waits for it (see _persist_end).
END_WAIT = 12.0
# Events of one upstream chunk arrive without a suspension between them: the loop is given back
# every YIELD_EVERY events, so a huge chunk (a hostile or batching backend) never stalls it
# (~1 ms of events at most); an 80-token read is one write to the client, not three
YIELD_EVERY = 256


class EndNotStored(Overloaded):
    """A stored run's end could not be stored: its client hears this instead of the terminal
    it would have had (never ``completed`` for a response the store does not have)."""

    code = "store_unavailable"

    def __init__(self) -> None:
        super().__init__("The answer was generated but could not be stored (the store is "
                         "unavailable), so it is not kept; try again.", retry_after=1.0)


class Encoder(Protocol):
    """An API's view of a run: events in, that API's payloads out (framing is the http
    layer's).  ``result()`` is the non-streaming body: the fold of everything encoded."""

    terminal: bool

    def start(self) -> list[Json]: ...

    def encode(self, event: ev.Event) -> list[Json]: ...

    def cancel(self) -> list[Json]: ...

    def result(self) -> Json: ...


class BatchedFrames(Protocol):
    def batched(self) -> AsyncIterator[list[Json]]: ...


class Streamable(Protocol):
    """What the http layer streams: a :class:`Run`, or the merged choices of several."""

    def frames(self) -> BatchedFrames: ...

    def stop(self, reason: GatewayError) -> None: ...


class RunHooks(Protocol):
    """Persistence: ``started`` before the first event is produced (a failure aborts the
    run), ``ended`` once it reached its terminal, before anyone hears that terminal (retried
    for :data:`END_WAIT` seconds, so it must be idempotent; still failing, the run ends with
    :class:`EndNotStored` instead)."""

    async def started(self, run: Run) -> None: ...

    async def ended(self, run: Run) -> None: ...


class Run:
    """A run in flight; see the module docstring."""

    def __init__(self, run_id: str, model: str, owner: Principal, encoder: Encoder, mode: Mode,
                 hooks: RunHooks | None, registry: dict[str, Run], sink: Sink | None = None,
                 ) -> None:
        self.id = run_id
        self.model = model
        self.owner = owner
        self.encoder = encoder
        self.mode = mode
        self.hooks = hooks
        self.error: ev.Error | None = None  # the terminal error, when the run ended in one
        self.started_at = time.time()
        self.chunks = 0  # output events so far (about one per token; the console's "tokens so far")
        self.task: asyncio.Task[None] | None = None
        self._queue: asyncio.Queue[Json | None] = asyncio.Queue()
        # a run that is one choice of several hands its payloads to their merge instead
        self._put: Sink = sink if sink is not None else self._queue.put_nowait
        self._registry = registry
        self._stopping: GatewayError | None = None
        # A task cancelled before its first step never enters its body (no ``finally``: the
        # upstream request would stay open), so such a cancel waits for that first step.
        self._started = False
        self._cancel_pending = False
        # a background run keeps its payloads for readers that come and go (resumable)
        self.replay: Replay | None = Replay() if mode == "background" else None
        # A persisted run's terminal payloads, held until its end is stored (read your writes)
        self.held: list[Json] = []
        self.ending = False  # its end is being stored (what it says is not the store's yet)
        self.unstored: EndNotStored | None = None  # its end could not be stored

    @property
    def persisted(self) -> bool:
        return self.hooks is not None

    def begin(self, events: AsyncIterator[ev.Event] | Awaitable[AsyncIterator[ev.Event]]) -> None:
        """Start the producer; ``events`` may still have to be opened (background runs)."""
        self._registry[self.id] = self
        self.task = asyncio.get_running_loop().create_task(self._produce(events))

    async def _produce(self, source: AsyncIterator[ev.Event] | Awaitable[AsyncIterator[ev.Event]],
                       ) -> None:
        stream = source if isinstance(source, AsyncIterator) else None
        encoder = self.encoder
        self._started = True
        try:
            if self._cancel_pending:
                raise asyncio.CancelledError
            self._emit(encoder.start())
            if self.mode == "background" and self.hooks is not None:
                try:  # queued → in_progress, as every replica reading the store sees it
                    await self.hooks.started(self)
                except Exception:
                    log.exception("run %s: could not store that it started", self.id)
            if stream is None and not isinstance(source, AsyncIterator):
                stream = await source
            assert stream is not None
            if self.mode == "wait":  # only the fold is seen: deltas that come together are one
                coalesce = getattr(stream, "coalesce", None)
                if coalesce is not None:
                    coalesce()
            async for event in stream:
                self.chunks += 1
                if not self.chunks % YIELD_EVERY:  # one upstream chunk of 100k tokens is 100k events
                    await asyncio.sleep(0)
                if isinstance(event, ev.Error):
                    self.error = event
                self._emit(encoder.encode(event))
                if encoder.terminal:
                    break
        except asyncio.CancelledError:
            pass
        except GatewayError as exc:  # opening a background run's generation failed
            self._fail(to_event(exc))
        except Exception as exc:  # an encoder bug must not leave a stream without its end
            log.exception("run %s failed", self.id)
            self._fail(ev.Error(f"The gateway failed while answering ({type(exc).__name__}).",
                                code="internal_error"))
        finally:
            if stream is not None:
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:
                    with contextlib.suppress(Exception):
                        await aclose()
            elif not isinstance(source, AsyncIterator):
                close = getattr(source, "close", None)  # a coroutine never awaited
                if close is not None:
                    close()
            if not encoder.terminal:
                if self._stopping is not None:
                    self._fail(to_event(self._stopping))
                else:
                    self._emit(encoder.cancel())
            if self.hooks is not None:  # still in the registry: heartbeats, shutdown's wait
                self.ending = True
                if not await self._persist_end(self.hooks):
                    self._end_unstored()
                held, self.held = self.held, []
                self._deliver(held)
            self._registry.pop(self.id, None)
            if self.replay is not None:
                self.replay.end()
            self._put(None)

    async def _persist_end(self, hooks: RunHooks) -> bool:
        """Store the run's end, retried for :data:`END_WAIT` seconds: a store that is briefly
        away (a database restart) still gets it, and the client hears the end only once it is
        stored (read your writes).  False: it could not be stored."""
        loop = asyncio.get_running_loop()
        deadline, delay = loop.time() + END_WAIT, 0.1
        while True:
            try:
                await hooks.ended(self)
                return True
            except Exception as exc:
                if loop.time() + delay > deadline:
                    log.error("run %s: could not store its end within %.0f s (%s: %s)", self.id,
                              END_WAIT, type(exc).__name__, exc)
                    return False
                log.warning("run %s: storing its end failed (%s); retrying", self.id,
                            type(exc).__name__)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _end_unstored(self) -> None:
        """The end could not be stored: the held terminal becomes the encoder's account of
        that (``unstored``: a ``store_unavailable`` failure), and a waiting client gets a 503."""
        self.unstored = EndNotStored()
        error = to_event(self.unstored)
        self.error = error
        unstored = getattr(self.encoder, "unstored", None)  # (error, held) -> what replaces held
        if unstored is not None and self.held:
            self.held = unstored(error, self.held)

    def _fail(self, error: ev.Error) -> None:
        if not self.encoder.terminal:
            self.error = error
            self._emit(self.encoder.encode(error))

    def _emit(self, payloads: list[Json]) -> None:
        if self.hooks is not None and self.encoder.terminal:  # heard once it is stored
            self.held.extend(payloads)
        else:
            self._deliver(payloads)

    def _deliver(self, payloads: list[Json]) -> None:
        if self.mode == "stream":
            for payload in payloads:
                self._put(payload)
        elif self.replay is not None:
            for payload in payloads:
                self.replay.push(payload)

    # -- consumers -------------------------------------------------------------------
    def frames(self) -> Frames:
        """The encoded events, once (streamed runs only)."""
        return Frames(self)

    async def result(self) -> Json:
        """Wait for the end; the encoder's fold, or the terminal error raised with the status
        its code has.  Leaving early (client gone) cancels the run unless it is a background
        one."""
        assert self.task is not None
        try:
            await asyncio.shield(self.task)
        except asyncio.CancelledError:
            if self.mode != "background":
                self.cancel()
            raise
        if self.unstored is not None:
            raise self.unstored
        if self.error is not None:
            raise from_event(self.error)
        return self.encoder.result()

    async def finished(self, within: float) -> None:
        if self.task is not None:
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.task), within)

    # -- control -----------------------------------------------------------------------
    def cancel(self) -> None:
        """End the run as cancelled (a no-op once it has ended, its end perhaps still being
        stored: that is never interrupted)."""
        if self.task is None or self.encoder.terminal:
            return
        if self._started:
            self.task.cancel()
        else:
            self._cancel_pending = True

    def stop(self, reason: GatewayError) -> None:
        """End the run with ``reason`` as its terminal error (shutdown)."""
        if self._stopping is None:
            self._stopping = reason
        self.cancel()


class Frames:
    """A run's encoded events as an async iterator that is safe to cancel mid-wait (no
    event is lost) and that cancels the run when closed before the end (client gone)."""

    def __init__(self, run: Run) -> None:
        self._run = run
        self._done = False

    def __aiter__(self) -> Frames:
        return self

    async def __anext__(self) -> Json:
        if self._done:
            raise StopAsyncIteration
        payload = await self._run._queue.get()
        if payload is None:
            self._done = True
            raise StopAsyncIteration
        return payload

    @property
    def ended(self) -> bool:
        """The run's end was taken: nothing follows the batch just returned."""
        return self._done

    async def batch(self) -> list[Json]:
        """The next payload and every one already queued behind it."""
        batch = [await self.__anext__()]
        queue = self._run._queue
        while not queue.empty():
            payload = queue.get_nowait()
            if payload is None:
                self._done = True
                break
            batch.append(payload)
        return batch

    def batched(self) -> Batches:
        """The same payloads, every one already produced together: a burst from upstream
        (many events in one read, or a busy loop) becomes one write to the client."""
        return Batches(self)

    async def aclose(self) -> None:
        if not self._done and self._run.mode != "background":
            self._run.cancel()


class Batches:
    """:class:`Frames` in lists of what is ready at once (same end, same cancellation)."""

    def __init__(self, frames: Frames) -> None:
        self._frames = frames

    def __aiter__(self) -> Batches:
        return self

    @property
    def ended(self) -> bool:
        return self._frames.ended

    async def __anext__(self) -> list[Json]:
        return await self._frames.batch()

    async def aclose(self) -> None:
        await self._frames.aclose()
