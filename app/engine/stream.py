"""One generation's event stream: parser → stop strings → one-call → tool guard → answer
format → metrics.

:class:`EventStream` is what :func:`app.engine.generation.open_stream` returns once the
backend sent its first chunk: it feeds chunks to the format's parser and passes the events
through the request's policies, holding each ``PartDone`` until the next event (a part the
token budget cut is closed as incomplete by the finish).  A huge chunk (one upstream event of
100,000 tokens) is fed in slices where the parser offers ``feed_slices``, the event loop given
back between them.  A backend that gives its chunks a read at a time (``split``:
:class:`adapters.transport.ChunkBatches`) is stepped a read at a time: a read of one event
(a model's paced tokens) goes straight through, a read of several is parsed together (its
adjacent deltas joined for an answer that is only folded, :meth:`EventStream.coalesce`).
A failure of the backend or the parser becomes one terminal ``Error`` event, never an
exception; closing the stream closes the upstream request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from app import metrics
from app.core import events as ev
from app.core.conversation import GenerationParams
from app.core.errors import GatewayError, to_event
from app.core.output import Chunk
from app.engine.policy import AnswerFormat, OneCall, StopSequences, ToolGuard
from app.formats.parsing.base import EventParser

log = logging.getLogger("ocm_gateway")
HUGE = 1024  # a chunk with more token ids or characters is fed in slices (EventStream._feed_slices)


def _huge(chunk: Chunk) -> bool:
    return len(chunk.token_ids) > HUGE or len(chunk.text) > HUGE


def invalid_output(exc: Exception) -> ev.Error:
    """What a client sees when the model's output breaks the parser (never a 500 or a cut)."""
    return ev.Error(f"The model's output could not be parsed ({type(exc).__name__}: "
                    f"{str(exc)[:200]}); the answer was cut short.", code="invalid_model_output")


def _joinable(event: ev.Event) -> str | None:
    """The text of a delta that can be joined with the next one of its kind, else None."""
    if isinstance(event, ev.TextDelta):
        return None if event.logprobs else event.text
    if isinstance(event, ev.ReasoningDelta | ev.PreambleDelta):
        return event.text
    if isinstance(event, ev.ToolCallArgumentsDelta):
        return event.delta
    return None


def _joined(first: ev.Event, texts: list[str]) -> ev.Event:
    """``first`` as one delta of ``texts`` (its own and those joined to it, see ``_merged``)."""
    if len(texts) < 2:
        return first
    text = "".join(texts)
    if isinstance(first, ev.ToolCallArgumentsDelta):
        return ev.ToolCallArgumentsDelta(first.index, text)
    if isinstance(first, ev.TextDelta):
        return ev.TextDelta(text)
    if isinstance(first, ev.ReasoningDelta):
        return ev.ReasoningDelta(text)
    assert isinstance(first, ev.PreambleDelta)
    return ev.PreambleDelta(text)


