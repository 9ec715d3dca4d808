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

:class:`Deltas` is one payload for a run of consecutive deltas of one block (a content block;
a chat field; a Responses output item): the frames' bytes are ``before + piece + after`` each,
so a run of them is ``before + glue.join(pieces) + after`` with ``glue = after + before`` (its
:data:`Cut`).  While it waits in the run's queue (the SSE sender has not called
:meth:`Deltas.take` yet) the encoder appends the next piece to it instead of returning a new
payload: the tokens of one upstream read leave as one payload, not one object, queue entry and
frame call each.  Nothing comes between two of its frames: the encoder starts a new one (or
none) as soon as it returns anything else, and only a stream that nothing but its SSE sender
reads may carry them (the runs of ``n > 1`` choices share one queue: they keep one payload per
delta).
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
Cut = tuple[bytes, bytes, bytes]  # a delta frame's (before, after + before, after) its piece


def cut(frame: bytes, at: int, end: int) -> Cut:
    """``frame`` cut around ``frame[at:end]`` (its piece) into a :data:`Cut`."""
    before, after = frame[:at], frame[end:]
    return before, after + before, after


class Deltas(dict[str, Any]):
    """Consecutive delta frames of one block as one payload; see the module docstring.  An
    empty dict to anything but :func:`frame`."""

    __slots__ = ("cut", "pieces", "taken")

    def __init__(self, cut: Cut, piece: bytes) -> None:
        self.cut = cut
        self.pieces = [piece]
        self.taken = False  # framed: the encoder may no longer add to it

    def take(self) -> bytes:
        """The frames, once the sender has the payload: nothing is added after this."""
        self.taken = True
        before, glue, after = self.cut
        pieces = self.pieces
        return before + (pieces[0] if len(pieces) == 1 else glue.join(pieces)) + after


def delta_frame(index: int, kind: str) -> Cut:
    """The frame of block ``index``'s deltas (of a block of ``kind``) cut around the JSON
    string of the piece."""
    delta_type, field = DELTA_FIELDS[kind]
    whole = typed_event({"type": "content_block_delta", "index": index,
                         "delta": {"type": delta_type, field: ""}})
    at = whole.rindex(b'""')
    return cut(whole, at, at + 2)


def frame(payload: Json) -> bytes:
    """A payload of the Messages stream as its SSE frame (pre-encoded or not)."""
    if type(payload) is Deltas:
        return payload.take()
    return payload.frame if type(payload) is Wire else typed_event(payload)
