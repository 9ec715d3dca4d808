"""Differential comparison of two renders: common prefix / suffix, differing middles.

The core mechanism of the analyzer (llama.cpp's ``calculate_diff_split``): split two
strings into ``prefix + left + suffix`` and ``prefix + right + suffix`` with the longest
common prefix and suffix, then move any ``<...>`` / ``[...]`` marker that the split cut
in half out of the prefix / suffix into the middles, until stable (tag boundary fixing).
"""

from __future__ import annotations

from dataclasses import dataclass

_PAIRS = {"<": ">", "[": "]"}


@dataclass(frozen=True, slots=True)
class DiffSplit:
    prefix: str
    left: str
    right: str
    suffix: str


def common_prefix_len(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def common_suffix_len(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[-1 - i] == b[-1 - i]:
        i += 1
    return i


def open_marker_start(text: str) -> int:
    """Index of an unclosed ``<`` / ``[`` at the end of ``text`` (a cut marker), or -1."""
    for i in range(len(text) - 1, -1, -1):
        c = text[i]
        if c in ">]":
            return -1
        if c in _PAIRS:
            return i
    return -1


def close_marker_end(text: str) -> int:
    """Length of a marker tail (``...>`` / ``...]``) cut at the start of ``text``, or 0."""
    for i, c in enumerate(text):
        if c in "<[":
            return 0
        if c in ">]":
            return i + 1
    return 0


def diff_split(a: str, b: str) -> DiffSplit:
    """Split ``a`` / ``b`` into a shared prefix and suffix around their differences."""
    p = common_prefix_len(a, b)
    s = common_suffix_len(a[p:], b[p:])
    while True:
        changed = False
        prefix = a[:p]
        cut = open_marker_start(prefix)
        # a marker is cut when its opening is in the prefix and its closing is not
        if cut >= 0 and (close_marker_end(a[p:]) or close_marker_end(b[p:])):
            p = cut
            changed = True
        suffix = a[len(a) - s:]
        tail = close_marker_end(suffix)
        left_mid, right_mid = a[p:len(a) - s], b[p:len(b) - s]
        if tail and s and (open_marker_start(left_mid) >= 0 or open_marker_start(right_mid) >= 0):
            s -= tail
            changed = True
        s = min(s, len(a) - p, len(b) - p)
        if not changed:
            break
    return DiffSplit(a[:p], a[p:len(a) - s], b[p:len(b) - s], a[len(a) - s:])


def segmentize(text: str) -> list[tuple[str, bool]]:
    """Split ``text`` into (fragment, is_marker) on ``<...>`` and ``[...]`` boundaries."""
    out: list[tuple[str, bool]] = []
    i = 0
    buf = ""
    while i < len(text):
        c = text[i]
        if c in _PAIRS:
            j = text.find(_PAIRS[c], i + 1)
            nxt = min((k for k in (text.find("<", i + 1), text.find("[", i + 1)) if k >= 0), default=-1)
            if j >= 0 and (nxt < 0 or j < nxt):
                if buf:
                    out.append((buf, False))
                    buf = ""
                out.append((text[i:j + 1], True))
                i = j + 1
                continue
        buf += c
        i += 1
    if buf:
        out.append((buf, False))
    return out


def leading_marker(text: str) -> str:
    """The first marker of ``text`` after whitespace, or ``""``."""
    segs = segmentize(text.lstrip())
    return segs[0][0] if segs and segs[0][1] else ""


def trailing_marker(text: str) -> str:
    """The last marker of ``text`` before trailing whitespace, or ``""``."""
    segs = segmentize(text.rstrip())
    return segs[-1][0] if segs and segs[-1][1] else ""


def until_common_suffix(a: str, b: str) -> tuple[str, str, str]:
    """``a`` and ``b`` minus their common (marker-aligned) suffix, and that suffix."""
    n = common_suffix_len(a, b)
    while n:
        tail = close_marker_end(a[len(a) - n:])
        if not tail or (open_marker_start(a[:len(a) - n]) < 0 and open_marker_start(b[:len(b) - n]) < 0):
            break
        n -= tail
    return a[:len(a) - n], b[:len(b) - n], a[len(a) - n:]


def until_common_prefix(a: str, b: str) -> tuple[str, str, str]:
    """The common (marker-aligned) prefix of ``a`` and ``b``, and what follows in each."""
    n = common_prefix_len(a, b)
    cut = open_marker_start(a[:n])
    if cut >= 0 and (close_marker_end(a[n:]) or close_marker_end(b[n:])):
        n = cut
    return a[:n], a[n:], b[n:]
