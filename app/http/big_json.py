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
