"""A llama.cpp fake for chat-template models: ``/tokenize`` plus a text ``/completion`` stream.

The tokenizer is character level with a few Gemma markers as special ids; like the real
server it can be told to match one marker even with ``parse_special: false`` (llama.cpp
does that for USER_DEFINED tokens), so the adapter's fallback is exercised.  Event
shapes follow tests/fixtures/wire/llamacpp.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.support.wire import RecordedBody

MARKERS = {"<bos>": 2, "<start_of_turn>": 105, "<end_of_turn>": 106}


def tokenize(text: str, special: bool, leaky: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    i = 0
    while i < len(text):
        for marker, tid in MARKERS.items():
            if text.startswith(marker, i) and (special or marker in leaky):
                out.append({"id": tid, "piece": marker})
                i += len(marker)
                break
        else:
            out.append({"id": 1000 + ord(text[i]), "piece": text[i]})
            i += 1
    return out


class FakeTemplateLlamaCpp:
    def __init__(self, answer: list[str], *, leaky: frozenset[str] = frozenset(),
                 stop_type: str = "eos", constrained: list[str] | None = None) -> None:
        """``constrained``: the answer to a request with a ``json_schema`` (what a grammar
        lets the model write), when it differs from ``answer``."""
        self.answer = answer
        self.constrained = constrained
        self.leaky = leaky
        self.stop_type = stop_type
        self.completions: list[dict[str, Any]] = []
        self.tokenize_calls: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path == "/props":
            # the recorded /props field the adapter reads for its vocabulary: a model file the
            # gateway cannot read, so the shape-based marker check is the one exercised
            return httpx.Response(200, json={"model_path": "/models/not-on-this-host.gguf"})
        body = json.loads(request.content)
        if request.url.path == "/tokenize":
            self.tokenize_calls.append(body)
            return httpx.Response(200, json={"tokens": tokenize(
                body["content"], bool(body.get("parse_special", True)), self.leaky)})
        self.completions.append(body)
        answer = self.constrained if self.constrained is not None and "json_schema" in body else self.answer
        offset = 100 * (len(self.completions) - 1)  # token ids differ per request
        events = [b"data: " + json.dumps(self._event(n, piece, int(body.get("n_probs", 0)), offset))
                  .encode() + b"\n\n" for n, piece in enumerate(answer)]
        events.append(b"data: " + json.dumps({
            "content": "", "tokens": [], "stop": True, "stop_type": self.stop_type,
            "tokens_predicted": len(answer), "tokens_evaluated": len(body["prompt"]),
            "timings": {"cache_n": 0}}).encode() + b"\n\n")
        return httpx.Response(200, headers={"content-type": "text/event-stream"},
                              stream=RecordedBody(events, lambda: None))

    @staticmethod
    def _event(n: int, piece: str, n_probs: int, offset: int = 0) -> dict[str, Any]:
        """One token's event; with ``n_probs``, its ``completion_probabilities`` in the shape of
        the recording ``llamacpp/03b_completion_tokenids_stream_n_probs2``."""
        event: dict[str, Any] = {"content": piece, "tokens": [3000 + offset + n], "stop": False}
        if n_probs:
            item = {"id": 3000 + offset + n, "token": piece, "bytes": list(piece.encode()),
                    "logprob": -0.25 * n}
            event["completion_probabilities"] = [{**item, "top_logprobs": [item][:n_probs]}]
        return event

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self)
