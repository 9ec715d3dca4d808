"""The OpenAI Chat Completions dialect as vLLM 0.32.0 serves it (``server: uvicorn``).

``POST /v1/chat/completions`` (stream and non-stream, ``stream_options.include_usage``),
``GET /v1/models``, ``GET /health``; the answers reproduce ``tests/fixtures/wire/vllm``.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

import orjson

from benchmarks.overhead.fake.dialect import (
    CREATED_HOLE,
    DATE_HOLE,
    ID_HOLE,
    Dialect,
    Reply,
    chunk,
    sse,
    status_line,
)
from benchmarks.overhead.fake.script import harmony_encoding

VLLM_FINGERPRINT = "vllm-0.32.0-1cc2ec27"


class VllmChat(Dialect):
    """vLLM's OpenAI server: ``/v1/chat/completions``, ``/v1/models``, ``/health``."""

    def _head(self, status: int, ctype: bytes | None, length: int | None) -> bytes:
        head = status_line(status) + b"date: " + DATE_HOLE + b"\r\nserver: uvicorn\r\n"
        if length is not None:
            head += b"content-length: %d\r\n" % length
        if ctype is not None:
            head += b"content-type: " + ctype + b"\r\n"
        head += b"vary: Origin\r\n"
        if length is None:
            head += b"transfer-encoding: chunked\r\n"
        return head

    def _json(self, status: int, obj: Any, delay: float = 0.0) -> Reply:
        data = orjson.dumps(obj)
        return Reply(status, self._head(status, b"application/json", len(data)), [data],
                     delay=delay, dynamic=True)

    def build(self, method: str, path: str, body: bytes) -> Reply:
        if path == "/health" and method == "GET":
            return Reply(200, self._head(200, None, 0), [b""], dynamic=True)
        if path == "/v1/models" and method == "GET":
            return self._json(200, self._models())
        if path == "/v1/chat/completions" and method == "POST":
            return self._chat(body)
        if path in ("/health", "/v1/models", "/v1/chat/completions"):
            return self._json(405, {"detail": "Method Not Allowed"})
        return self._json(404, {"detail": "Not Found"})

    def _models(self) -> dict[str, Any]:
        card = {"id": self.settings.chat_model, "object": "model", "created": CREATED_HOLE,
                "owned_by": "vllm", "root": "/models/hf-final", "parent": None,
                "max_model_len": self.settings.n_ctx,
                "permission": [{"id": "modelperm-" + secrets.token_hex(8), "object": "model_permission",
                                "created": CREATED_HOLE, "allow_create_engine": False,
                                "allow_sampling": True, "allow_logprobs": True,
                                "allow_search_indices": False, "allow_view": True,
                                "allow_fine_tuning": False, "organization": "*", "group": None,
                                "is_blocking": False}]}
        return {"object": "list", "data": [card]}

    def _error(self, message: str, param: str | None) -> Reply:
        return self._json(400, {"error": {"message": message, "type": "BadRequestError",
                                          "param": param, "code": 400}})

    def _generated(self, skip_special: bool) -> tuple[list[int], list[str]]:
        s = self.script
        if self.settings.chat_script == "harmony":
            ids = list(s.ids)
            texts = ["" if (sp and skip_special) or t == s.eos else txt
                     for t, txt, sp in zip(s.ids, s.texts, s.special, strict=True)]
            return ids, texts
        ids = [*s.answer_ids, s.eos]
        return ids, [*s.texts[3:3 + len(s.answer_ids)], ""]

    def _chat(self, body: bytes) -> Reply:
        try:
            req = orjson.loads(body)
        except orjson.JSONDecodeError:
            return self._error("malformed JSON body", "body")
        if not isinstance(req, dict) or not isinstance(req.get("messages"), list):
            return self._error("Field required: messages", "messages")
        if req.get("model") not in (None, self.settings.chat_model):
            return self._json(404, {"error": {
                "message": f"The model `{req.get('model')}` does not exist. Valid aliases: "
                           f"{self.settings.chat_model}.",
                "type": "NotFoundError", "param": "model", "code": 404}})
        enc = harmony_encoding()
        prompt_tokens = 2  # <|start|>assistant, as harmony-min.jinja renders the conversation
        for msg in req["messages"]:
            content = msg.get("content") if isinstance(msg, dict) else None
            text = content if isinstance(content, str) else json.dumps(content)
            prompt_tokens += 3 + len(enc.encode(str(msg.get("role", "user")), disallowed_special=())) \
                + len(enc.encode(text or "", disallowed_special=()))
        ids, texts = self._generated(bool(req.get("skip_special_tokens", True)))
        limit = req.get("max_completion_tokens") or req.get("max_tokens")
        n = len(ids) if not isinstance(limit, int) or limit <= 0 else min(limit, len(ids))
        finish = "stop" if n == len(ids) else "length"
        model = self.settings.chat_model
        usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + n, "completion_tokens": n}
        if not req.get("stream"):
            return self._json(200, {
                "id": ID_HOLE.decode(), "object": "chat.completion", "created": CREATED_HOLE,
                "model": model,
                "choices": [{"index": 0, "message": {
                    "role": "assistant", "content": "".join(texts[:n]), "refusal": None,
                    "annotations": None, "audio": None, "function_call": None, "reasoning": None},
                    "logprobs": None, "finish_reason": finish, "stop_reason": None, "token_ids": None,
                    "routed_experts": None}],
                "service_tier": None, "system_fingerprint": VLLM_FINGERPRINT,
                "usage": {**usage, "prompt_tokens_details": None, "completion_tokens_details": None},
                "prompt_logprobs": None, "prompt_token_ids": None, "prompt_text": None,
                "kv_transfer_params": None, "ec_transfer_params": None, "metrics": None},
                delay=self.settings.ttft + self.settings.gap * max(n - 1, 0))
        include_usage = bool((req.get("stream_options") or {}).get("include_usage"))
        top = {"id": ID_HOLE.decode(), "object": "chat.completion.chunk", "created": CREATED_HOLE,
               "model": model}
        pieces = [sse({**top, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                            "logprobs": None, "finish_reason": None}],
                        "prompt_token_ids": None, "prompt_text": None})]
        for i in range(n):
            choice: dict[str, Any] = {"index": 0, "delta": {"content": texts[i]}, "logprobs": None,
                                      "finish_reason": None, "token_ids": None}
            event: dict[str, Any] = {**top, "choices": [choice]}
            if i == n - 1:
                choice["finish_reason"] = finish
                choice["stop_reason"] = None
                choice["token_ids"] = choice.pop("token_ids")  # keep vLLM's key order
                if not include_usage:
                    event["system_fingerprint"] = VLLM_FINGERPRINT
            pieces.append(sse(event))
        if include_usage:
            pieces.append(sse({**top, "choices": [], "usage": usage,
                                "system_fingerprint": VLLM_FINGERPRINT}))
        pieces.append(chunk(b"data: [DONE]\n\n"))
        pieces.append(b"0\r\n\r\n")
        head = self._head(200, b"text/event-stream; charset=utf-8", None)
        return Reply(200, head, pieces, lead=1, paced=n, dynamic=True)
