"""The simplest :class:`app.formats.parsing.base.TextDecoder`: every character is answer text.

For template models whose output has no reasoning or tool-call markers; the backend
ends generation on the model's end-of-turn token (``eos``).
"""

from __future__ import annotations

from app.core import events as ev
from app.formats.parsing.base import EndKind
from app.formats.parsing.parts import Parts


class PlainTextDecoder:
    def __init__(self) -> None:
        self.stopped: ev.FinishReason | None = None
        self._parts = Parts()

    def decode(self, text: str) -> list[ev.Event]:
        out: list[ev.Event] = []
        self._parts.delta("text", text, out)
        return out

    def flush(self, end: EndKind) -> tuple[list[ev.Event], ev.FinishReason | None]:
        events: list[ev.Event] = []
        self._parts.end(events)
        if end == "length":
            return events, "length"
        if end in ("eos", "stop_string"):
            return events, "stop"
        return events, None
