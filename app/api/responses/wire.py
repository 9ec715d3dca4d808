"""Responses stream delta events already encoded: a streamed ``/v1/responses`` (not a
background one) pays for one ``orjson.dumps`` of the token's text and the formatting of its
``sequence_number`` per delta, not for the event's dict, its JSON and the SSE frame.

A pre-encoded event is a :class:`~app.api.messages.wire.Wire` (Messages' class: its
``frame`` is exactly the bytes :func:`app.http.sse.named_event` makes of the event's dict; as
a dict it is empty, so only :func:`frame` may consume it).  Only a stream that nothing but the
SSE response reads may carry them: a background run's payloads are logged, persisted and
followed by sequence number (:mod:`app.engine.replay`), and the WebSocket mode sends its own
JSON, so both keep dicts.  :func:`delta_frame` splits the generic frame of a delta event whose
``sequence_number`` is 0 and whose ``delta`` is the last string and empty into the bytes before
the number, between the number and the delta's JSON string, and after it, once per output
item: a delta is then ``head + orjson.dumps(seq) + middle + orjson.dumps(text) + tail`` (one
``bytes.join``), the same JSON as the whole event's ``orjson.dumps`` (a lone surrogate is
refused by both alike, ``TypeError``).  ``tests/unit/api/responses/test_wire.py`` compares both
byte for byte.
"""

from __future__ import annotations

from typing import Any

import orjson

from app.api.messages.wire import Wire
from app.http.sse import named_event

Json = dict[str, Any]

__all__ = ["Wire", "delta_frame", "delta_frames", "frame", "framed"]
_SEQ = b'"sequence_number":0'


def delta_frame(event: Json) -> tuple[bytes, bytes, bytes]:
    """``event``'s SSE frame (its ``sequence_number`` 0, its ``delta`` ``""`` and the last
    string) cut around the number and the empty string."""
    whole = named_event(event["type"], event)
    at = whole.index(_SEQ) + len(_SEQ) - 1
    cut = whole.rindex(b'""')
    return whole[:at], whole[at + 1:cut], whole[cut + 2:]


def frame(payload: Json) -> bytes:
    """A payload of the Responses stream as its SSE frame (pre-encoded or not)."""
    return payload.frame if type(payload) is Wire else named_event(payload["type"], payload)


def delta_frames(kind: str, item_id: str, output_index: int, reasoning: str) -> tuple[bytes, bytes, bytes]:
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


def framed(pieces: tuple[bytes, bytes, bytes], seq: int, text: str) -> Wire:
    """The delta event numbered ``seq`` carrying ``text``."""
    head, middle, tail = pieces
    return Wire(b"".join((head, orjson.dumps(seq), middle, orjson.dumps(text), tail)))
