"""A llama.cpp fake that can see: what ``llama-server --mmproj`` does with images.

Reproduces what llama.cpp's server source says (``tokenize_input_subprompt`` /
``process_mtmd_prompt``) and its ``GET /props`` recording (``01b_get_props.json``):

* ``/props`` reports ``modalities.vision`` and a random ``media_marker`` (a new one per
  "server start": :meth:`restart`).
* ``/tokenize`` with ``add_special: true`` puts the model's BOS in front.
* ``/completion`` takes ``"prompt": {"prompt_string": ..., "multimodal_data": [...]}``: the
  string is cut at the marker, each text piece tokenized with special-token parsing on,
  BOS in front; each image (base64, decoded) becomes :data:`IMAGE_TOKENS` tokens.  A marker
  count that differs from the images, or bytes that are not an image, is llama.cpp's 400.
  Without vision, a prompt object with ``multimodal_data`` is refused as the server does.
"""

from __future__ import annotations

import base64
import json
import secrets
from typing import Any

import httpx

from tests.support.fake_template_llamacpp import MARKERS, FakeTemplateLlamaCpp, tokenize

IMAGE_TOKENS = 16  # what one image costs in this fake (gemma3's real mmproj: 256)


class FakeVisionLlamaCpp(FakeTemplateLlamaCpp):
    def __init__(self, answer: list[str], *, vision: bool = True) -> None:
        super().__init__(answer)
        self.vision = vision
        self.props_calls = 0
        self.restart()

    def restart(self) -> None:
        self.marker = f"<__media_{secrets.token_hex(8)}__>"

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path == "/props":
            self.props_calls += 1
            return httpx.Response(200, json={
                "model_path": "/models/not-on-this-host.gguf",
                "modalities": {"vision": self.vision, "video": False, "audio": False},
                "media_marker": self.marker})
        body = json.loads(request.content)
        if request.url.path == "/tokenize":
            self.tokenize_calls.append(body)
            tokens = tokenize(body["content"], bool(body.get("parse_special", True)))
            if body.get("add_special"):
                tokens = [{"id": MARKERS["<bos>"], "piece": "<bos>"}, *tokens]
            return httpx.Response(200, json={"tokens": tokens})
        prompt = body.get("prompt")
        if not isinstance(prompt, dict):
            return super().__call__(request)
        error = self._check(prompt)
        if error is not None:
            self.completions.append(body)
            return httpx.Response(400, json={"error": {"code": 400, "message": error,
                                                       "type": "invalid_request_error"}})
        evaluated = self.evaluated(prompt)
        return super().__call__(httpx.Request("POST", request.url, json={
            **body, "prompt": [0] * evaluated, "__prompt": prompt}))

    def _check(self, prompt: dict[str, Any]) -> str | None:
        if not self.vision:
            return "Multimodal data provided, but model does not support multimodal requests."
        images = prompt.get("multimodal_data") or []
        if prompt["prompt_string"].count(self.marker) != len(images):
            return "number of bitmaps does not match number of markers"
        for item in images:
            if base64.b64decode(item)[:4] not in (b"\x89PNG", b"\xff\xd8\xff\xe0", b"GIF8"):
                return "Failed to load image or audio file"
        return None

    def evaluated(self, prompt: dict[str, Any]) -> int:
        """How many tokens the server evaluates for a prompt object."""
        texts = prompt["prompt_string"].split(self.marker)
        count = 1 + sum(len(tokenize(t, True)) for t in texts)  # BOS + text, specials parsed
        return count + IMAGE_TOKENS * len(prompt.get("multimodal_data") or [])

    def prompts(self) -> list[dict[str, Any]]:
        """The prompt objects the server was sent."""
        return [c.get("__prompt", c.get("prompt")) for c in self.completions]
