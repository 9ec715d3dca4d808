"""The tool-call states of :class:`app.formats.template.parse.TemplateDecoder`.

The decoder's state names (:class:`S`) and, as the :class:`CallStates` base class, the steps
that read one call once its section or opener marker is found: a JSON call object, or a
function name, an optional call id and its arguments (a JSON object, or tagged arguments read
one value at a time).  Values move out of the buffer into ``_value`` as they are scanned, so
no scan restarts from the beginning of a long value (linear in the output however chunked).
"""

from __future__ import annotations

import json
from enum import Enum, auto
from typing import Any

from app.core import events as ev
from app.formats.template.analysis.jsonish import ValueScanner, loads_lenient
from app.formats.template.analysis.markers import Found, Marker, Status, earliest
from app.formats.template.analysis.result import TemplateAnalysis
from app.formats.template.analysis.tools import ToolFormat
from app.formats.template.calls import CallBuilder


class S(Enum):
    """The decoder's states; :data:`_STEPS` maps each to its step method."""

    START = auto()  # before anything: is there a reasoning start marker?
    REASONING = auto()
    UNDECIDED = auto()  # reasoning without its opening marker, or the answer: held until known
    CONTENT = auto()
    SECTION = auto()  # inside a tool section, between calls
    JSON_CALL = auto()  # a JSON call object (JSON_NATIVE)
    NAME = auto()  # a tagged call's function name
    CALL_ID = auto()
    ARGS_JSON = auto()  # TAG_WITH_JSON arguments
    CLOSE = auto()  # the call's close marker
    ARGS = auto()  # TAG_WITH_TAGGED arguments
    ARG_VALUE = auto()  # one tagged argument's value, until its end marker
    DONE = auto()


def _marker_at(text: str) -> int:
    cut = [i for i in (text.find("<"), text.find("[")) if i >= 0]
    return min(cut) if cut else len(text)



class CallStates:
    """Steps of the call-reading states; the decoder sets these attributes up."""

    _a: TemplateAnalysis
    _buf: str
    _state: S
    _failed: bool
    _calls: CallBuilder
    _scanner: ValueScanner
    _value: list[str]  # the value being read, scanned pieces (JSON or tagged)
    _arg_name: str
    _pending_args: dict[str, Any]
    _json: bool
    _name_suffix: Marker
    _id_prefix: Marker
    _id_suffix: Marker
    _arg_prefix: Marker
    _close: Marker
    _arg_name_end: Marker
    _value_end: Marker

    def _fail(self, out: list[ev.Event], what: str) -> bool:
        out.append(ev.Error(f"Could not parse the model's tool call: {what}.", code="tool_call_parse_error"))
        self._failed = True
        return False

    def _scan_value(self) -> tuple[int, str]:
        """Feed the buffer to the value scanner (leading whitespace skipped before the value):
        ``(n, "")`` while the value goes on (buffer moved to the pieces), ``(-2, "")`` when
        the text is not an object or array, or ``(0, raw)`` with the whole value."""
        head = self._buf if self._value else self._buf.lstrip()
        n = self._scanner.feed(head)
        if n == -2 or (n < 0 and not self._value and head[:1] not in ("{", "[")):
            return -2, ""
        if n < 0:
            self._value.append(head)
            self._buf = ""
            return -1, ""
        self._value.append(head[:n])
        raw, self._value, self._buf = "".join(self._value), [], head[n:]
        return 0, raw

    def _st_json_call(self, out: list[ev.Event], final: bool) -> bool:
        if not self._value:
            head = self._buf.lstrip()
            if not head:
                self._buf = ""
                return False
            if head[0] not in "{[":
                self._state = S.SECTION
                self._buf = head
                return True
        n, raw = self._scan_value()
        if n < 0:
            return False
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
        if not self._value and not self._buf.strip():
            self._buf = ""
            return False
        n, raw = self._scan_value()
        if n == -2:
            return self._fail(out, "arguments are not a JSON object")
        if n < 0:
            return False
        try:
            args = loads_lenient(raw)
        except ValueError:
            return self._fail(out, "invalid JSON arguments")
        if not isinstance(args, dict):
            return self._fail(out, "arguments are not a JSON object")
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
            name_end = self._arg_name_end.find(buf, got.end, final)
            if name_end.status is not Status.MATCH:
                return False
            self._arg_name = buf[got.end:name_end.start].strip()
            self._buf = buf[name_end.end:]
            self._state = S.ARG_VALUE
            return True
        if not buf.strip() and not final:
            return False
        # anything else ends the call (the close marker was left out)
        self._calls.finish_tagged(out)
        self._state = S.SECTION
        return True

    def _st_arg_value(self, out: list[ev.Event], final: bool) -> bool:
        end = self._value_end.find(self._buf, 0, final)
        if end.status is not Status.MATCH:  # nothing before ``end.start`` can begin the marker
            if end.start:
                self._value.append(self._buf[:end.start])
                self._buf = self._buf[end.start:]
            return False
        self._value.append(self._buf[:end.start])
        raw, self._value = "".join(self._value), []
        if self._a.tools.arg_name_suffix.endswith("\n") and raw.startswith("\n"):
            raw = raw[1:]
        if self._a.tools.arg_value_suffix.startswith("\n") and raw.endswith("\n"):
            raw = raw[:-1]
        self._calls.add_arg(self._arg_name, raw)
        self._buf = self._buf[end.end:]
        self._state = S.ARGS
        return True
