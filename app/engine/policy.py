"""Gateway-side policies applied to the event stream, independent of prompt format.

* :class:`StopSequences` — the request's ``stop`` strings apply to the *final
  answer text only* (never to reasoning or to the Harmony header bytes, which a
  backend-side stop string would match).  Text is held back while it could be the
  start of a stop string; on a match the answer ends with ``finish_reason: stop``.
* :class:`OneCall` — with ``parallel_tool_calls: false``, calls after the first are dropped.
* :class:`ToolGuard` — a tool call to a function that was not offered (or not
  allowed by ``tool_choice``) is never passed on; the answer ends with an error. So does a
  call to a ``strict`` function whose arguments do not match its schema.
"""

from __future__ import annotations

from typing import Any

from app.core import events as ev
from app.core.errors import ToolNotAllowed, to_event
from app.core.output import TokenLogprob, Usage
from app.engine.schema_check import answer_problem, arguments_problem


class StopSequences:
    """Held text is kept as whole deltas, so every emitted delta carries exactly the logprobs
    of the tokens behind its text (a delta cut by a stop string keeps those of the tokens
    before the cut, and, with logprobs, its text ends with the last whole token: a token the
    stop string begins inside is dropped with its leading characters)."""

    def __init__(self, stops: tuple[str, ...]) -> None:
        self._stops = stops
        self._hold = max((len(s) for s in stops), default=1) - 1
        self._held: list[ev.TextDelta] = []
        self._held_len = 0
        self.matched = False
        self.sequence: str | None = None  # the stop string that matched

    def feed(self, delta: ev.TextDelta) -> list[ev.Event]:
        """Returns text safe to emit; sets :attr:`matched` when a stop string is hit."""
        if not self._stops:
            return [delta]
        self._held.append(delta)
        self._held_len += len(delta.text)
        text = "".join(d.text for d in self._held)  # at most ~ the longest stop string + a delta
        # The stop string that is complete first ends the answer, as on a backend checking
        # after each character (ties: the one that starts first), whatever the chunking.
        found = [(i + len(s), i) for s in self._stops if (i := text.find(s)) >= 0]
        if found:
            self.matched = True
            end, start = min(found)
            self.sequence = text[start:end]
            return self._take(start)
        # A delta is safe once no stop string could start inside it: it ends at least
        # ``hold`` characters before the end of what is held.
        out: list[ev.Event] = []
        safe = self._held_len - self._hold
        while self._held and len(self._held[0].text) <= safe:
            done = self._held.pop(0)
            safe -= len(done.text)
            self._held_len -= len(done.text)
            out.append(done)
        return out

    def _take(self, cut: int) -> list[ev.Event]:
        out: list[ev.Event] = []
        pos = 0
        for delta in self._held:
            if pos + len(delta.text) <= cut:
                out.append(delta)
                pos += len(delta.text)
                continue
            part = delta.text[:cut - pos]
            logprobs = _logprobs_within(delta, len(part))
            if delta.logprobs:  # the text ends where its last whole token does: they match
                part = "".join(lp.token for lp in logprobs or ())
            if part:
                out.append(ev.TextDelta(part, logprobs))
            break
        self._held, self._held_len = [], 0
        return [d for d in out if isinstance(d, ev.TextDelta) and d.text]

    def flush(self) -> list[ev.Event]:
        out: list[ev.Event] = [d for d in self._held if d.text]
        self._held, self._held_len = [], 0
        return out


def _logprobs_within(delta: ev.TextDelta, chars: int) -> tuple[TokenLogprob, ...] | None:
    """The logprobs of the tokens whose text lies within the first ``chars`` characters."""
    if not delta.logprobs:
        return None
    kept: list[TokenLogprob] = []
    end = 0
    for lp in delta.logprobs:
        end += len(lp.token)
        if end > chars:
            break
        kept.append(lp)
    return tuple(kept) or None


class ToolGuard:
    """Calls only to allowed functions; a ``strict`` tool's arguments must match its schema."""

    def __init__(self, allowed: frozenset[str], strict: dict[str, dict[str, Any] | None] | None = None,
                 ) -> None:
        self._allowed = allowed
        self._strict = strict or {}

    def check(self, event: ev.ToolCallStarted) -> ev.Error | None:
        if event.name in self._allowed:
            return None
        offered = ", ".join(sorted(self._allowed)) or "none"
        return to_event(ToolNotAllowed(
            f"The model tried to call function {event.name!r}, which this request does not "
            f"allow (allowed: {offered}). The call was not returned."))

    def check_arguments(self, event: ev.ToolCallDone) -> ev.Error | None:
        if event.name not in self._strict:
            return None
        problem = arguments_problem(event.arguments, self._strict[event.name])
        if problem is None:
            return None
        return ev.Error(f"The model's call to the strict function {event.name!r} does not match "
                        f"its parameters schema: {problem}.", code="invalid_tool_arguments")


class AnswerFormat:
    """A ``strict`` json_schema response format: the finished answer must be JSON matching
    the schema.  Where the backend constrains the output (llama.cpp's grammar, for models
    without reasoning) this only confirms it; where the schema is only in the prompt
    (Harmony), a non-conforming answer ends with an error instead of ``stop``."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self._schema = schema
        self._text: list[str] = []

    def feed(self, event: ev.Event) -> None:
        if isinstance(event, ev.TextDelta):
            self._text.append(event.text)

    def check(self, event: ev.Event) -> ev.Error | None:
        if not isinstance(event, ev.Finished) or event.reason != "stop":
            return None  # cut by the budget (incomplete, as OpenAI returns it) or tool calls
        problem = answer_problem("".join(self._text), self._schema)
        if problem is None:
            return None
        return ev.Error(f"The model's answer does not match the strict response format: {problem}.",
                        code="response_format_violation")


class OneCall:
    """``parallel_tool_calls: false``: an answer carries at most one call; the calls a backend
    makes after it anyway (chat-mode servers that ignore the flag) are not passed on."""

    _CALL_EVENTS = (ev.ToolCallStarted, ev.ToolCallArgumentsDelta, ev.ToolCallDone)

    def __init__(self, parallel: bool) -> None:
        self._active = not parallel
        self._had_one = False

    def keep(self, event: ev.Event) -> bool:
        if not self._active or not isinstance(event, self._CALL_EVENTS):
            return True
        if self._had_one:
            return False
        self._had_one = isinstance(event, ev.ToolCallDone)
        return True


def stop_finish(usage: Usage) -> list[ev.Event]:
    return [ev.PartDone("text"), ev.Finished("stop", usage)]
