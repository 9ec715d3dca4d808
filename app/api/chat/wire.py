"""Chat Completions stream chunks already encoded: a streamed ``/v1/chat/completions`` pays
for one ``orjson.dumps`` of the token's text per delta, not for the chunk's three dicts, their
JSON and the SSE frame.

A pre-encoded chunk is a :class:`~app.api.messages.wire.Wire` (the same class as Messages':
its ``frame`` is exactly the bytes :func:`app.http.sse.data_event` makes of the chunk's dict;
as a dict it is empty, so only :func:`frame` may consume it; the route passes :func:`frame` to
the SSE stream as its framing, the engine hands payloads on without reading them).
:func:`delta_frame` splits the generic frame of a chunk whose delta's last value is an empty
string into the bytes before and after that string, once per stream and field: a delta is then
``prefix + orjson.dumps(text) + suffix``, the same JSON escaping (quotes, backslashes, control
characters, U+2028, non-ASCII as UTF-8) as the whole chunk's ``orjson.dumps``; a lone surrogate
is refused by both alike (``TypeError``).  ``tests/unit/api/chat/test_wire.py`` compares both
encodings byte for byte.
"""

from __future__ import annotations

from typing import Any

from app.api.messages.wire import Wire
from app.http.sse import data_event

Json = dict[str, Any]

__all__ = ["Wire", "delta_frame", "frame"]


def delta_frame(chunk: Json) -> tuple[bytes, bytes]:
    """The SSE frame of ``chunk`` (whose last string value, in its delta, is ``""``) before and
    after that empty string's quotes."""
    whole = data_event(chunk)
    cut = whole.rindex(b'""')
    return whole[:cut], whole[cut + 2:]


def frame(payload: Json) -> bytes:
    """A payload of the Chat Completions stream as its SSE frame (pre-encoded or not)."""
    return payload.frame if type(payload) is Wire else data_event(payload)