class EventStream:
    """Async iterator of events for one generation; ``aclose()`` cancels upstream."""

    def __init__(self, first: Chunk | None, chunks: AsyncIterator[Chunk],
                 parser: EventParser, params: GenerationParams,
                 allowed_tools: frozenset[str], model: str = "", upstream_seconds: float = 0.0,
                 release: Callable[[], None] | None = None,
                 strict_tools: dict[str, dict[str, Any] | None] | None = None,
                 answer_schema: dict[str, Any] | None = None,
                 prompt_estimate: Callable[[], int] | None = None) -> None:
        self._first = first
        self._chunks = chunks
        self._parser = parser
        self._stops = StopSequences(params.stop)
        self._guard = ToolGuard(allowed_tools, strict_tools)
        self._one_call = OneCall(params.parallel_tool_calls)
        # only with a strict response format: nothing per text delta otherwise (hot path)
        self._answer = AnswerFormat(answer_schema) if answer_schema is not None else None
        self._iter = self._run()
        self._model = model
        self._upstream = upstream_seconds  # time spent awaiting the backend so far
        self._stats = metrics.current()
        self._closed = False
        self._release = release  # the admission slot, given back when the stream ends
        self._held_part: ev.PartDone | None = None
        self._coalesce = False
        # the parser's feed of several chunks with their deltas joined, once coalescing
        self._feed_joined: Callable[[list[Chunk]], list[ev.Event]] | None = None
        # What the backend did if it never reports its usage (the client left, the backend
        # failed mid-answer): the prompt, and a token per token id (or event) received.
        self._prompt_estimate = prompt_estimate
        self._seen = 0
        self._charged = False
        if self._stats is not None:
            self._stats.metrics.open_streams.inc()

    def __aiter__(self) -> AsyncIterator[ev.Event]:
        return self._iter  # ``async for`` steps the generator itself: no frame of ours per event

    async def __anext__(self) -> ev.Event:
        return await self._iter.__anext__()

    async def aclose(self) -> None:
        await self._iter.aclose()
        self._finish_stats()  # also when the stream was closed before it was ever iterated
        aclose = getattr(self._chunks, "aclose", None)
        if aclose is not None:
            await aclose()

    async def _raw(self) -> AsyncGenerator[ev.Event, None]:
        """Parsed events; any failure of the backend or the parser is one terminal Error."""
        try:
            if self._first is not None:
                self._seen += len(self._first.token_ids) or 1
                if _huge(self._first):
                    async for event in self._feed_slices(self._first):
                        yield event
                else:
                    for event in self._hold_parts(self._parser.feed(self._first)):
                        yield event
            t0 = time.perf_counter()
            split = getattr(self._chunks, "split", None)
            if split is not None:  # what one upstream read brought, one step for all of it
                chunks: list[Chunk] | None
                chunks, reads = split()
                next_read = reads.__anext__  # the reads' own iterator: no layer per read here
                if not chunks:
                    chunks = None
                while True:
                    if chunks is None:
                        try:
                            chunks = await next_read()
                        except StopAsyncIteration:
                            break
                        self._upstream += time.perf_counter() - t0
                    if len(chunks) == 1:  # one event per read (a model's paced tokens): no list
                        chunk = chunks[0]
                        ids = len(chunk.token_ids)
                        self._seen += ids or 1
                        if ids > HUGE or len(chunk.text) > HUGE:
                            async for event in self._feed_slices(chunk):
                                yield event
                        else:
                            events = self._parser.feed(chunk)
                            if len(events) == 1 and self._held_part is None and not isinstance(
                                    events[0], ev.PartDone):
                                yield events[0]  # _hold_parts has nothing to hold or release
                            elif events:
                                for event in self._hold_parts(self._merged(events)):
                                    yield event
                    elif chunks:  # several events: adjacent deltas joined (coalesce)
                        events = []
                        if self._feed_joined is None:  # streamed: a delta a token
                            self._seen += sum(len(chunk.token_ids) or 1 for chunk in chunks)
                        else:
                            seen, huge = 0, False
                            for chunk in chunks:
                                ids = len(chunk.token_ids)
                                seen += ids or 1
                                if ids > HUGE or len(chunk.text) > HUGE:
                                    huge = True
                            self._seen += seen
                            if not huge:  # one delta a part, not a token
                                events = self._feed_joined(chunks)
                                chunks = []
                        for chunk in chunks:
                            if _huge(chunk):
                                for event in self._hold_parts(self._merged(events)):
                                    yield event
                                events = []
                                async for event in self._feed_slices(chunk):
                                    yield event
                            else:
                                events += self._parser.feed(chunk)
                        for event in self._hold_parts(self._merged(events)):
                            yield event
                    chunks = None
                    t0 = time.perf_counter()
            else:
                async for chunk in self._chunks:
                    self._upstream += time.perf_counter() - t0
                    self._seen += len(chunk.token_ids) or 1
                    if _huge(chunk):
                        async for event in self._feed_slices(chunk):
                            yield event
                    else:
                        for event in self._hold_parts(self._parser.feed(chunk)):
                            yield event
                    t0 = time.perf_counter()
            for event in self._hold_parts(self._parser.close()):
                yield event
        except GatewayError as exc:
            yield to_event(exc)
        except Exception as exc:  # a parser or decoder bug must not cut the stream silently
            log.warning("model output could not be parsed", exc_info=exc)
            yield invalid_output(exc)
        if self._held_part is not None:
            yield self._held_part

    async def _feed_slices(self, chunk: Chunk) -> AsyncGenerator[ev.Event, None]:
        """A huge chunk's events (one upstream event of 100,000 tokens: ~150 ms of parsing),
        fed in slices where the parser can (``feed_slices``), the loop given back between."""
        feed_slices = getattr(self._parser, "feed_slices", None)
        if feed_slices is None:
            for event in self._hold_parts(self._parser.feed(chunk)):
                yield event
            return
        for n, events in enumerate(feed_slices(chunk)):
            if n:
                await asyncio.sleep(0)
            for event in self._hold_parts(events):
                yield event

    def coalesce(self) -> None:
        """Join the adjacent deltas of one part that arrive together (one upstream read) into
        one delta: for an answer that is only folded (a non-streaming one), where how its text
        was cut into deltas is never seen; a streamed answer keeps one delta per token."""
        self._coalesce = True
        self._feed_joined = getattr(self._parser, "feed_joined", None)

    def _merged(self, events: list[ev.Event]) -> list[ev.Event]:
        """``events`` with adjacent deltas of the same part joined, when :meth:`coalesce` was
        asked (deltas with logprobs are left as they are)."""
        if not self._coalesce or len(events) < 2:
            return events
        out: list[ev.Event] = []
        run: list[str] = []  # the texts of ``last`` and of the deltas joined to it
        last: ev.Event | None = None
        for event in events:
            text = _joinable(event)
            if text is not None and run and type(event) is type(last) and not (
                    isinstance(event, ev.ToolCallArgumentsDelta)
                    and isinstance(last, ev.ToolCallArgumentsDelta) and event.index != last.index):
                run.append(text)
                continue
            if last is not None:
                out.append(_joined(last, run))
            last, run = event, ([text] if text is not None else [])
        assert last is not None
        out.append(_joined(last, run))
        return out

    def _hold_parts(self, events: list[ev.Event]) -> list[ev.Event]:
        """Each ``PartDone`` is held until the next event: a part the token budget cut
        (``Finished("length")`` right after it) did not complete, and the finish closes it
        as incomplete instead."""
        out: list[ev.Event] = []
        for event in events:
            held, self._held_part = self._held_part, None
            if held is not None and not (isinstance(event, ev.Finished) and event.reason == "length"):
                out.append(held)
            if isinstance(event, ev.PartDone):
                self._held_part = event
            else:
                out.append(event)
        return out

    async def _run(self) -> AsyncGenerator[ev.Event, None]:
        raw = self._raw()
        try:
            async for event in raw:
                answer = self._answer
                if isinstance(event, ev.TextDelta):
                    for out in self._stops.feed(event):
                        if answer is not None:
                            answer.feed(out)
                        yield out
                    if self._stops.matched:
                        yield ev.PartDone("text")
                        finished: ev.Event = ev.Finished("stop", self._parser.usage(),
                                                         stop_sequence=self._stops.sequence)
                        if answer is not None:
                            finished = answer.check(finished) or finished
                        self._observe(finished)
                        yield finished
                        return
                    continue
                if isinstance(event, (ev.PartDone, ev.Finished)):
                    for out in self._stops.flush():
                        if answer is not None:
                            answer.feed(out)
                        yield out
                if isinstance(event, ev.Finished) and answer is not None:
                    event = answer.check(event) or event
                if not self._one_call.keep(event):
                    continue
                if isinstance(event, ev.ToolCallStarted | ev.ToolCallDone):
                    error = (self._guard.check(event) if isinstance(event, ev.ToolCallStarted)
                             else self._guard.check_arguments(event))
                    if error is not None:
                        self._observe(error)
                        yield error
                        return
                self._observe(event)
                yield event
                if isinstance(event, ev.TERMINAL):
                    return
        finally:
            self._finish_stats()
            await raw.aclose()
            aclose = getattr(self._chunks, "aclose", None)
            if aclose is not None:
                await aclose()


    def _observe(self, event: ev.Event) -> None:
        stats = self._stats
        if stats is None:
            return
        if isinstance(event, ev.Finished):
            self._charged = True
            stats.metrics.tokens.labels(self._model, "in").inc(event.usage.prompt_tokens)
            stats.metrics.tokens.labels(self._model, "out").inc(event.usage.completion_tokens)
            stats.tokens += event.usage.total_tokens
            stats.prompt_tokens += event.usage.prompt_tokens
            stats.completion_tokens += event.usage.completion_tokens
            stats.cached_tokens += event.usage.cached_tokens
            stats.reasoning_tokens += event.usage.reasoning_tokens
        elif isinstance(event, ev.Error):
            stats.metrics.backend_errors.labels(self._model, event.code).inc()
            stats.error_code = event.code

    def _charge_estimate(self, stats: metrics.RequestStats) -> None:
        """A generation that ended without its usage (client gone, backend failed, stream
        closed early) still cost its prompt and the tokens produced so far: a key's budget and
        tokens-per-minute would otherwise miss every stream its client leaves early."""
        prompt = self._prompt_estimate() if self._prompt_estimate is not None else 0
        out = self._seen
        stats.metrics.tokens.labels(self._model, "in").inc(prompt)
        stats.metrics.tokens.labels(self._model, "out").inc(out)
        stats.tokens += prompt + out
        stats.prompt_tokens += prompt
        stats.completion_tokens += out

    def _finish_stats(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._release is not None:
            self._release()
        if self._stats is not None:
            if not self._charged:  # ended before the backend's usage: charge what it did
                self._charge_estimate(self._stats)
            self._stats.upstream_seconds += self._upstream
            self._stats.metrics.upstream.labels(self._model).observe(self._upstream)
            self._stats.metrics.open_streams.dec()
