"""JSON that may be written as a Python literal, and an incremental value scanner.

Some templates print arguments with Python's ``str()`` (``{'city': 'Paris', 'n': True}``);
:func:`loads_lenient` accepts both syntaxes.  :class:`ValueScanner` finds where a JSON
(or Python-literal) value that arrives in pieces ends, so a parser knows when a call's
arguments are complete without re-scanning.
"""

from __future__ import annotations

import json
import re
from typing import Any

_PY_WORDS = {"True": "true", "False": "false", "None": "null"}
_WORD = re.compile(r"[A-Za-z_]+")


def python_to_json(text: str) -> str:
    """Rewrite single-quoted strings and ``True`` / ``False`` / ``None`` as JSON."""
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c in "\"'":
            j = i + 1
            chars: list[str] = []
            while j < len(text) and text[j] != c:
                if text[j] == "\\" and j + 1 < len(text):
                    nxt = text[j + 1]
                    chars.append({"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"'}.get(
                        nxt, "\\" + nxt))
                    j += 2
                    continue
                chars.append(text[j])
                j += 1
            out.append(json.dumps("".join(chars), ensure_ascii=False))
            i = j + 1
            continue
        m = _WORD.match(text, i)
        if m:
            out.append(_PY_WORDS.get(m.group(), m.group()))
            i = m.end()
            continue
        out.append(c)
        i += 1
    return "".join(out)


def loads_lenient(text: str) -> Any:
    """``json.loads``, falling back to the Python-literal syntax; raises ``ValueError``."""
    try:
        return json.loads(text)
    except ValueError:
        return json.loads(python_to_json(text))


def decode_prefix(text: str, start: int = 0) -> tuple[Any, int] | None:
    """Decode the value starting at ``start`` (JSON or Python literal): (value, end) or None."""
    scanner = ValueScanner()
    end = scanner.feed(text[start:])
    if end < 0:
        return None
    try:
        return loads_lenient(text[start:start + end]), start + end
    except ValueError:
        return None


class ValueScanner:
    """Finds the end of one object / array value fed in pieces (strings of both quotes)."""

    def __init__(self) -> None:
        self.depth = 0
        self.quote = ""
        self.escape = False
        self.seen = 0

    def feed(self, text: str) -> int:
        """Index in ``text`` just past the value's end, or -1 if it has not ended yet."""
        for i, c in enumerate(text):
            if self.quote:
                if self.escape:
                    self.escape = False
                elif c == "\\":
                    self.escape = True
                elif c == self.quote:
                    self.quote = ""
                continue
            if c in "\"'" and self.depth:
                self.quote = c
            elif c in "{[":
                self.depth += 1
            elif c in "}]":
                self.depth -= 1
                if self.depth <= 0:
                    self.seen += i + 1
                    return i + 1
            elif not self.depth and not c.isspace():
                return -2  # not an object or array
        self.seen += len(text)
        return -1
