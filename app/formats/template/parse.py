"""The :class:`app.formats.parsing.base.TextDecoder` built from a chat-template analysis.

One state machine serves every analyzed format: optional reasoning (``start`` marker
or already opened by the prompt), content (wrapper markers dropped), then a tool
section whose calls are JSON objects (``JSON_NATIVE``), a name plus a JSON object
(``TAG_WITH_JSON``) or a name plus tagged arguments (``TAG_WITH_TAGGED``, string
values typed by the tool's JSON schema).  Any suffix of the input that could still be
the start of a marker is held back; whitespace next to markers is not part of the
text.  Python-literal arguments are accepted and re-encoded as JSON.  The end-of-turn
marker, when the model writes it as text, stops parsing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from enum import Enum, auto
from typing import Any

from app.core import events as ev
from app.core.conversation import FunctionTool
from app.formats.parsing.base import EndKind
from app.formats.parsing.parts import Parts
from app.formats.template.analysis.jsonish import ValueScanner, loads_lenient
from app.formats.template.analysis.markers import Found, Marker, Status, earliest
from app.formats.template.analysis.result import ReasoningMode, TemplateAnalysis
from app.formats.template.analysis.tools import ToolFormat
from app.formats.template.calls import CallBuilder


def _starts_in_reasoning(a: TemplateAnalysis, prompt_text: str) -> bool:
    if a.reasoning.mode is ReasoningMode.DELIMITER:
        return True
    start, end = a.reasoning.start, a.reasoning.end
    tail = prompt_text.rstrip()
    return bool(start) and tail.endswith(start) and not (end and tail.endswith(end))


class S(Enum):
    """The decoder's states; :data:`_STEPS` maps each to its step method."""

    START = auto()  # before anything: is there a reasoning start marker?
    REASONING = auto()
    CONTENT = auto()
    SECTION = auto()  # inside a tool section, between calls
    JSON_CALL = auto()  # a JSON call object (JSON_NATIVE)
    NAME = auto()  # a tagged call's function name
    CALL_ID = auto()
    ARGS_JSON = auto()  # TAG_WITH_JSON arguments
    CLOSE = auto()  # the call's close marker
    ARGS = auto()  # TAG_WITH_TAGGED arguments
    DONE = auto()


def _marker_at(text: str) -> int:
    cut = [i for i in (text.find("<"), text.find("[")) if i >= 0]
    return min(cut) if cut else len(text)


