"""A big JSON body parsed in pieces, so a worker thread gives the GIL back between them.

``orjson.loads`` of a 3.9 MB body (100,000 input items) is one call of ~35 ms that holds the
GIL: run in a thread, it still stops the event loop that long.  :func:`loads_in_pieces` parses
the body's longest list of objects (``"input": [{...}, {...}, ...]``) some 64 KB at a time, and
the rest of the body once, with a unique placeholder where those items were.  It returns what
``orjson.loads`` would, or ``None`` whenever it cannot be sure of that (no such list, a cut
that is not between two items, the placeholder not found where the items were): the caller
then parses the body whole, with the errors it always gives.

Why a cut is safe: items are cut at ``}`` ``,`` ``{`` (whitespace allowed) and each piece must
parse as a list of objects.  A cut inside a string leaves that string open (the piece fails);
a cut inside a nested list or object leaves it unbalanced (the piece fails).  So pieces that all
parse are whole items of the list that starts at the match, and the placeholder, found as the
first item of the very list the body names, says that list is the one whose items they were.

:func:`loads_long_strings` does the same for a body whose bulk is a few long strings (a 14 MB
message: ``orjson.loads`` held the GIL 20-31 ms in one call).  A stretch of at least
:data:`PIECE` bytes without a quote is found by looking for a quote in each window of the body
(``bytes.find``, short calls); the quotes around it are a string's only if replacing that stretch
(quotes included) by a unique placeholder string leaves a body that parses with the placeholder,
whole, as a value: a stretch between two strings (structure) would leave the placeholder outside
any string (not JSON), and a quote that was escaped would leave it inside a longer string (not
found whole).  The stretch is then decoded a piece at a time, each cut where no escape sequence
(``\\uD83D\\uDE00`` is 12 bytes) and no UTF-8 character can straddle it, and the pieces joined.
Any doubt (a piece that does not decode, a placeholder not found exactly once, a rest that is
itself big): ``None``, and the body is parsed whole.
"""

from __future__ import annotations

import re
import secrets
from typing import Any

import orjson

PIECE = 1 << 16  # bytes of items parsed per call (~0.5 ms)
MISSES = 8  # cuts that were not between items, before the rest is left to one parse
_LIST = re.compile(rb'"(input|messages)"\s*:\s*\[\s*\{')
_CUT = re.compile(rb"\}\s*,\s*\{")
STRINGS = 16  # long strings taken out of one body, at most
STRING_PIECE = 1 << 20  # bytes of a long string decoded per call (~1-2 ms)
SEEK = 4096  # positions tried for a safe cut before giving the string to the whole parse
ESCAPE = 12  # the longest escape sequence: a surrogate pair, \\uXXXX\\uXXXX


def loads_in_pieces(raw: bytes) -> Any | None:
    """``orjson.loads(raw)`` for a body with a long ``input`` / ``messages`` list of objects,
    parsed in pieces; ``None`` when the body is not one this can parse with certainty (or is
    invalid: the whole parse reports that)."""
    found = _LIST.search(raw)
    if found is None:
        return None
    key = found.group(1).decode()
    first = found.end() - 1  # the first item's "{"
    items: list[Any] = []
    start, misses = first, 0
    for match in _CUT.finditer(raw, first):
        if match.start() + 1 - start < PIECE:
            continue
        if _take(raw[start:match.start() + 1], items):
            start = match.end() - 1  # the next item's "{"
        else:  # a cut in a string (the next may do), or past the list: the rest parses whole
            misses += 1
            if misses > MISSES:
                break
    if start == first:
        return None  # not long enough to be worth it
    marker = "ocm-" + secrets.token_hex(16)
    try:
        rest = orjson.loads(raw[:first] + b'"' + marker.encode() + b'",' + raw[start:])
    except orjson.JSONDecodeError:
        return None
    where = rest.get(key) if isinstance(rest, dict) else None
    if not isinstance(where, list) or not where or where[0] != marker:
        return None
    where[0:1] = items
    return rest


def _take(piece: bytes, items: list[Any]) -> bool:
    """Parse ``piece`` (items with their separating commas) onto ``items``; False: not items."""
    try:
        parsed = orjson.loads(b"[" + piece + b"]")
    except orjson.JSONDecodeError:
        return False
    if not all(isinstance(item, dict) for item in parsed):
        return False
    items.extend(parsed)
    return True


