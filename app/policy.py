"""Gateway-side policies applied to the event stream, independent of prompt format.

* :class:`StopSequences` — the request's ``stop`` strings apply to the *final
  answer text only* (never to reasoning or to the Harmony header bytes, which a
  backend-side stop string would match).  Text is held back while it could be the
  start of a stop string; on a match the answer ends with ``finish_reason: stop``.
* :class:`ToolGuard` — a tool call to a function that was not offered (or not
  allowed by ``tool_choice``) is never passed on; the answer ends with an error.
"""

from __future__ import annotations

from app import events as ev
from app.model import Usage


class StopSequences:
    def __init__(self, stops: tuple[str, ...]) -> None:
        self._stops = stops
        self._hold = max((len(s) for s in stops), default=1) - 1
        self._buffer = ""
        self.matched = False

    def feed(self, delta: ev.TextDelta) -> list[ev.Event]:
        """Returns text safe to emit; sets :attr:`matched` when a stop string is hit."""
        if not self._stops:
            return [delta]
        self._buffer += delta.text
        cut = min((i for i in (self._buffer.find(s) for s in self._stops) if i >= 0), default=-1)
        if cut >= 0:
            self.matched = True
            text, self._buffer = self._buffer[:cut], ""
            return [ev.TextDelta(text, delta.logprobs)] if text else []
        safe = len(self._buffer) - self._hold
        if safe <= 0:
            return []
        text, self._buffer = self._buffer[:safe], self._buffer[safe:]
        return [ev.TextDelta(text, delta.logprobs)]

    def flush(self) -> list[ev.Event]:
        text, self._buffer = self._buffer, ""
        return [ev.TextDelta(text)] if text else []


class ToolGuard:
    def __init__(self, allowed: frozenset[str]) -> None:
        self._allowed = allowed

    def check(self, event: ev.ToolCallStarted) -> ev.Error | None:
        if event.name in self._allowed:
            return None
        offered = ", ".join(sorted(self._allowed)) or "none"
        return ev.Error(
            f"The model tried to call function {event.name!r}, which this request does not "
            f"allow (allowed: {offered}). The call was not returned.",
            code="tool_not_allowed",
        )


def stop_finish(usage: Usage) -> list[ev.Event]:
    return [ev.PartDone("text"), ev.Finished("stop", usage)]
