"""Anthropic stream events already encoded: a streamed ``/v1/messages`` pays for one
``orjson.dumps`` of the delta's text per token, not for two dicts, their JSON and the SSE frame.

:class:`Wire` is a stream payload whose SSE frame is already made (``frame``: exactly the bytes
:func:`~app.http.sse.typed_event` makes of the event's dict); as a dict it is empty, so only
:func:`frame` may consume it (the route passes it to the stream as its framing; the run and the
engine hand payloads on without reading them).  :func:`delta_frame` splits the generic frame of a
``content_block_delta`` whose last value is an empty string into the bytes before and after that
string, once per block: a delta is then ``prefix + orjson.dumps(text) + suffix``, the same JSON
escaping (quotes, backslashes, control characters, U+2028, non-ASCII as UTF-8) as the whole
event's ``orjson.dumps``; a lone surrogate is refused by both alike (``TypeError``).
``tests/unit/api/messages/test_wire.py`` compares both encodings byte for byte.
"""

from __future__ import annotations

from typing import Any

from app.http.sse import typed_event

Json = dict[str, Any]

# the delta type of a block kind and the field its piece goes in
DELTA_FIELDS = {"text": ("text_delta", "text"), "thinking": ("thinking_delta", "thinking"),
                "tool_use": ("input_json_delta", "partial_json"),
                "server_tool_use": ("input_json_delta", "partial_json"),
                "mcp_tool_use": ("input_json_delta", "partial_json")}


class Wire(dict[str, Any]):
    """A stream event as its SSE frame; an empty dict to anything but :func:`frame`."""

    __slots__ = ("frame",)

    def __init__(self, frame: bytes) -> None:
        self.frame = frame


PING = Wire(typed_event({"type": "ping"}))


def delta_frame(index: int, kind: str) -> tuple[bytes, bytes]:
    """The frame of block ``index``'s deltas (of a block of ``kind``) before and after the
    JSON string of the piece."""
    delta_type, field = DELTA_FIELDS[kind]
    whole = typed_event({"type": "content_block_delta", "index": index,
                         "delta": {"type": delta_type, field: ""}})
    cut = whole.rindex(b'""')
    return whole[:cut], whole[cut + 2:]


def frame(payload: Json) -> bytes:
    """A payload of the Messages stream as its SSE frame (pre-encoded or not)."""
    return payload.frame if type(payload) is Wire else typed_event(payload)
