"""Responses stream delta events already encoded: a streamed ``/v1/responses`` (not a
background one) pays for one ``orjson.dumps`` of the token's text and the formatting of its
``sequence_number`` per delta, not for the event's dict, its JSON and the SSE frame.

Pre-encoded events are a :class:`~app.api.messages.wire.Deltas` (Messages' class: one or more
consecutive delta events of one output item, its frames exactly the bytes
:func:`app.http.sse.named_event` makes of each event's dict; as a dict it is empty, so only
:func:`frame` may consume it).  Only a stream that nothing but the SSE response reads may carry
them: a background run's payloads are logged, persisted and followed by sequence number
(:mod:`app.engine.replay`), and the WebSocket mode sends its own JSON, so both keep dicts.
:func:`delta_frame` cuts the generic frame of a delta event whose ``sequence_number`` is 0 and
whose ``delta`` is the last string and empty around the number and the empty string, once per
output item: the frame's :data:`~app.api.messages.wire.Cut` around its piece, and the bytes
between the number and the string; a delta's piece is then ``seq + middle +
orjson.dumps(text)`` (:func:`piece`), the same JSON as the whole event's ``orjson.dumps`` (a
lone surrogate is refused by both alike, ``TypeError``).  ``tests/unit/api/responses/test_wire.py``
compares both byte for byte.
"""

from __future__ import annotations

from typing import Any

import orjson

from app.api.messages.wire import Cut, Deltas, cut
from app.core import events as ev
from app.http.sse import named_event

Json = dict[str, Any]
ItemFrame = tuple[Cut, bytes]  # an item's delta frame: cut around its piece, and the piece's middle

__all__ = ["WIRE_EVENTS", "Deltas", "ItemFrame", "delta_frame", "delta_frames", "frame", "piece"]
_SEQ = b'"sequence_number":0'
# the event whose deltas an open output item of a kind sends pre-encoded
WIRE_EVENTS: dict[str, type[object]] = {"reasoning": ev.ReasoningDelta, "preamble": ev.PreambleDelta,
                                        "text": ev.TextDelta, "tool": ev.ToolCallArgumentsDelta}


def delta_frame(event: Json) -> ItemFrame:
    """``event``'s SSE frame (its ``sequence_number`` 0, its ``delta`` ``""`` and the last
    string) cut around the number and the empty string."""
    whole = named_event(event["type"], event)
    at = whole.index(_SEQ) + len(_SEQ) - 1
    end = whole.rindex(b'""')
    return cut(whole, at, end + 2), whole[at + 1:end]


def frame(payload: Json) -> bytes:
    """A payload of the Responses stream as its SSE frame (pre-encoded or not)."""
    return payload.take() if type(payload) is Deltas else named_event(payload["type"], payload)


def delta_frames(kind: str, item_id: str, output_index: int, reasoning: str) -> ItemFrame:
    """The cut frame of an output item's delta events: ``kind`` ``tool`` (function call
    arguments), ``reasoning`` (the dialect's event name ``reasoning``), or text (``preamble``
    / ``text``: with ``logprobs: []``)."""
    type_ = ("response.function_call_arguments.delta" if kind == "tool" else
             reasoning if kind == "reasoning" else "response.output_text.delta")
    event: Json = {"type": type_, "sequence_number": 0, "item_id": item_id, "output_index": output_index}
    if kind != "tool":
        event["content_index"] = 0
    event["delta"] = ""
    if kind in ("preamble", "text"):
        event["logprobs"] = []
    return delta_frame(event)


def piece(middle: bytes, seq: int, text: str) -> bytes:
    """The piece of the delta event numbered ``seq`` carrying ``text``."""
    return b"%d%b%b" % (seq, middle, orjson.dumps(text))