class TemplateDecoder:
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
        self._bare_json = self._json and not self._triggers  # calls are recognized at the start only
        self._scanner = ValueScanner()
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
        out = [] if self._failed or self._state is S.DONE else self._run(final=True)
        if self._failed:
            return out, None
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

    def _fail(self, out: list[ev.Event], what: str) -> bool:
        out.append(ev.Error(f"Could not parse the model's tool call: {what}.", code="tool_call_parse_error"))
        self._failed = True
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
        self._state = S.CONTENT
        return True

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
        # not a call after all: the rest is answer text
        self._state = S.CONTENT
        self._text("text", head if self._parts.open != "text" else buf, out)
        self._buf = ""
        return True

    def _st_json_call(self, out: list[ev.Event], final: bool) -> bool:
        head = self._buf.lstrip()
        if not head:
            self._buf = ""
            return False
        if head[0] not in "{[":
            self._state = S.SECTION
            self._buf = head
            return True
        scanned = self._scanner.seen
        n = self._scanner.feed(head[scanned:])
        if n < 0:
            self._buf = head
            return False
        raw, self._buf = head[:scanned + n], head[scanned + n:]
        try:
            value = loads_lenient(raw)
        except ValueError:
            return self._fail(out, "invalid JSON")
        items = value if isinstance(value, list) else [value]
        for item in items:
            if not self._calls.from_json(item, out):
                return self._fail(out, "unexpected JSON shape")
        self._state = S.SECTION
        return True

    def _st_name(self, out: list[ev.Event], final: bool) -> bool:
        buf = self._buf.lstrip()
        stops = [self._name_suffix] if self._name_suffix.first.strip() and self._name_suffix.tokens[0][0] \
            == "lit" else []
        stops += [x for x in (self._id_prefix, self._id_suffix, self._arg_prefix, self._close) if x]
        got, _ = earliest(buf, stops, 0, final)
        end = got.start
        ws = next((i for i, c in enumerate(buf) if c.isspace() or c in "{["), len(buf))
        if ws < end:
            end, got = ws, Found(Status.MATCH, ws, ws)
        if got.status is Status.FAIL and not final:
            self._buf = buf
            return False
        if got.status is Status.PARTIAL and not final:
            self._buf = buf
            return False
        name = buf[:end].strip()
        if not name:
            return self._fail(out, "no function name")
        self._calls.begin(name)
        rest = buf[end:]
        suffix = self._name_suffix.match_ws(rest, 0, final) if self._name_suffix else None
        if suffix is not None and suffix.status is Status.PARTIAL:
            self._calls.cancel()
            self._buf = buf
            return False
        if suffix is not None and suffix.status is Status.MATCH:
            if not self._a.tools.ids_rendered:  # the template builds the id around the name
                made = rest[:suffix.end].strip()
                self._calls.set_id(self._a.tools.name_prefix.strip() + name + made[:_marker_at(made)])
            rest = rest[suffix.end:]
        self._buf = rest
        self._state = S.CALL_ID if self._id_prefix else (S.ARGS_JSON if self._a.tools.format is
                                                         ToolFormat.TAG_WITH_JSON else S.ARGS)
        self._scanner = ValueScanner()
        return True

    def _st_call_id(self, out: list[ev.Event], final: bool) -> bool:
        got = self._id_prefix.match_ws(self._buf, 0, final)
        if got.status is Status.PARTIAL:
            return False
        if got.status is Status.MATCH:
            rest = self._buf[got.end:]
            end = self._id_suffix.find(rest, 0, final)
            if end.status is not Status.MATCH:
                return False
            self._calls.set_id(rest[:end.start].strip())
            self._buf = rest[end.end:]
        else:
            end = self._id_suffix.match_ws(self._buf, 0, final)
            if end.status is Status.PARTIAL:
                return False
            if end.status is Status.MATCH:
                self._buf = self._buf[end.end:]
        self._state = S.ARGS_JSON if self._a.tools.format is ToolFormat.TAG_WITH_JSON else S.ARGS
        return True

    def _st_args_json(self, out: list[ev.Event], final: bool) -> bool:
        self._calls.started(out)
        head = self._buf.lstrip()
        if not head:
            self._buf = ""
            return False
        scanned = self._scanner.seen
        n = self._scanner.feed(head[scanned:])
        if n == -2 or (n < 0 and scanned == 0 and head[0] not in "{["):
            return self._fail(out, "arguments are not a JSON object")
        if n < 0:
            self._buf = head
            return False
        raw, rest = head[:scanned + n], head[scanned + n:]
        try:
            args = loads_lenient(raw)
        except ValueError:
            return self._fail(out, "invalid JSON arguments")
        if not isinstance(args, dict):
            return self._fail(out, "arguments are not a JSON object")
        self._buf = rest
        self._state = S.CLOSE
        self._pending_args: dict[str, Any] = args
        return True

    def _st_close(self, out: list[ev.Event], final: bool) -> bool:
        got = self._close.match_ws(self._buf, 0, final) if self._close else None
        if got is not None and got.status is Status.PARTIAL:
            return False
        if got is not None and got.status is Status.MATCH:
            self._buf = self._buf[got.end:]
        self._calls.done(json.dumps(self._pending_args, ensure_ascii=False), out)
        self._state = S.SECTION
        return True

    def _st_args(self, out: list[ev.Event], final: bool) -> bool:
        self._calls.started(out)
        buf = self._buf
        for mk in (self._arg_prefix, self._close):
            got = mk.match_ws(buf, 0, final) if mk else None
            if got is None or got.status is Status.FAIL:
                continue
            if got.status is Status.PARTIAL:
                return False
            if mk is self._close:
                self._buf = buf[got.end:]
                self._calls.finish_tagged(out)
                self._state = S.SECTION
                return True
            rest = buf[got.end:]
            name_end = self._arg_name_end.find(rest, 0, final)
            if name_end.status is not Status.MATCH:
                return False
            value_from = name_end.end
            value_end = self._value_end.find(rest, value_from, final)
            if value_end.status is not Status.MATCH:
                return False
            raw = rest[value_from:value_end.start]
            if self._a.tools.arg_name_suffix.endswith("\n") and raw.startswith("\n"):
                raw = raw[1:]
            if self._a.tools.arg_value_suffix.startswith("\n") and raw.endswith("\n"):
                raw = raw[:-1]
            self._calls.add_arg(rest[:name_end.start].strip(), raw)
            self._buf = rest[value_end.end:]
            return True
        if not buf.strip() and not final:
            return False
        # anything else ends the call (the close marker was left out)
        self._calls.finish_tagged(out)
        self._state = S.SECTION
        return True


_STEPS: dict[S, Callable[[TemplateDecoder, list[ev.Event], bool], bool]] = {
    S.START: TemplateDecoder._st_start, S.REASONING: TemplateDecoder._st_reasoning,
    S.CONTENT: TemplateDecoder._st_content, S.SECTION: TemplateDecoder._st_section,
    S.JSON_CALL: TemplateDecoder._st_json_call, S.NAME: TemplateDecoder._st_name,
    S.CALL_ID: TemplateDecoder._st_call_id, S.ARGS_JSON: TemplateDecoder._st_args_json,
    S.CLOSE: TemplateDecoder._st_close, S.ARGS: TemplateDecoder._st_args,
}


def template_decoder(source: str, segments: Sequence[tuple[str, bool]], *,
                     tools: Sequence[FunctionTool] = (), eos_token: str = "") -> TemplateDecoder:
    """The decoder for a prompt rendered from ``source`` (analysis memoized per source).

    Only a trusted last segment can open reasoning (client text cannot force the state).
    """
    from app.formats.template.analysis.analysis import analyze

    tail = segments[-1][0] if segments and segments[-1][1] else ""
    return TemplateDecoder(analyze(source), tools, tail, eos_token)
