"""A llama.cpp ``/completion`` stream synthesized from a Harmony script.

The event shape is copied from the real recordings in tests/fixtures/wire/llamacpp
(one ``data:`` event per token with ``content`` / ``tokens`` / ``stop``; the stop
token's event has empty content; a final ``stop: true`` event with ``stop_type``,
token counts and timings).  Used where no recording covers a case (reasoning).
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from app.formats.harmony.vocab import harmony_encoding
from tests.support.wire import RecordedBody

STOP_IDS = {200002, 200012}


def script_ids(script: str) -> list[int]:
    return list(harmony_encoding().encode(script, allowed_special="all"))


def sse_events(script: str, *, prompt_tokens: int = 59, stop_type: str = "eos",
               truncate_after: int | None = None) -> list[bytes]:
    enc = harmony_encoding()
    ids = script_ids(script)
    events: list[bytes] = []
    for n, tok in enumerate(ids, start=1):
        piece = "" if tok in STOP_IDS else enc.decode([tok])
        events.append(b"data: " + json.dumps({
            "index": 0, "content": piece, "tokens": [tok], "stop": False, "id_slot": -1,
            "tokens_predicted": n, "tokens_evaluated": prompt_tokens}).encode() + b"\n\n")
    final: dict[str, Any] = {
        "index": 0, "content": "", "tokens": [], "id_slot": 0, "stop": True,
        "model": "/models/scripted.gguf", "tokens_predicted": len(ids),
        "tokens_evaluated": prompt_tokens, "truncated": False, "stop_type": stop_type,
        "stopping_word": "", "tokens_cached": prompt_tokens + len(ids),
        "timings": {"cache_n": 0, "prompt_n": prompt_tokens, "predicted_n": len(ids)}}
    events.append(b"data: " + json.dumps(final).encode() + b"\n\n")
    if truncate_after is not None:
        events = events[:truncate_after]
    return events


class FakeLlamaCpp:
    """MockTransport handler streaming a scripted answer; records request bodies."""

    def __init__(self, script: str, **kwargs: Any) -> None:
        self.events = sse_events(script, **kwargs)
        self.requests: list[dict[str, Any]] = []
        self.closed = 0

    def _closed(self) -> None:
        self.closed += 1

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(json.loads(request.content))
        return httpx.Response(200, headers={"content-type": "text/event-stream"},
                              stream=RecordedBody(self.events, self._closed))

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self)
