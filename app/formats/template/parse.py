"""The :class:`app.formats.parsing.base.TextDecoder` built from a chat-template analysis.

One state machine serves every analyzed format: optional reasoning (``start`` marker
or already opened by the prompt), content (wrapper markers dropped), then a tool
section whose calls are JSON objects (``JSON_NATIVE``), a name plus a JSON object
(``TAG_WITH_JSON``) or a name plus tagged arguments (``TAG_WITH_TAGGED``, string
values typed by the tool's JSON schema).  Any suffix of the input that could still be
the start of a marker is held back; whitespace next to markers is not part of the
text.  Python-literal arguments are accepted and re-encoded as JSON.  The end-of-turn
marker, when the model writes it as text, stops parsing.

Work is linear in the output's length however it is chunked: a value still being read (a JSON
object, a tagged argument) moves out of the buffer into a list of pieces as it is scanned, so
the buffer only ever holds what has not been looked at (and a possible marker's first
characters), and no scan starts again from the beginning of a value.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from app.core import events as ev
from app.core.conversation import FunctionTool
from app.formats.parsing.base import EndKind
from app.formats.parsing.parts import Parts
from app.formats.template.analysis.jsonish import ValueScanner
from app.formats.template.analysis.markers import Marker, Status, earliest
from app.formats.template.analysis.result import ReasoningMode, TemplateAnalysis
from app.formats.template.analysis.tools import ToolFormat
from app.formats.template.call_states import CallStates, S
from app.formats.template.calls import CallBuilder

# One bracketed marker: ``</tool_calls>``, ``<|calls_end|>``, ``[/TOOL_CALLS]``.
_LONE_MARKER = re.compile(r"<[^<>\s]{1,64}>|\[[^\[\]\s]{1,64}\]")
_OPEN_MARKER = re.compile(r"<[^<>\s]{0,64}|\[[^\[\]\s]{0,64}")  # one still being written


def _starts_in_reasoning(a: TemplateAnalysis, prompt_text: str) -> bool:
    if a.reasoning.mode is ReasoningMode.DELIMITER:
        return True
    start, end = a.reasoning.start, a.reasoning.end
    tail = prompt_text.rstrip()
    return bool(start) and tail.endswith(start) and not (end and tail.endswith(end))


class TemplateDecoder(CallStates):
    """Parses model output for one analyzed template (see the module docstring)."""

    def __init__(self, analysis: TemplateAnalysis, tools: Sequence[FunctionTool] = (),
                 prompt_text: str = "", eos_token: str = "") -> None:
        a = self._a = analysis
        t = a.tools
        self.stopped: ev.FinishReason | None = None
        self._buf = ""
        self._state = S.REASONING if _starts_in_reasoning(a, prompt_text) else S.START
        self._parts = Parts()
        self._ws = ""  # trailing whitespace held back in the open part
        self._calls = CallBuilder(t, {x.name: x.parameters or {} for x in tools}, self._parts)
        self._r_start, self._r_end = Marker(a.reasoning.start), Marker(a.reasoning.end)
        self._turn_end = Marker(eos_token if a.turn_end_is_eos else a.turn_end)
        self._skip_in_content = [Marker(a.content.start), Marker(a.content.end)]
        tail = prompt_text.rstrip()
        # A FORCED_OPEN template opens reasoning in the prompt; when this prompt did not (nor
        # closed it), output without the opening marker may be reasoning all the same: it is
        # held (never shown as the answer) until the end marker or the end of the output.
        self._budget_cut = False
        self._undecided = (a.reasoning.mode is ReasoningMode.FORCED_OPEN and bool(a.reasoning.end)
                           and not tail.endswith(a.reasoning.end))
        fmt = t.format
        self._json = fmt is ToolFormat.JSON_NATIVE
        self._section_start = Marker(t.section_start)
        self._section_end = Marker(t.section_end)
        self._opener = Marker(t.per_call_start if self._json else t.call_open)
        self._per_call_end = Marker(t.per_call_end)
        self._name_suffix = Marker(t.name_suffix, digits=True)
        self._close = Marker(t.call_close, digits=True)
        self._sep = Marker(t.call_separator)
        self._id_prefix, self._id_suffix = Marker(t.id_prefix), Marker(t.id_suffix)
        self._arg_prefix = Marker(t.arg_name_prefix)
        self._arg_name_end = Marker(t.arg_name_suffix)
        self._value_end = Marker(t.arg_value_suffix)
        self._triggers = [mk for mk in (self._section_start, self._opener) if mk] if fmt is not \
            ToolFormat.NONE else []
        if self._r_end and self._r_end.text not in {mk.text for mk in self._triggers}:
            self._skip_in_content.append(self._r_end)  # an end-of-reasoning marker is never text
        self._bare_json = self._json and not self._triggers  # calls are recognized at the start only
        self._scanner = ValueScanner()
        self._value: list[str] = []  # the value being read, scanned pieces (JSON or tagged)
        self._arg_name = ""
        self._array_open = False
        self._failed = False

    # ------------------------------------------------------------------ text parts
    def _text(self, kind: ev.PartKind, text: str, out: list[ev.Event]) -> None:
        """Part text without the whitespace next to markers: leading whitespace of a part is
        dropped, trailing whitespace held until more text follows."""
        if self._parts.open != kind:
            text = text.lstrip()
            if not text:
                return
        body = (self._ws + text).rstrip()
        if not body:
            self._ws += text
            return
        self._ws = (self._ws + text)[len(body):]
        self._parts.delta(kind, body, out)

    def _close_part(self, kind: ev.PartKind, out: list[ev.Event]) -> None:
        self._ws = ""
        if self._parts.open == kind:
            self._parts.close(out)

    # ------------------------------------------------------------------ protocol
    def decode(self, text: str) -> list[ev.Event]:
        if self._failed or self._state is S.DONE:
            return []
        self._buf += text
        return self._run(final=False)

    def flush(self, end: EndKind) -> tuple[list[ev.Event], ev.FinishReason | None]:
        self._budget_cut = end == "length"
        out = [] if self._failed or self._state is S.DONE else self._run(final=True)
        if self._failed:
            return out, None
        if self._state is S.UNDECIDED:  # cut by the token budget before the end marker
            self._text("reasoning", "".join(self._value) + self._buf, out)
            self._state, self._value, self._buf = S.REASONING, [], ""
        if self._state is S.REASONING:
            self._close_part("reasoning", out)
        self._close_part("text", out)
        if self._calls.active and end != "length" and not self._calls.finish_pending(out):
            out.append(ev.Error("The model's tool call ended before it was complete.",
                                code="tool_call_parse_error"))
            return out, None
        if end == "length":
            return out, "length"
        if self.stopped is not None:
            return out, self.stopped
        if end == "closed":
            return out, None
        return out, "tool_calls" if self._calls.count else "stop"

    def _run(self, final: bool) -> list[ev.Event]:
        out: list[ev.Event] = []
        while self._state is not S.DONE and not self._failed:
            if not _STEPS[self._state](self, out, final):
                break
        return out

    def _stop(self, out: list[ev.Event]) -> bool:
        self._close_part("reasoning", out)
        self._close_part("text", out)
        self.stopped = "tool_calls" if self._calls.count else "stop"
        self._state, self._buf = S.DONE, ""
        return False

    # ------------------------------------------------------------------ states
    def _st_start(self, out: list[ev.Event], final: bool) -> bool:
        got = self._r_start.match_ws(self._buf, 0, final)
        if got.status is Status.PARTIAL:
            return False
        if got.status is Status.MATCH:
            self._buf = self._buf[got.end:]
            self._state = S.REASONING
            return True
        self._state = S.UNDECIDED if self._undecided else S.CONTENT
        return True

    def _st_undecided(self, out: list[ev.Event], final: bool) -> bool:
        got = self._r_end.find(self._buf, 0, final)
        if got.status is Status.MATCH:  # it was reasoning
            self._text("reasoning", "".join(self._value) + self._buf[:got.start], out)
            self._close_part("reasoning", out)
            self._value, self._buf, self._state = [], self._buf[got.end:], S.CONTENT
            return True
        if not final:  # held; what cannot begin the marker leaves the buffer (linear)
            if got.start:
                self._value.append(self._buf[:got.start])
                self._buf = self._buf[got.start:]
            return False
        if self._budget_cut:
            return False  # flush() shows it as the reasoning the budget cut
        self._buf, self._value, self._state = "".join(self._value) + self._buf, [], S.CONTENT
        return True  # no end marker: it was the answer

    def _st_reasoning(self, out: list[ev.Event], final: bool) -> bool:
        got = self._r_end.find(self._buf, 0, final)
        self._text("reasoning", self._buf[:got.start], out)
        if got.status is Status.MATCH:
            self._buf = self._buf[got.end:]
            self._close_part("reasoning", out)
            self._state = S.CONTENT
            return True
        self._buf = self._buf[got.start:]
        if final:
            self._text("reasoning", self._buf, out)
            self._buf = ""
        return False

    def _st_content(self, out: list[ev.Event], final: bool) -> bool:
        if self._bare_json and self._parts.open != "text" and not self._calls.count:
            head = self._buf.lstrip()
            if not head and not final:
                return False
            if head[:1] in ("{", "["):
                self._state = S.SECTION
                return True
        markers = [*self._triggers, *self._skip_in_content, self._turn_end]
        got, mk = earliest(self._buf, [x for x in markers if x], 0, final)
        self._text("text", self._buf[:got.start], out)
        self._buf = self._buf[got.start:]
        if got.status is not Status.MATCH:
            if final:
                self._text("text", self._buf, out)
                self._buf = ""
            return False
        if mk is self._turn_end:
            return self._stop(out)
        if mk in self._triggers:
            self._close_part("text", out)
            self._state = S.SECTION
            return True
        self._buf = self._buf[got.end - got.start:]  # a content wrapper marker (now at 0)
        return True

    def _st_section(self, out: list[ev.Event], final: bool) -> bool:
        buf = self._buf
        head = buf.lstrip()
        if not head:
            self._buf = ""
            return False
        candidates = [self._section_start, self._opener, self._section_end, self._per_call_end,
                      self._close, self._sep, self._turn_end]
        partial = False
        for mk in candidates:
            if not mk:
                continue
            got = mk.match_ws(buf, 0, final)
            if got.status is Status.PARTIAL:
                partial = True
            elif got.status is Status.MATCH:
                self._buf = buf[got.end:]
                if mk is self._turn_end:
                    return self._stop(out)
                if mk is self._opener:
                    self._state = S.JSON_CALL if self._json else S.NAME
                    self._scanner = ValueScanner()
                elif mk is self._section_end:
                    self._state = S.CONTENT
                return True
        if partial and not final:
            return False
        t = self._a.tools
        if self._json and t.array_wrapped and not self._array_open and head[0] == "[":
            self._array_open = True
            self._buf = head[1:]
            return True
        if self._json and head[0] == "{":
            self._buf, self._state, self._scanner = head, S.JSON_CALL, ValueScanner()
            return True
        if self._json and head[0] == "]" and self._array_open:
            self._array_open = False
            self._buf = head[1:]
            return True
        if self._json and head[0] == "[" and not t.array_wrapped and self._bare_json:
            self._array_open = True
            self._buf = head[1:]
            return True
        if self._calls.count and head[0] in "<[":
            # A lone marker after the last finished call is the section's end, even if the
            # template never showed it (it may write it only after several calls): held
            # until the output ends, or until text after it shows it was not alone.
            marker = _LONE_MARKER.match(head)
            lone = marker is not None and not head[marker.end():].strip()
            if lone or (not final and marker is None and _OPEN_MARKER.fullmatch(head.rstrip())):
                if final:
                    self._buf = ""
                return False
        # not a call after all: the rest is answer text
        self._state = S.CONTENT
        self._text("text", head if self._parts.open != "text" else buf, out)
        self._buf = ""
        return True

_STEPS: dict[S, Callable[[TemplateDecoder, list[ev.Event], bool], bool]] = {
    S.START: TemplateDecoder._st_start, S.REASONING: TemplateDecoder._st_reasoning,
    S.UNDECIDED: TemplateDecoder._st_undecided, S.CONTENT: TemplateDecoder._st_content,
    S.SECTION: TemplateDecoder._st_section,
    S.JSON_CALL: TemplateDecoder._st_json_call, S.NAME: TemplateDecoder._st_name,
    S.CALL_ID: TemplateDecoder._st_call_id, S.ARGS_JSON: TemplateDecoder._st_args_json,
    S.CLOSE: TemplateDecoder._st_close, S.ARGS: TemplateDecoder._st_args,
    S.ARG_VALUE: TemplateDecoder._st_arg_value,
}


def template_decoder(source: str, segments: Sequence[tuple[str, bool]], *,
                     tools: Sequence[FunctionTool] = (), eos_token: str = "") -> TemplateDecoder:
    """The decoder for a prompt rendered from ``source`` (analysis memoized per source).

    Only a trusted last segment can open reasoning (client text cannot force the state).
    """
    from app.formats.template.analysis.analysis import analyze

    tail = segments[-1][0] if segments and segments[-1][1] else ""
    return TemplateDecoder(analyze(source), tools, tail, eos_token)
