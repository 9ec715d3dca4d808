"""Stream framing with orjson: the only place SSE and JSON-lines bytes are built."""

from __future__ import annotations

from typing import Any

import orjson

DONE = b"data: [DONE]\n\n"


def data_event(payload: Any) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def named_event(name: str, payload: Any) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def typed_event(payload: Any) -> bytes:
    """An event named by its payload's ``type`` (Anthropic's stream: ``event: message_start``)."""
    return named_event(payload["type"], payload)


def json_line(payload: Any) -> bytes:
    """One JSON-lines record (SageMaker ``application/jsonlines`` streaming)."""
    return orjson.dumps(payload) + b"\n"
