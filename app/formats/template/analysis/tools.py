"""Tool-call analysis (T1..T7): format, section / per-call markers, names, arguments, ids.

T1 renders one call and classifies it: the function name inside JSON → ``JSON_NATIVE``
(fields found by matching the decoded object against the needles); otherwise the
argument name inside JSON → ``TAG_WITH_JSON``; otherwise ``TAG_WITH_TAGGED``.  For tag
formats the other comparisons are differential: one call vs two calls (T2: what closes
a call, what separates calls, what opens the section once), one argument vs two (T4/T5:
value suffix, argument separator and name prefix) and where the call id sits (T7).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from app.formats.template.analysis import probe as pr
from app.formats.template.analysis.diff import segmentize, until_common_prefix, until_common_suffix
from app.formats.template.analysis.jsonish import decode_prefix


class ToolFormat(StrEnum):
    NONE = "NONE"
    JSON_NATIVE = "JSON_NATIVE"
    TAG_WITH_JSON = "TAG_WITH_JSON"
    TAG_WITH_TAGGED = "TAG_WITH_TAGGED"


class CallIdPosition(StrEnum):
    NONE = "NONE"
    PRE_FUNC_NAME = "PRE_FUNC_NAME"
    BETWEEN_FUNC_AND_ARGS = "BETWEEN_FUNC_AND_ARGS"
    POST_ARGS = "POST_ARGS"


@dataclass(frozen=True, slots=True)
class ToolAnalysis:
    format: ToolFormat = ToolFormat.NONE
    section_start: str = ""
    section_end: str = ""
    per_call_start: str = ""
    per_call_end: str = ""
    call_separator: str = ""
    # tag formats: opener = per_call_start + name_prefix; close = after the arguments
    name_prefix: str = ""
    name_suffix: str = ""
    call_close: str = ""
    # JSON_NATIVE
    name_field: str = ""  # dotted path ("function.name")
    args_field: str = ""
    id_field: str = ""
    fun_name_is_key: bool = False
    array_wrapped: bool = False
    python_dicts: bool = False
    # TAG_WITH_TAGGED
    arg_name_prefix: str = ""
    arg_name_suffix: str = ""  # from the end of the name to the start of the value
    arg_value_suffix: str = ""
    arg_separator: str = ""
    # call ids in tag formats
    id_position: CallIdPosition = CallIdPosition.NONE
    id_prefix: str = ""
    id_suffix: str = ""
    ids_rendered: bool = True  # False: the name only shows when the template makes the id

    @property
    def call_open(self) -> str:
        return self.per_call_start + self.name_prefix

    def markers(self) -> list[str]:
        return [m.strip() for m in (self.section_start, self.section_end, self.per_call_start,
                                    self.per_call_end, self.name_prefix, self.call_close,
                                    self.arg_name_prefix, self.arg_value_suffix, self.id_prefix)]

    def describe(self) -> dict[str, object]:
        out: dict[str, object] = {"format": str(self.format)}
        if self.format is ToolFormat.NONE:
            return out
        keys = ["section_start", "section_end", "per_call_start", "per_call_end", "call_separator"]
        if self.format is ToolFormat.JSON_NATIVE:
            keys += ["name_field", "args_field", "id_field", "fun_name_is_key", "array_wrapped",
                     "python_dicts"]
        else:
            keys += ["name_prefix", "name_suffix", "call_close", "id_position", "id_prefix", "id_suffix"]
        if self.format is ToolFormat.TAG_WITH_TAGGED:
            keys += ["arg_name_prefix", "arg_name_suffix", "arg_value_suffix", "arg_separator"]
        for k in keys:
            v = getattr(self, k)
            out[k] = str(v) if isinstance(v, StrEnum) else v
        return out


def _in_json(text: str, needle: str) -> bool:
    q = "[\"']"
    return re.search(rf"[{{:,\[]\s*{q}{re.escape(needle)}{q}|{q}{re.escape(needle)}{q}\s*:", text) is not None


def _find_value(text: str, pred: Any, start: int = 0) -> tuple[Any, int, int] | None:
    """First object / array at or after ``start`` that decodes and satisfies ``pred``."""
    for i in range(start, len(text)):
        if text[i] in "{[":
            got = decode_prefix(text, i)
            if got is not None and pred(got[0]):
                return got[0], i, got[1]
    return None


def _path_to(obj: Any, pred: Any, path: str = "") -> str | None:
    if pred(obj):
        return path
    if isinstance(obj, dict):
        for k, v in obj.items():
            found = _path_to(v, pred, f"{path}.{k}" if path else k)
            if found is not None:
                return found
    return None


def _args_match(v: Any, args: dict[str, Any]) -> bool:
    if v == args:
        return True
    if isinstance(v, str):
        got = decode_prefix(v)
        return got is not None and got[0] == args
    return False


def _strip_reasoning(text: str, start: str, end: str) -> str:
    if start and end:
        text = re.sub(re.escape(start) + r"\s*" + re.escape(end), "", text, count=1)
    return text.strip()


def _split_opener(opener: str) -> tuple[str, str]:
    """(per-call start, name prefix): the name prefix is the marker the name sits in / after."""
    segs = segmentize(opener)
    if segs and not segs[-1][1]:
        last = segs[-1][0]
        cut = max(last.rfind("<"), last.rfind("["))
        if cut >= 0:  # an unclosed tag around the name: "<function="
            head = "".join(s for s, _ in segs[:-1]) + last[:cut]
            return head, last[cut:]
        if len(segs) > 1 and last.strip():
            return "".join(s for s, _ in segs[:-1]), last
    return opener, ""


def analyze_tools(p: pr.Prober, r_start: str, r_end: str) -> ToolAnalysis:
    def section(calls: list[dict[str, Any]]) -> str | None:
        out = p.output(p.calls_message(calls), tools=True)
        return None if out is None else _strip_reasoning(out, r_start, r_end)

    s1 = section([p.call()])
    ids_rendered = True
    if s1 is None:
        return ToolAnalysis()
    if pr.FUN_FIRST not in s1:  # the name may only appear in a template-made call id
        s1 = section([p.call(call_id=None)])
        ids_rendered = False
        if s1 is None or pr.FUN_FIRST not in s1:
            return ToolAnalysis()
    cid = pr.ID_FIRST if ids_rendered else None
    two_calls = [p.call(call_id=cid), p.call(pr.FUN_SECOND, {pr.ARG_SECOND: pr.VALUE_SECOND},
                                             pr.ID_SECOND if ids_rendered else None)]
    s2 = section(two_calls) if p.caps.supports_parallel_calls else None
    if _in_json(s1, pr.FUN_FIRST):
        return _json_native(s1, s2)
    if _in_json(s1, pr.ARG_FIRST):
        return _tagged(p, s1, s2, ToolFormat.TAG_WITH_JSON, ids_rendered, section)
    return _tagged(p, s1, s2, ToolFormat.TAG_WITH_TAGGED, ids_rendered, section)


def _json_native(s1: str, s2: str | None) -> ToolAnalysis:
    found = _find_value(s1, lambda v: _path_to(v, lambda x: x == pr.FUN_FIRST) is not None
                        or (isinstance(v, dict | list) and pr.FUN_FIRST in str(v)))
    if found is None:
        return ToolAnalysis()
    value, i, j = found
    wrapped = isinstance(value, list)
    obj = value[0] if wrapped and value else value
    args = {pr.ARG_FIRST: pr.VALUE_FIRST}
    is_key = isinstance(obj, dict) and list(obj) == [pr.FUN_FIRST]
    name_field = "" if is_key else _path_to(obj, lambda x: x == pr.FUN_FIRST) or ""
    args_field = "" if is_key else _path_to(obj, lambda x: _args_match(x, args)) or ""
    id_field = _path_to(obj, lambda x: x == pr.ID_FIRST) or ""
    sec_start, sec_end = s1[:i].strip(), s1[j:].strip()
    per_start = per_end = ""
    sep = ","
    if s2 is not None and not wrapped:
        second = _find_value(s2, lambda v: pr.FUN_SECOND in str(v), j)
        if second is not None:
            between = s2[j:second[1]]
            if sec_start and sec_start in between:
                per_start, per_end, sec_start, sec_end = sec_start, sec_end, "", ""
                between = between.replace(per_start, "", 1).replace(per_end, "", 1)
            sep = between.strip()
            # The section ends after the last call (a template may close it only there).
            after_last = s2[second[2]:].strip()
            if per_end and after_last.startswith(per_end):
                after_last = after_last[len(per_end):].strip()
            if after_last:
                sec_end = after_last
    return ToolAnalysis(ToolFormat.JSON_NATIVE, sec_start, sec_end, per_start, per_end, sep,
                        name_field=name_field, args_field=args_field, id_field=id_field,
                        fun_name_is_key=is_key, array_wrapped=wrapped,
                        python_dicts=f"'{pr.ARG_FIRST}'" in s1)


def _second_call_end(fmt: ToolFormat, rest: str, i_name: int, value_suffix: str) -> int | None:
    """End of the second call's arguments in ``rest`` (its name at ``i_name``)."""
    if fmt is ToolFormat.TAG_WITH_JSON:
        found = _find_value(rest, lambda v: _args_match(v, {pr.ARG_SECOND: pr.VALUE_SECOND}), i_name)
        return None if found is None else found[2]
    i = rest.find(pr.VALUE_SECOND, i_name)
    if i < 0 or not rest.startswith(value_suffix, i + len(pr.VALUE_SECOND)):
        return None
    return i + len(pr.VALUE_SECOND) + len(value_suffix)