def loads_long_strings(raw: bytes) -> Any | None:
    """``orjson.loads(raw)`` for a body whose bulk is at most :data:`STRINGS` long strings,
    decoded a piece at a time; ``None`` when the body is not one this can parse with certainty
    (see the module docstring)."""
    spans = _long_stretches(raw)
    if not spans:
        return None
    marker = "ocm-" + secrets.token_hex(16) + "-"
    parts, at = [], 0
    for n, (start, end) in enumerate(spans):  # start, end: the quotes around the stretch
        parts += [raw[at:start], b'"', f"{marker}{n}".encode(), b'"']
        at = end + 1
    parts.append(raw[at:])
    rest_raw = b"".join(parts)
    if len(rest_raw) > PIECE * 16:  # the rest is big itself: leave it to the other paths
        return None
    try:
        rest = orjson.loads(rest_raw)
    except orjson.JSONDecodeError:
        return None
    texts: list[str | None] = [None] * len(spans)
    for n, (start, end) in enumerate(spans):
        texts[n] = _decode(raw, start + 1, end)
        if texts[n] is None:
            return None
    found = _replace(rest, marker, texts)
    return rest if found == len(spans) else None


def _long_stretches(raw: bytes) -> list[tuple[int, int]]:
    """The (opening quote, closing quote) positions around each stretch of at least
    :data:`PIECE` bytes without an unescaped quote; empty when there are none or too many."""
    spans: list[tuple[int, int]] = []
    size, window = len(raw), PIECE // 2
    i = 0
    while i + window <= size:  # a shorter tail without a quote is no long stretch's start
        if raw.find(b'"', i, i + window) >= 0:
            i += window
            continue
        start = raw.rfind(b'"', 0, i)  # a window without a quote: the quotes around it
        end = raw.find(b'"', i + window)
        while end > 0 and _escaped(raw, end):
            end = raw.find(b'"', end + 1)
        if start < 0 or end < 0:
            break  # structure (or whitespace) up to the end: no string here
        if _escaped(raw, start):
            return []
        if raw[max(0, start - 64):start].rstrip()[-1:] not in (b":", b"[", b","):
            i = end  # not a value's opening quote: structure between two strings
            continue
        if end - start > PIECE:
            if len(spans) == STRINGS:
                return []
            spans.append((start, end))
        i = end + 1
    return spans


def _escaped(raw: bytes, quote: int) -> bool:
    """Whether the quote at ``quote`` follows an odd run of backslashes."""
    run = 0
    while quote - run - 1 >= 0 and raw[quote - run - 1] == 0x5C:
        run += 1
    return run % 2 == 1


def _decode(raw: bytes, start: int, end: int) -> str | None:
    """The JSON string content ``raw[start:end]`` decoded in pieces of about
    :data:`STRING_PIECE` bytes, each cut where no escape or UTF-8 character straddles it."""
    out: list[str] = []
    at = start
    while at < end:
        cut = min(at + STRING_PIECE, end)
        tries = 0
        while cut < end and (raw[cut] & 0xC0 == 0x80 or raw.find(b"\\", max(at, cut - ESCAPE), cut) >= 0):
            cut, tries = cut + 1, tries + 1
            if tries > SEEK:
                return None  # no safe cut near (escapes everywhere): the whole parse takes it
        try:
            out.append(orjson.loads(b'"' + raw[at:cut] + b'"'))
        except orjson.JSONDecodeError:
            return None
        at = cut
    return "".join(out)


def _replace(value: Any, marker: str, texts: list[str | None]) -> int:
    """Put ``texts[n]`` where the placeholder ``marker + n`` is a value in ``value``;
    how many placeholders it found (each must be found exactly once)."""
    found = 0
    stack = [value]
    while stack:
        node = stack.pop()
        pairs = node.items() if isinstance(node, dict) else enumerate(node)
        for key, item in list(pairs):
            if isinstance(item, str):
                if item.startswith(marker) and item[len(marker):].isdigit():
                    n = int(item[len(marker):])
                    if n >= len(texts) or texts[n] is None:
                        return -1  # found twice
                    node[key], texts[n] = texts[n], None
                    found += 1
            elif isinstance(item, (dict, list)):
                stack.append(item)
    return found
