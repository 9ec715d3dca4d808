"""Whitespace-tolerant markers that can be matched on text arriving in pieces.

A marker from the analysis (``"</arg_key>\\n<arg_value>"``) is compiled into literal
pieces separated by optional whitespace, with runs of digits optionally generalized
(``":0<|tool_call_argument_begin|>"`` also matches ``":1..."``).  Matching answers
*match* / *partial* (the text ended inside a possible match: hold it back) / *fail*.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

_TOKENS = re.compile(r"\s+|\d+|[^\s\d]+")


class Status(Enum):
    MATCH = 1
    PARTIAL = 2
    FAIL = 3


@dataclass(frozen=True, slots=True)
class Found:
    status: Status
    start: int  # where the match (or the possible match) starts; len(text) when none
    end: int = 0


class Marker:
    """One marker; empty markers never match."""

    def __init__(self, text: str, digits: bool = False) -> None:
        self.text = text.strip()
        tokens: list[tuple[str, str]] = []
        for tok in _TOKENS.findall(self.text):
            if tok.isspace():
                tokens.append(("ws", ""))
            elif tok.isdigit() and digits and tokens:
                tokens.append(("digits", ""))
            elif tokens and tokens[-1][0] == "lit":
                tokens[-1] = ("lit", tokens[-1][1] + tok)
            else:
                tokens.append(("lit", tok))
        self.tokens = tokens
        self.first = tokens[0][1] if tokens else ""

    def __bool__(self) -> bool:
        return bool(self.tokens)

    def __repr__(self) -> str:
        return f"Marker({self.text!r})"

    def match(self, text: str, pos: int, final: bool = False) -> Found:
        """Match starting exactly at ``pos``."""
        start = pos
        for kind, val in self.tokens:
            if kind == "lit":
                seg = text[pos:pos + len(val)]
                if seg == val:
                    pos += len(val)
                elif val.startswith(seg) and pos + len(seg) == len(text) and not final:
                    return Found(Status.PARTIAL, start)
                else:
                    return Found(Status.FAIL, start)
            else:
                j = pos
                while j < len(text) and (text[j].isspace() if kind == "ws" else text[j].isdigit()):
                    j += 1
                if j == len(text) and not final:
                    return Found(Status.PARTIAL, start)
                if kind == "digits" and j == pos:
                    return Found(Status.FAIL, start)
                pos = j
        return Found(Status.MATCH, start, pos)

    def match_ws(self, text: str, pos: int = 0, final: bool = False) -> Found:
        """Match at ``pos`` after optional whitespace."""
        j = pos
        while j < len(text) and text[j].isspace():
            j += 1
        if j == len(text):
            return Found(Status.FAIL if final or not self else Status.PARTIAL, pos)
        return self.match(text, j, final) if self else Found(Status.FAIL, pos)

    def find(self, text: str, start: int = 0, final: bool = False) -> Found:
        """The first match in ``text[start:]``; or where a possible match begins (partial)."""
        if not self:
            return Found(Status.FAIL, len(text))
        i = text.find(self.first, start)
        while i >= 0:
            got = self.match(text, i, final)
            if got.status is not Status.FAIL:
                return got
            i = text.find(self.first, i + 1)
        if not final:
            for k in range(min(len(self.first) - 1, len(text) - start), 0, -1):
                if self.first.startswith(text[len(text) - k:]):
                    return Found(Status.PARTIAL, len(text) - k)
        return Found(Status.FAIL, len(text))


def earliest(text: str, markers: list[Marker], start: int = 0,
             final: bool = False) -> tuple[Found, Marker | None]:
    """The marker that occurs first; a partial one earlier than any match wins (wait)."""
    best: tuple[Found, Marker | None] = (Found(Status.FAIL, len(text)), None)
    for mk in markers:
        got = mk.find(text, start, final)
        if got.status is Status.FAIL:
            continue
        cur = best[0]
        if (cur.status is Status.FAIL or got.start < cur.start
                or (got.start == cur.start and got.status is Status.MATCH and cur.status is Status.MATCH
                    and got.end > cur.end)):
            best = (got, mk)
    return best