def _tagged(p: pr.Prober, s1: str, s2: str | None, fmt: ToolFormat, ids_rendered: bool,
            section: Any) -> ToolAnalysis:
    i_name = s1.index(pr.FUN_FIRST)
    head1 = s1[:i_name]
    after_name = i_name + len(pr.FUN_FIRST)
    args = {pr.ARG_FIRST: pr.VALUE_FIRST}
    python_dicts = False
    kw: dict[str, Any] = {}
    if fmt is ToolFormat.TAG_WITH_JSON:
        found = _find_value(s1, lambda v: _args_match(v, args), after_name)
        if found is None:
            return ToolAnalysis()
        _, a_start, a_end = found
        python_dicts = f"'{pr.ARG_FIRST}'" in s1
        name_suffix = s1[after_name:a_start]
        args_end = a_end
    else:
        i_arg = s1.index(pr.ARG_FIRST, after_name)
        i_val = s1.index(pr.VALUE_FIRST, i_arg)
        args_end = i_val + len(pr.VALUE_FIRST)
        arg_head = s1[after_name:i_arg]
        kw["arg_name_suffix"] = s1[i_arg + len(pr.ARG_FIRST):i_val]
        two = section([p.call(args={pr.ARG_FIRST: pr.VALUE_FIRST, pr.ARG_SECOND: pr.VALUE_SECOND},
                              call_id=pr.ID_FIRST if ids_rendered else None)])
        tail = s1[args_end:]
        if two is not None and pr.ARG_SECOND in two:
            j_val = two.index(pr.VALUE_FIRST) + len(pr.VALUE_FIRST)
            between = two[j_val:two.index(pr.ARG_SECOND, j_val)]
            value_suffix, between_rest, _ = until_common_prefix(between, tail)
            name_part, sep_part, name_prefix = until_common_suffix(arg_head, between_rest)
        else:
            value_suffix = segmentize(tail.lstrip())[0][0] if tail.strip() else ""
            name_part, sep_part, name_prefix = arg_head, "", ""
        kw.update(arg_value_suffix=value_suffix, arg_name_prefix=name_prefix, arg_separator=sep_part)
        name_suffix = name_part
        args_end += len(value_suffix)
    # T7: call id between name and arguments
    if ids_rendered and pr.ID_FIRST in name_suffix:
        pre, post = name_suffix.split(pr.ID_FIRST, 1)
        kw.update(id_position=CallIdPosition.BETWEEN_FUNC_AND_ARGS, id_prefix=pre, id_suffix=post)
        name_suffix = ""
    elif ids_rendered and pr.ID_FIRST in head1:
        kw["id_position"] = CallIdPosition.PRE_FUNC_NAME
    elif ids_rendered and pr.ID_FIRST in s1[args_end:]:
        kw["id_position"] = CallIdPosition.POST_ARGS
    tail1 = s1[args_end:]
    opener, close, sec_start, sec_end, sep = head1, tail1, "", "", ""
    if s2 is not None and pr.FUN_SECOND in s2[args_end:]:
        shift = s2.index(pr.FUN_FIRST) - i_name  # a section opened only before several calls
        rest2 = s2[args_end + shift:]
        i2 = rest2.index(pr.FUN_SECOND)
        close, _, _ = until_common_prefix(tail1, rest2[:i2])
        if not close and tail1.strip() and rest2[:i2].strip().startswith(tail1.strip()):
            close = tail1
        sec_end = tail1[len(close):]
        between = rest2[len(close):i2]
        sec_start, sep, opener = until_common_suffix(head1, between)
        if shift > 0 and s2[:shift + i_name].endswith(head1):
            sec_start = s2[:shift] + sec_start
        # The section ends after the last call: what follows it in the two-call render
        # (a template may close the section only there).
        last_end = _second_call_end(fmt, rest2, i2, kw.get("arg_value_suffix", ""))
        if last_end is not None and rest2[last_end:].startswith(close) and (
                after_last := rest2[last_end + len(close):]).strip():
            sec_end = after_last
    per_start, name_prefix = _split_opener(opener)
    if kw.get("id_position") is CallIdPosition.PRE_FUNC_NAME:
        per_start, name_prefix = opener, ""
    return ToolAnalysis(fmt, sec_start.strip(), sec_end.strip(), per_start, "", sep.strip(),
                        name_prefix=name_prefix, name_suffix=name_suffix, call_close=close,
                        python_dicts=python_dicts, ids_rendered=ids_rendered, **kw)
