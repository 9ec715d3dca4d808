"""A llama.cpp fake for text prompt formats (chat templates, OpenChatML) whose answer depends
on its prompt, with a tokenizer that knows the format's marker tokens.

* ``/tokenize``: one id per character (``1000 + code point``), except that with
  ``parse_special`` each of ``markers`` is one special id (``10 + its index``), as a real
  llama.cpp does for the template's own control tokens; without it a marker's text stays
  characters (what the gateway asks for client and document text).
* ``/completion``: the prompt ids decoded back to text (:attr:`prompts`, the ids in
  :attr:`ids`); the script is the first rule whose marker is in the prompt, else ``default``;
  it streams the script in pieces of a few characters, in llama.cpp's event shape.
* ``/props``: a model file the gateway cannot read (markers are then found by their shape).
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.support.wire import RecordedBody

FIRST_MARKER = 10


class MarkerLlamaCpp:
    def __init__(self, markers: tuple[str, ...], default: str, *rules: tuple[str, str]) -> None:
        self.markers = markers
        self.default, self.rules = default, rules
        self.prompts: list[str] = []
        self.ids: list[list[int]] = []

    def special_id(self, marker: str) -> int:
        return FIRST_MARKER + self.markers.index(marker)

    def _tokens(self, text: str, special: bool) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        i = 0
        while i < len(text):
            found = next((m for m in self.markers if special and text.startswith(m, i)), None)
            if found is not None:
                out.append({"id": self.special_id(found), "piece": found})
                i += len(found)
            else:
                out.append({"id": 1000 + ord(text[i]), "piece": text[i]})
                i += 1
        return out

    def decode(self, ids: list[int]) -> str:
        return "".join(self.markers[i - FIRST_MARKER] if i < 1000 else chr(i - 1000) for i in ids)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path == "/props":
            return httpx.Response(200, json={"model_path": "/models/not-on-this-host.gguf"})
        body = json.loads(request.content)
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"tokens": self._tokens(body["content"],
                                                                    bool(body.get("parse_special", True)))})
        ids = [int(i) for i in body["prompt"]]
        prompt = self.decode(ids)
        self.ids.append(ids)
        self.prompts.append(prompt)
        script = next((s for marker, s in self.rules if marker in prompt), self.default)
        pieces = [script[i:i + 7] for i in range(0, len(script), 7)]
        events = [b"data: " + json.dumps({"content": p, "tokens": [5000 + n], "stop": False}).encode()
                  + b"\n\n" for n, p in enumerate(pieces)]
        events.append(b"data: " + json.dumps({
            "content": "", "tokens": [], "stop": True, "stop_type": "eos", "tokens_predicted": len(pieces),
            "tokens_evaluated": len(ids), "timings": {"cache_n": 0}}).encode() + b"\n\n")
        return httpx.Response(200, headers={"content-type": "text/event-stream"},
                              stream=RecordedBody(events, lambda: None))

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self)
