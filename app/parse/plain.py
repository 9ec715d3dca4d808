"""The simplest :class:`app.parse.base.TextDecoder`: every character is answer text.

For template models whose output has no reasoning or tool-call markers; the backend
ends generation on the model's end-of-turn token (``eos``).
"""

from __future__ import annotations

from app import events as ev
from app.parse.base import EndKind


class PlainTextDecoder:
    def __init__(self) -> None:
        self.stopped: ev.FinishReason | None = None
        self._open = False

    def decode(self, text: str) -> list[ev.Event]:
        if not text:
            return []
        self._open = True
        return [ev.TextDelta(text)]

    def flush(self, end: EndKind) -> tuple[list[ev.Event], ev.FinishReason | None]:
        events: list[ev.Event] = [ev.PartDone("text")] if self._open else []
        if end == "length":
            return events, "length"
        if end in ("eos", "stop_string"):
            return events, "stop"
        return events, None
