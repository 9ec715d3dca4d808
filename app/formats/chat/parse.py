"""Events from chat-mode backends, whose chunks are already separated by the server.

Ollama ``/api/chat`` and OpenAI-compatible upstreams return answer ``content``,
``reasoning`` (``reasoning_content`` / ``reasoning`` / ``thinking``) and structured
``tool_calls`` deltas.  This parser turns those :class:`app.core.output.Chunk` fields into
the same events the token and text parsers produce: parts open and close in order,
tool calls get stable ids (the upstream's, or generated), a refused finish (the
upstream's content filter or refusal) ends with ``content_filter``, and a stream without a
finish is a truncation error.  :meth:`DeltaParser.feed_joined` reads the chunks of one upstream
read of an answer that is only folded: the same events, a run of text chunks as one delta.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.core import events as ev
from app.core.output import Chunk, Finish, Usage
from app.formats.parsing.accounting import Accounting
from app.formats.parsing.parts import Parts


class DeltaParser:
    def __init__(self, prompt_tokens: int) -> None:
        self._acct = Accounting(prompt_tokens)
        self._parts = Parts()
        self._seen: set[int] = set()  # upstream call indexes already started
        self._open_call: int | None = None  # the upstream index of the call being written
        self._done = False

    def feed(self, chunk: Chunk) -> list[ev.Event]:
        if self._done:
            return self._acct.late(chunk)
        out: list[ev.Event] = []
        parts = self._parts
        if chunk.reasoning:
            self._acct.reasoning_tokens += max(len(chunk.token_ids), 1)
            parts.delta("reasoning", chunk.reasoning, out)
        if chunk.text:
            parts.delta("text", chunk.text, out, chunk.logprobs)
        for call in chunk.tool_calls:
            if call.index not in self._seen:
                if not call.name:
                    continue  # arguments before a name: nothing to attach them to yet
                self._seen.add(call.index)
                self._open_call = call.index
                parts.start_call(call.name, out, call.id)
            elif self._open_call != call.index or not parts.in_call:
                continue  # a late fragment of an already closed call is ignored
            parts.arguments(call.arguments, out)
        self._acct.completion_tokens += len(chunk.token_ids) or (
            1 if chunk.text or chunk.reasoning or chunk.tool_calls else 0)
        if chunk.usage is not None:
            self._acct.backend = chunk.usage
        if chunk.finish is not None:
            self._done = True
            parts.end(out)
            out.extend(self._acct.hold(self._reason(chunk.finish), chunk))
        return out

    def feed_joined(self, chunks: Sequence[Chunk]) -> list[ev.Event]:
        """The events of :meth:`feed` for each of ``chunks`` in turn, for an answer that is only
        folded (:meth:`app.engine.stream.EventStream.coalesce`): a run of chunks that carry
        only answer text (or only reasoning) becomes one delta instead of one a chunk, which
        is what ``EventStream`` joins them into anyway; any other chunk goes through
        :meth:`feed`.  Tested against :meth:`feed` on random streams."""
        out: list[ev.Event] = []
        texts: list[str] = []  # the run's texts, one delta of ``kind`` when it ends
        kind: ev.PartKind = "text"
        acct = self._acct
        for chunk in chunks:
            text, reasoning = chunk.text, chunk.reasoning
            if (not text) is (not reasoning) or self._done or chunk.tool_calls \
                    or chunk.logprobs is not None or chunk.usage is not None \
                    or chunk.finish is not None:
                if texts:
                    self._parts.delta(kind, "".join(texts), out)
                    texts = []
                out += self.feed(chunk)
                continue
            now: ev.PartKind = "text" if text else "reasoning"
            if now != kind and texts:
                self._parts.delta(kind, "".join(texts), out)
                texts = []
            kind = now
            ids = len(chunk.token_ids)
            if reasoning:
                acct.reasoning_tokens += max(ids, 1)
                texts.append(reasoning)
            else:
                texts.append(text)
            acct.completion_tokens += ids or 1
        if texts:
            self._parts.delta(kind, "".join(texts), out)
        return out

    def close(self) -> list[ev.Event]:
        if self._done:
            return self._acct.drain()
        self._done = True
        return [ev.Error("The backend stream ended before the model finished its answer.",
                         code="stream_truncated")]

    def usage(self) -> Usage:
        return self._acct.usage()

    def _reason(self, finish: Finish) -> ev.FinishReason:
        if finish.kind == "length":
            return "length"
        if finish.refused:
            return "content_filter"
        return "tool_calls" if self._parts.calls else "stop"
