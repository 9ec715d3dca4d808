"""The one parts and tool-call builder every parser speaks through.

A parser recognises *what* the model is writing (reasoning, a preamble, answer text, a
call of some function); :class:`Parts` turns that into :mod:`app.core.events` with the same
rules for every format: a part opens with its first delta and closes (``PartDone``)
when another part or a call begins or the parser says so; a part without text is never
announced; tool calls get consecutive indexes and an id (the model's, or a fresh one),
their argument deltas concatenate to exactly the ``arguments`` of ``ToolCallDone``, and
a call still open when the answer ends is closed first.  Parsers keep only their
format's grammar.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.core import events as ev
from app.core.ids import random_id
from app.core.output import TokenLogprob


@dataclass(slots=True)
class _Call:
    index: int
    call_id: str
    name: str
    arguments: list[str] = field(default_factory=list)


class Parts:
    def __init__(self) -> None:
        self.open: ev.PartKind | None = None  # the part a delta last went to, until closed
        self.calls = 0  # tool calls started so far
        self._call: _Call | None = None

    @property
    def in_call(self) -> bool:
        return self._call is not None

    # -- text parts --------------------------------------------------------------------
    def delta(self, kind: ev.PartKind, text: str, out: list[ev.Event],
              logprobs: tuple[TokenLogprob, ...] | None = None) -> None:
        """``text`` of part ``kind``; another open part or call is closed first."""
        if not text:
            return
        if self._call is not None:
            self.end_call(out)
        if self.open != kind:
            self.close(out)
            self.open = kind
        if kind == "text":
            out.append(ev.TextDelta(text, logprobs))
        elif kind == "reasoning":
            out.append(ev.ReasoningDelta(text))
        else:
            out.append(ev.PreambleDelta(text))

    def close(self, out: list[ev.Event]) -> None:
        """Close the open part, if any (a message / block of the format ended)."""
        if self.open is not None:
            out.append(ev.PartDone(self.open))
            self.open = None

    # -- tool calls --------------------------------------------------------------------
    def start_call(self, name: str, out: list[ev.Event], call_id: str | None = None) -> None:
        """A call of ``name`` begins (``call_id``: the model's own id, when it wrote one)."""
        self.close(out)
        if self._call is not None:
            self.end_call(out)
        self._call = _Call(self.calls, call_id or random_id("call_"), name)
        self.calls += 1
        out.append(ev.ToolCallStarted(self._call.index, self._call.call_id, name))

    def arguments(self, delta: str, out: list[ev.Event]) -> None:
        call = self._call
        if call is None or not delta:
            return
        call.arguments.append(delta)
        out.append(ev.ToolCallArgumentsDelta(call.index, delta))

    def end_call(self, out: list[ev.Event]) -> None:
        call, self._call = self._call, None
        if call is not None:
            out.append(ev.ToolCallDone(call.index, call.call_id, call.name, "".join(call.arguments)))

    def whole_call(self, name: str, arguments: str, out: list[ev.Event],
                   call_id: str | None = None) -> None:
        """A call read in one piece: started, its arguments as one delta, done."""
        self.start_call(name, out, call_id)
        self.arguments(arguments, out)
        self.end_call(out)

    # -- the end ----------------------------------------------------------------------
    def end(self, out: list[ev.Event]) -> None:
        """The answer ended normally: close whatever is open."""
        self.end_call(out)
        self.close(out)
