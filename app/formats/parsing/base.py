"""The parser seam: what every incremental output parser provides to the pipeline.

Two kinds of parser exist.  Token-level parsers (Harmony on openai-harmony) read
``Chunk.token_ids``; text-level parsers read ``Chunk.text`` and are written as a pure
:class:`TextDecoder` (``decode()`` / ``flush()`` like httpx's incremental decoders)
wrapped by :class:`app.formats.parsing.text.TextEventParser`, which does the bookkeeping every
text format shares: token counts, the backend's finish reason, usage that arrives
after the finish, and "stream ended without a stop" = truncation error.
"""

from __future__ import annotations

from typing import Literal, Protocol

from app.core import events as ev
from app.core.output import Chunk, Usage

EndKind = Literal["eos", "length", "stop_string", "closed"]
"""How the text input ended: the backend hit an end-of-generation token that is not in
the text (``eos``), its token budget (``length``), a stop string (``stop_string``), or
the stream simply ended with no finish information (``closed``)."""


class EventParser(Protocol):
    """Chunks in, events out; exactly one terminal event over the parser's life."""

    def feed(self, chunk: Chunk) -> list[ev.Event]: ...

    def close(self) -> list[ev.Event]:
        """The backend stream ended; flush what is held back."""
        ...

    def usage(self) -> Usage:
        """Token usage so far (the backend's numbers when it sent them)."""
        ...


class TextDecoder(Protocol):
    """An incremental text-level output parser for one prompt format.

    ``decode`` receives arbitrary slices of the model's output text (a marker such as
    ``<|channel|>`` may be split across calls) and returns the events the text so far
    makes certain, holding back any suffix that could still be the start of a marker.
    It never returns :class:`app.core.events.Finished`; it may return one terminal
    :class:`app.core.events.Error` (after which it is not called again).

    ``stopped`` becomes the finish reason once the text itself contained a stop marker
    (``<|return|>`` → ``"stop"``, ``<|call|>`` → ``"tool_calls"``); text after it is not
    passed in.  ``flush(end)`` is called once when input ends and returns the remaining
    events plus the finish reason, or ``None`` when the output is incomplete (the
    wrapper then reports ``stream_truncated`` unless the decoder returned an Error).
    """

    stopped: ev.FinishReason | None

    def decode(self, text: str) -> list[ev.Event]: ...

    def flush(self, end: EndKind) -> tuple[list[ev.Event], ev.FinishReason | None]: ...
