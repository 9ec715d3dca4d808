"""Chat Completions stream chunks already encoded: a streamed ``/v1/chat/completions`` pays
for one ``orjson.dumps`` of the token's text per delta, not for the chunk's three dicts, their
JSON and the SSE frame.

Pre-encoded chunks are a :class:`~app.api.messages.wire.Deltas` (Messages' class: one or more
consecutive delta chunks of one field, its frames exactly the bytes
:func:`app.http.sse.data_event` makes of each chunk's dict; as a dict it is empty, so only
:func:`frame` may consume it; the route passes :func:`frame` to the SSE stream as its framing,
the engine hands payloads on without reading them).  :func:`delta_frame` cuts the generic frame
of a chunk whose delta's last value is an empty string around that string, once per stream and
field: a delta is then ``prefix + orjson.dumps(text) + suffix``, the same JSON escaping
(quotes, backslashes, control characters, U+2028, non-ASCII as UTF-8) as the whole chunk's
``orjson.dumps``; a lone surrogate is refused by both alike (``TypeError``).
``tests/unit/api/chat/test_wire.py`` compares both encodings byte for byte.
"""

from __future__ import annotations

from typing import Any

from app.api.messages.wire import Cut, Deltas, cut
from app.http.sse import data_event

Json = dict[str, Any]

__all__ = ["Cut", "Deltas", "delta_frame", "frame"]


def delta_frame(chunk: Json) -> Cut:
    """The SSE frame of ``chunk`` (whose last string value, in its delta, is ``""``) cut around
    that empty string."""
    whole = data_event(chunk)
    at = whole.rindex(b'""')
    return cut(whole, at, at + 2)


def frame(payload: Json) -> bytes:
    """A payload of the Chat Completions stream as its SSE frame (pre-encoded or not)."""
    return payload.take() if type(payload) is Deltas else data_event(payload)
