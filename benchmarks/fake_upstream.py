"""A fast fake LLM upstream (llama.cpp ``llama-server`` and vLLM's OpenAI server) in raw asyncio.

``python -m benchmarks.fake_upstream`` serves two dialects on two ports (plus a control port),
hand-written HTTP/1.1 over ``asyncio.start_server``: keep-alive, ``Content-Length`` bodies and
chunked SSE streams, one SSE event per HTTP chunk as the real servers send them. Every answer is
built once per distinct request body and cached, so a request costs a header parse, a dict look-up
and one ``write`` (well over 20,000 requests/s on one core: ``--selfbench`` measures it).

Which recordings it reproduces (``tests/fixtures/wire``, copies of ``/work/shared/wire``;
``--verify`` replays them against this server and diffs status, headers and bodies, ignoring only
ids, timestamps and ``timings`` values):

* **llama.cpp** (build b1-7e4c0a9, ``Server: llama.cpp``): ``POST /completion`` with token ids,
  streamed as in ``llamacpp/03a_completion_tokenids_stream.json`` -- one
  ``data: {"index","content","tokens","stop":false,"id_slot":-1,"tokens_predicted","tokens_evaluated"}``
  event per token, the eos (``<|return|>``) with ``content: ""``, then the final ``stop: true`` event
  with ``stop_type`` (``eos``, or ``limit`` when ``n_predict`` cuts the answer, ``04d``),
  ``generation_settings``, the detokenized ``prompt``, ``tokens_cached`` and ``timings``; no
  ``[DONE]``. Non-stream as in ``02``. ``GET /health`` (``01a``), ``GET /props`` (``01b``, with
  ``n_ctx`` set by ``--n-ctx``), ``POST /tokenize`` (``06a``, ``06c``). ``Keep-Alive: timeout=5,
  max=100`` is honoured like cpp-httplib does: the 100th request on a connection is answered with
  ``Connection: close`` (``--keepalive-max``), idle connections close after 5 s.
* **OpenAI Chat Completions** as vLLM 0.32.0 serves it (``server: uvicorn``):
  ``POST /v1/chat/completions`` non-stream (``vllm/07a_chat_nonstream.json``) and stream
  (``07b``; with ``stream_options.include_usage`` ``07c``: a last ``choices: []`` chunk with
  ``usage``), ``data: [DONE]`` at the end; ``GET /v1/models`` (``01a``), ``GET /health`` (``01b``).

The model: the generated tokens are Harmony token ids, ``<|channel|>final<|message|>`` + ``--tokens``
answer tokens + ``<|return|>``, produced once at startup with the gateway's own encoding
(``app.vocab.harmony_encoding()``). The answer text is "Hello from a scripted tiny model!"
repeated and cut to ``--tokens`` tokens (7 tokens = exactly the recorded model). The chat dialect
answers with the same answer tokens + eos (``--chat-script answer``: a plain chat model), or with
the whole Harmony script rendered as vLLM does with ``skip_special_tokens`` (``--chat-script
harmony``: the recorded model, used by ``--verify``). ``--ttft`` delays the first token,
``--gap`` separates tokens (0: the whole answer in one write).

On start it prints one JSON line with its base URLs; ``GET /stats`` on the control URL returns
counters per dialect (TCP connections accepted, open, requests per path) and the process CPU time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import email.utils
import json
import os
import random
import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
WIRE = ROOT / "tests" / "fixtures" / "wire"
ANSWER_TEXT = "Hello from a scripted tiny model!"
LLAMA_MODEL_PATH = "/models/final.gguf"
LLAMA_BUILD = "b1-7e4c0a9"
VLLM_FINGERPRINT = "vllm-0.32.0-1cc2ec27"
KEEPALIVE_TIMEOUT = 5.0  # cpp-httplib and uvicorn both close idle keep-alive connections after 5 s
CACHE_LIMIT = 1024

# ``generation_settings`` of the final event of llamacpp/03a (request fields are filled in per request).
GENERATION_SETTINGS: dict[str, Any] = {
    "seed": 4294967295, "temperature": 0.800000011920929, "dynatemp_range": 0.0,
    "dynatemp_exponent": 1.0, "top_k": 40, "top_p": 0.949999988079071, "min_p": 0.05000000074505806,
    "top_n_sigma": -1.0, "xtc_probability": 0.0, "xtc_threshold": 0.10000000149011612,
    "typical_p": 1.0, "repeat_last_n": 64, "repeat_penalty": 1.0, "presence_penalty": 0.0,
    "frequency_penalty": 0.0, "dry_multiplier": 0.0, "dry_base": 1.75, "dry_allowed_length": 2,
    "dry_penalty_last_n": 64, "dry_sequence_breakers": ["\n", ":", '"', "*"], "mirostat": 0,
    "mirostat_tau": 5.0, "mirostat_eta": 0.10000000149011612, "adaptive_target": -1.0,
    "adaptive_decay": 0.8999999761581421, "stop": [], "max_tokens": -1, "n_predict": -1, "n_keep": 0,
    "n_discard": 0, "ignore_eos": False, "stream": False, "logit_bias": [], "n_probs": 0,
    "min_keep": 0, "grammar": "", "grammar_lazy": False, "grammar_triggers": [],
    "preserved_tokens": [], "chat_format": "Content-only", "reasoning_format": "deepseek",
    "reasoning_in_content": False, "generation_prompt": "",
    "samplers": ["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc",
                 "temperature"],
    "speculative.types": "none", "timings_per_token": False, "post_sampling_probs": False,
    "backend_sampling": False, "lora": [],
}
# Request fields llama.cpp echoes into ``generation_settings`` (request name -> settings names).
ECHOED = {"seed": ("seed",), "temperature": ("temperature",), "top_p": ("top_p",),
          "top_k": ("top_k",), "min_p": ("min_p",), "presence_penalty": ("presence_penalty",),
          "frequency_penalty": ("frequency_penalty",), "stop": ("stop",),
          "n_predict": ("max_tokens", "n_predict"), "ignore_eos": ("ignore_eos",),
          "stream": ("stream",), "n_probs": ("n_probs",)}
# Keys of ``generation_settings`` that ``/props`` leaves out of ``default_generation_settings.params``.
NOT_IN_PROPS = {"dry_sequence_breakers", "stop", "logit_bias", "grammar", "grammar_lazy",
                "grammar_triggers", "preserved_tokens"}
HARMONY_MIN_TEMPLATE = (
    "{%- for m in messages -%}\n{%- if m.role == 'assistant' -%}<|start|>assistant<|channel|>final"
    "<|message|>{{ m.content }}<|end|>\n{%- else -%}<|start|>{{ m.role }}<|message|>{{ m.content }}"
    "<|end|>{%- endif -%}\n{%- endfor -%}\n{%- if add_generation_prompt -%}<|start|>assistant"
    "{%- endif -%}")
CHAT_TEMPLATE_CAPS = {
    "supports_object_arguments": False, "supports_parallel_tool_calls": False,
    "supports_preserve_reasoning": False, "supports_reasoning_effort": False,
    "supports_string_content": True, "supports_system_role": True, "supports_tool_calls": False,
    "supports_tools": False, "supports_typed_content": False}

# Same-length placeholders, replaced per request (chunk sizes stay valid).
ID_HOLE = b"chatcmpl-" + b"@" * 16
CREATED_HOLE = 1000000007
CREATED_BYTES = b'"created":1000000007'
DATE_HOLE = b"@" * 29  # "Sun, 22 Nov 2026 10:58:53 GMT"

LLAMA_SSE_HEADERS = (b"Server: llama.cpp\r\nAccess-Control-Allow-Origin: \r\nX-Accel-Buffering: no\r\n"
                     b"Content-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n")
LLAMA_JSON_HEADERS = (b"Server: llama.cpp\r\nAccess-Control-Allow-Origin: \r\n"
                      b"Content-Type: application/json; charset=utf-8\r\n")
LLAMA_KEEPALIVE = b"Keep-Alive: timeout=5, max=%d\r\n"
CLOSE = b"Connection: close\r\n"


@dataclass(frozen=True)
class Script:
    """What the fake model generates (token ids and each token's text)."""

    ids: tuple[int, ...]  # <|channel|>final<|message|> + answer + <|return|>
    texts: tuple[str, ...]  # llama.cpp ``content`` per token: markers as text, the eos as ""
    special: tuple[bool, ...]
    answer_ids: tuple[int, ...]
    answer: str
    eos: int

    @classmethod
    def build(cls, n_tokens: int, text: str = ANSWER_TEXT) -> Script:
        from app.vocab import harmony_encoding

        enc = harmony_encoding()
        header = enc.encode("<|channel|>final<|message|>", allowed_special="all")
        eos = enc.encode("<|return|>", allowed_special="all")[0]
        source = text
        answer = enc.encode(source, disallowed_special=())
        while len(answer) < n_tokens:
            source += " " + text
            answer = enc.encode(source, disallowed_special=())
        answer = answer[:n_tokens]
        ids = (*header, *answer, eos)
        texts = tuple("" if t == eos else enc.decode([t]) for t in ids)
        return cls(ids, texts, tuple(enc.is_special_token(t) for t in ids), tuple(answer),
                   enc.decode(answer), eos)


@dataclass(frozen=True)
class Settings:
    tokens: int = 7
    ttft: float = 0.0
    gap: float = 0.0
    n_ctx: int = 8192
    chat_model: str = "tiny"
    chat_script: str = "answer"  # or "harmony"
    keepalive_max: int = 100  # llama.cpp: requests per connection (0: unlimited)


@dataclass
class Reply:
    """A prepared response: ``head`` (status line and headers, without the blank line) and the
    framed body pieces; ``lead`` pieces go out with the first token, ``paced`` pieces are
    tokens (``gap`` apart), the rest go out with the last token."""

    status: int
    head: bytes
    pieces: list[bytes]
    lead: int = 0
    paced: int = 0
    delay: float = 0.0  # a non-stream answer: seconds until it is complete (TTFT + gaps)
    dynamic: bool = False  # contains ID_HOLE / CREATED_HOLE / DATE_HOLE
    close: bool = False  # the server closes the connection after it (errors)
    whole: bytes = b""

    def __post_init__(self) -> None:
        self.whole = b"".join(self.pieces)


@dataclass
class Stats:
    connections: int = 0
    open: int = 0
    max_open: int = 0
    requests: int = 0
    paths: dict[bytes, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"connections": self.connections, "open": self.open, "max_open": self.max_open,
                "requests": self.requests,
                "paths": {k.decode("latin-1"): v for k, v in self.paths.items()}}


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _sse(obj: Any) -> bytes:
    return _chunk(b"data: " + orjson.dumps(obj) + b"\n\n")


def _status_line(status: int) -> bytes:
    reason = {200: b"OK", 400: b"Bad Request", 404: b"Not Found", 405: b"Method Not Allowed",
              500: b"Internal Server Error"}.get(status, b"Unknown")
    return b"HTTP/1.1 %d %s\r\n" % (status, reason)


class Dialect:
    """One server personality: routes a request to a (cached) :class:`Reply`."""

    name = ""

    def __init__(self, script: Script, settings: Settings) -> None:
        self.script = script
        self.settings = settings
        self.stats = Stats()
        self._cache: dict[tuple[bytes, bytes, bytes], Reply] = {}

    def reply(self, method: bytes, path: bytes, body: bytes) -> Reply:
        key = (method, path, body)
        cached = self._cache.get(key)
        if cached is None:
            cached = self.build(method.decode(), path.decode("latin-1"), body)
            if len(self._cache) >= CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = cached
        return cached

    def build(self, method: str, path: str, body: bytes) -> Reply:
        raise NotImplementedError

    def keep_alive_line(self) -> bytes:
        """The header a kept-alive response carries (replaced by ``Connection: close``)."""
        return b""


class LlamaCpp(Dialect):
    """llama.cpp ``llama-server``: ``/completion`` (token ids), ``/health``, ``/props``, ``/tokenize``."""

    name = "llamacpp"

    def keep_alive_line(self) -> bytes:
        return LLAMA_KEEPALIVE % 100

    def _json(self, status: int, obj: Any, delay: float = 0.0) -> Reply:
        data = orjson.dumps(obj)
        close = status >= 400  # llama.cpp closes the connection after an error
        head = (_status_line(status) + LLAMA_JSON_HEADERS + b"Content-Length: %d\r\n" % len(data)
                + (CLOSE if close else self.keep_alive_line()))
        return Reply(status, head, [data], delay=delay, close=close)

    def _error(self, status: int, message: str, kind: str) -> Reply:
        return self._json(status, {"error": {"code": status, "message": message, "type": kind}})

    def build(self, method: str, path: str, body: bytes) -> Reply:
        if method == "GET" and path == "/health":
            return self._json(200, {"status": "ok"})
        if method == "GET" and path == "/props":
            return self._json(200, self._props())
        if method == "POST" and path in ("/completion", "/completions"):
            return self._completion(body)
        if method == "POST" and path == "/tokenize":
            return self._tokenize(body)
        return self._error(404, "File Not Found", "not_found_error")

    def _props(self) -> dict[str, Any]:
        params = {k: v for k, v in GENERATION_SETTINGS.items() if k not in NOT_IN_PROPS}
        params["reasoning_format"] = "none"
        return {
            "default_generation_settings": {"params": params, "n_ctx": self.settings.n_ctx},
            "total_slots": 1, "model_alias": LLAMA_MODEL_PATH, "model_ftype": "F16",
            "model_path": LLAMA_MODEL_PATH,
            "modalities": {"vision": False, "video": False, "audio": False},
            "media_marker": "<__media_WF0xRPkdzJCtMXQUVKFcEtEsE4qU3VKu__>", "endpoint_slots": True,
            "endpoint_props": False, "endpoint_metrics": False, "ui": True, "ui_settings": {},
            "chat_template": HARMONY_MIN_TEMPLATE, "chat_template_caps": CHAT_TEMPLATE_CAPS,
            "bos_token": "<|startoftext|>", "eos_token": "<|return|>", "build_info": LLAMA_BUILD,
            "is_sleeping": False, "cors_proxy_enabled": False,
        }

    def _tokenize(self, body: bytes) -> Reply:
        from app.vocab import harmony_encoding

        try:
            req = orjson.loads(body)
            text = req["content"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return self._error(500, "invalid request", "server_error")
        enc = harmony_encoding()
        ids = (enc.encode(text, allowed_special="all") if req.get("parse_special", True)
               else enc.encode(text, disallowed_special=()))
        if req.get("with_pieces"):
            return self._json(200, {"tokens": [{"id": t, "piece": enc.decode([t])} for t in ids]})
        return self._json(200, {"tokens": ids})

    def _completion(self, body: bytes) -> Reply:
        from app.vocab import harmony_encoding

        try:
            req = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            return self._error(500, f"[json.exception.parse_error] {exc}", "server_error")
        prompt = req.get("prompt") if isinstance(req, dict) else None
        if prompt is None:
            return self._error(400, '"prompt" must be provided', "invalid_request_error")
        enc = harmony_encoding()
        if isinstance(prompt, str):
            prompt_ids = enc.encode(prompt, allowed_special="all")
        else:
            prompt_ids = [int(t) for t in prompt]
        try:
            prompt_text = enc.decode(prompt_ids)
        except Exception:  # an id outside the vocabulary: llama.cpp would have failed earlier
            prompt_text = ""
        n_predict = req.get("n_predict", -1)
        script = self.script
        n = len(script.ids) if not isinstance(n_predict, int) or n_predict < 0 \
            else min(n_predict, len(script.ids))
        stop_type = "eos" if n == len(script.ids) else "limit"
        settings = dict(GENERATION_SETTINGS)
        for name, targets in ECHOED.items():
            if name in req:
                for target in targets:
                    settings[target] = req[name]
        n_eval = len(prompt_ids)
        s = self.settings
        timings = {"cache_n": max(n_eval - 1, 0), "prompt_n": min(n_eval, 1),
                   "prompt_ms": s.ttft * 1000, "prompt_per_token_ms": s.ttft * 1000,
                   "prompt_per_second": 1 / s.ttft if s.ttft else 1e6, "predicted_n": n,
                   "predicted_ms": s.gap * 1000 * n, "predicted_per_token_ms": s.gap * 1000,
                   "predicted_per_second": 1 / s.gap if s.gap else 1e6}
        tail = {"model": LLAMA_MODEL_PATH, "tokens_predicted": n, "tokens_evaluated": n_eval,
                "generation_settings": settings, "prompt": prompt_text, "has_new_line": False,
                "truncated": False, "stop_type": stop_type, "stopping_word": "",
                "tokens_cached": n_eval + n - 1, "timings": timings}
        if not req.get("stream"):
            final = {"index": 0, "content": "".join(script.texts[:n]), "tokens": list(script.ids[:n]),
                     "id_slot": 0, "stop": True, **tail}
            return self._json(200, final, delay=s.ttft + s.gap * max(n - 1, 0))
        pieces = [_sse({"index": 0, "content": script.texts[i], "tokens": [script.ids[i]],
                        "stop": False, "id_slot": -1, "tokens_predicted": i + 1,
                        "tokens_evaluated": n_eval}) for i in range(n)]
        pieces.append(_sse({"index": 0, "content": "", "tokens": [], "id_slot": 0, "stop": True,
                            **tail}))
        pieces.append(b"0\r\n\r\n")
        head = _status_line(200) + LLAMA_SSE_HEADERS + self.keep_alive_line()
        return Reply(200, head, pieces, lead=0, paced=n)


class VllmChat(Dialect):
    """vLLM's OpenAI server: ``/v1/chat/completions``, ``/v1/models``, ``/health``."""

    name = "openai"

    def _head(self, status: int, ctype: bytes | None, length: int | None) -> bytes:
        head = _status_line(status) + b"date: " + DATE_HOLE + b"\r\nserver: uvicorn\r\n"
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
        from app.vocab import harmony_encoding

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
        pieces = [_sse({**top, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
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
            pieces.append(_sse(event))
        if include_usage:
            pieces.append(_sse({**top, "choices": [], "usage": usage,
                                "system_fingerprint": VLLM_FINGERPRINT}))
        pieces.append(_chunk(b"data: [DONE]\n\n"))
        pieces.append(b"0\r\n\r\n")
        head = self._head(200, b"text/event-stream; charset=utf-8", None)
        return Reply(200, head, pieces, lead=1, paced=n, dynamic=True)


class Clock:
    """The ``date`` header and ``created`` value, formatted once per second."""

    def __init__(self) -> None:
        self._second = -1
        self.date = b""
        self.created = b""

    def tick(self) -> None:
        now = int(time.time())
        if now != self._second:
            self._second = now
            self.date = email.utils.formatdate(now, usegmt=True).encode()
            self.created = b'"created":%d' % now


class FakeUpstream:
    """Both dialects plus the control server, on one event loop."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.script = Script.build(settings.tokens)
        self.llamacpp = LlamaCpp(self.script, settings)
        self.openai = VllmChat(self.script, settings)
        self.clock = Clock()
        self.servers: list[asyncio.Server] = []
        self.urls: dict[str, str] = {}
        self._idle: dict[asyncio.StreamWriter, float | None] = {}
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self, host: str = "127.0.0.1", llamacpp_port: int = 0, openai_port: int = 0,
                    control_port: int = 0) -> dict[str, str]:
        for name, handler, port in (
                ("llamacpp", self._serve_factory(self.llamacpp), llamacpp_port),
                ("openai", self._serve_factory(self.openai), openai_port),
                ("control", self._control, control_port)):
            server = await asyncio.start_server(handler, host, port, backlog=4096)
            self.servers.append(server)
            self.urls[name] = f"http://{host}:{server.sockets[0].getsockname()[1]}"
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep())
        return self.urls

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        for server in self.servers:
            server.close()
        for server in self.servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 1)

    def stats(self) -> dict[str, Any]:
        cpu = os.times()
        return {"llamacpp": self.llamacpp.stats.as_dict(), "openai": self.openai.stats.as_dict(),
                "cpu_s": cpu.user + cpu.system, "pid": os.getpid()}

    def _serve_factory(self, dialect: Dialect) -> Callable[
            [asyncio.StreamReader, asyncio.StreamWriter], Any]:
        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._connection(dialect, reader, writer)
        return handler

    async def _connection(self, dialect: Dialect, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        stats = dialect.stats
        stats.connections += 1
        stats.open += 1
        stats.max_open = max(stats.max_open, stats.open)
        served = 0
        idle = self._idle
        limit = self.settings.keepalive_max if isinstance(dialect, LlamaCpp) else 0
        try:
            while True:
                idle[writer] = time.monotonic()
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                    return
                idle[writer] = None
                method, path, length, client_close = _parse_head(head)
                body = await reader.readexactly(length) if length else b""
                served += 1
                stats.requests += 1
                stats.paths[path] = stats.paths.get(path, 0) + 1
                reply = dialect.reply(method, path, body)
                close = client_close or reply.close or (limit > 0 and served >= limit)
                await self._send(dialect, writer, reply, close)
                if close:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            stats.open -= 1
            idle.pop(writer, None)
            writer.close()

    async def _sweep(self) -> None:
        """Close connections idle for ``KEEPALIVE_TIMEOUT`` (a timer per request costs more)."""
        while True:
            await asyncio.sleep(1.0)
            cutoff = time.monotonic() - KEEPALIVE_TIMEOUT
            for writer, since in list(self._idle.items()):
                if since is not None and since < cutoff:
                    writer.transport.abort()

    async def _send(self, dialect: Dialect, writer: asyncio.StreamWriter, reply: Reply,
                    close: bool) -> None:
        head = reply.head
        if close and not reply.close:
            keep = dialect.keep_alive_line()
            head = head.replace(keep, CLOSE) if keep else head + b"connection: close\r\n"
        head += b"\r\n"
        s = self.settings
        if reply.dynamic:
            self.clock.tick()
            rid = b"chatcmpl-%016x" % random.getrandbits(64)

            def fill(data: bytes) -> bytes:
                return data.replace(ID_HOLE, rid).replace(CREATED_BYTES, self.clock.created)
            head = head.replace(DATE_HOLE, self.clock.date)
        else:
            def fill(data: bytes) -> bytes:
                return data
        if reply.paced == 0 or (s.ttft == 0 and s.gap == 0):
            if reply.delay:
                await asyncio.sleep(reply.delay)
            writer.write(head + fill(reply.whole))
            await writer.drain()
            return
        pieces = reply.pieces
        first = reply.lead + 1
        last = reply.lead + reply.paced
        if s.ttft:
            await asyncio.sleep(s.ttft)
        writer.write(head + fill(b"".join(pieces[:first] if first < last else pieces)))
        await writer.drain()
        if first >= last:
            return
        for i in range(first, last - 1):
            if s.gap:
                await asyncio.sleep(s.gap)
            writer.write(fill(pieces[i]))
            await writer.drain()
        if s.gap:
            await asyncio.sleep(s.gap)
        writer.write(fill(b"".join(pieces[last - 1:])))
        await writer.drain()

    async def _control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                _, _, length, close = _parse_head(head)
                if length:
                    await reader.readexactly(length)
                data = orjson.dumps(self.stats())
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                             b"content-length: %d\r\n\r\n%s" % (len(data), data))
                await writer.drain()
                if close:
                    return
        except ConnectionError:
            pass
        finally:
            writer.close()


def _parse_head(head: bytes) -> tuple[bytes, bytes, int, bool]:
    """Request line and the two headers that matter: (method, path, content-length, close)."""
    end = head.index(b"\r\n")
    method, target, version = head[:end].split(b" ", 2)
    lower = head[end:].lower().replace(b": ", b":")
    length = 0
    at = lower.find(b"\r\ncontent-length:")
    if at >= 0:
        length = int(lower[at + 17:lower.index(b"\r\n", at + 17)])
    if version == b"HTTP/1.0":
        close = b"\r\nconnection:keep-alive" not in lower
    else:
        close = b"\r\nconnection:close" in lower
    return method, target.split(b"?", 1)[0], length, close


# ---------------------------------------------------------------------------------------------
# --verify: replay the recordings against this server


VERIFY_CASES = [
    "llamacpp/01a_get_health.json", "llamacpp/01b_get_props.json",
    "llamacpp/02_completion_tokenids_nonstream.json", "llamacpp/03a_completion_tokenids_stream.json",
    "llamacpp/04c_completion_tokenids_nonstream_n_predict3.json",
    "llamacpp/04d_completion_tokenids_stream_n_predict3.json",
    "llamacpp/06a_tokenize_parse_special_true.json",
    "llamacpp/06c_tokenize_parse_special_true_with_pieces.json",
    "vllm/01a_get_v1_models.json", "vllm/01b_get_health.json", "vllm/07a_chat_nonstream.json",
    "vllm/07b_chat_stream.json", "vllm/07c_chat_stream_usage_no_skip_special.json",
]
VOLATILE = {"id", "created", "date", "content-length"}


def _normalize(value: Any) -> Any:
    """Mask what differs between two runs of the same server (ids, clocks, timing values)."""
    if isinstance(value, dict):
        return {k: ("<volatile>" if k in VOLATILE else sorted(v) if k == "timings" and isinstance(v, dict)
                    else _normalize(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalize(v) for v in value]
    return value


def _body_events(text: str, sse: bool) -> list[Any]:
    if not sse:
        try:
            return [_normalize(json.loads(text))] if text else []
        except json.JSONDecodeError:
            return [text]
    out: list[Any] = []
    for block in text.split("\n\n"):
        if block.startswith("data: "):
            data = block[6:]
            out.append(data if data == "[DONE]" else _normalize(json.loads(data)))
    return out


async def verify(wire: Path = WIRE) -> int:
    """Replay ``VERIFY_CASES``; print one line per case; the number of mismatches."""
    import httpx

    upstream = FakeUpstream(Settings(tokens=7, n_ctx=2048, chat_script="harmony"))
    urls = await upstream.start()
    failures = 0
    try:
        async with httpx.AsyncClient() as client:
            for case in VERIFY_CASES:
                rec = json.loads((wire / case).read_text())
                base = urls["llamacpp" if case.startswith("llamacpp") else "openai"]
                req = rec["request"]
                headers = {"content-type": "application/json"} if req["body_text"] is not None else {}
                response = await client.request(req["method"], base + req["path"], headers=headers,
                                                content=(req["body_text"] or "").encode() or None)
                want = rec["response"]
                sse = "text/event-stream" in response.headers.get("content-type", "")
                got_headers = [(k.decode(), "<volatile>" if k.lower().decode() in VOLATILE else v.decode())
                               for k, v in response.headers.raw]
                want_headers = [(k, "<volatile>" if k.lower() in VOLATILE else v)
                                for k, v in want["headers"]]
                problems = []
                if response.status_code != want["status"]:
                    problems.append(f"status {response.status_code} != {want['status']}")
                if got_headers != want_headers:
                    problems.append(f"headers {got_headers} != {want_headers}")
                got = _body_events(response.text, sse)
                expected = _body_events(rec["derived"]["body_text"], sse)
                if json.dumps(got) != json.dumps(expected):  # key order counts too
                    for i, (g, e) in enumerate(zip(got, expected, strict=False)):
                        if json.dumps(g) != json.dumps(e):
                            problems.append(f"event {i}: {json.dumps(g)[:400]} != {json.dumps(e)[:400]}")
                            break
                    if len(got) != len(expected):
                        problems.append(f"{len(got)} events != {len(expected)}")
                failures += bool(problems)
                print(f"{'ok  ' if not problems else 'DIFF'} {case}" + "".join(f"\n     {p}" for p in problems))
    finally:
        await upstream.close()
    return failures


# ---------------------------------------------------------------------------------------------
# --selfbench: how many requests per second this server sustains


async def _raw_client(port: int, request: bytes, chunked: bool, deadline: float, counts: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.perf_counter() < deadline:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            if chunked:
                await reader.readuntil(b"\r\n0\r\n\r\n")
            else:
                length = int(head.lower().split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0])
                await reader.readexactly(length)
            if b"connection: close" in head.lower():
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            counts[0] += 1
    finally:
        writer.close()


async def selfbench(seconds: float, connections: int = 32) -> None:
    """Start this server in a child process and load it from here (raw keep-alive client)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "benchmarks.fake_upstream", "--tokens", "32", cwd=ROOT,
        stdout=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    urls = json.loads(await proc.stdout.readline())

    def port(name: str) -> int:
        return int(urls[name].rsplit(":", 1)[1])

    async def stats() -> dict[str, Any]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port("control"))
        writer.write(b"GET /stats HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        data = await reader.read()
        writer.close()
        return dict(json.loads(data.split(b"\r\n\r\n", 1)[1]))

    prompt = list(range(1000, 1060))
    cases = [
        ("llamacpp POST /completion stream (32 tokens)", port("llamacpp"), b"/completion",
         orjson.dumps({"prompt": prompt, "stream": True, "return_tokens": True, "n_predict": -1}), True),
        ("openai POST /v1/chat/completions non-stream", port("openai"), b"/v1/chat/completions",
         orjson.dumps({"model": "tiny", "messages": [{"role": "user", "content": "Say hello."}]}), False),
        ("openai POST /v1/chat/completions stream", port("openai"), b"/v1/chat/completions",
         orjson.dumps({"model": "tiny", "stream": True, "stream_options": {"include_usage": True},
                       "messages": [{"role": "user", "content": "Say hello."}]}), True),
    ]
    try:
        for label, p, path, body, chunked in cases:
            request = (b"POST %s HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                       b"content-length: %d\r\n\r\n%s" % (path, len(body), body))
            before = await stats()
            counts = [0]
            t0 = time.perf_counter()
            await asyncio.gather(*(_raw_client(p, request, chunked, t0 + seconds, counts)
                                   for _ in range(connections)))
            wall = time.perf_counter() - t0
            after = await stats()
            cpu = after["cpu_s"] - before["cpu_s"]
            print(f"{label}: {counts[0] / wall:,.0f} req/s with {connections} connections "
                  f"(client-bound on a shared machine); server CPU {cpu / counts[0] * 1e6:.1f} µs/req "
                  f"-> capacity ~{counts[0] / cpu:,.0f} req/s per core")
    finally:
        proc.terminate()
        await proc.wait()


# ---------------------------------------------------------------------------------------------


async def serve(args: argparse.Namespace) -> None:
    settings = Settings(tokens=args.tokens, ttft=args.ttft, gap=args.gap, n_ctx=args.n_ctx,
                        chat_model=args.chat_model, chat_script=args.chat_script,
                        keepalive_max=args.keepalive_max)
    upstream = FakeUpstream(settings)
    urls = await upstream.start(args.host, args.llamacpp_port, args.openai_port, args.control_port)
    print(json.dumps({**urls, "answer": upstream.script.answer,
                      "answer_tokens": len(upstream.script.answer_ids)}), flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await upstream.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fake_upstream",
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--llamacpp-port", type=int, default=0)
    parser.add_argument("--openai-port", type=int, default=0)
    parser.add_argument("--control-port", type=int, default=0)
    parser.add_argument("--tokens", type=int, default=7, help="answer tokens (7: the recorded model)")
    parser.add_argument("--ttft", type=float, default=0.0, help="seconds before the first token")
    parser.add_argument("--gap", type=float, default=0.0, help="seconds between tokens (0: one write)")
    parser.add_argument("--n-ctx", type=int, default=8192, help="context reported by /props, /v1/models")
    parser.add_argument("--chat-model", default="tiny", help="the chat dialect's model name")
    parser.add_argument("--chat-script", choices=["answer", "harmony"], default="answer")
    parser.add_argument("--keepalive-max", type=int, default=100,
                        help="llama.cpp requests per connection before Connection: close (0: no limit)")
    parser.add_argument("--verify", action="store_true", help="replay the recordings and diff")
    parser.add_argument("--selfbench", type=float, metavar="SECONDS",
                        help="measure this server's request rate (per case)")
    args = parser.parse_args(argv)
    if args.verify:
        return 1 if asyncio.run(verify()) else 0
    if args.selfbench:
        asyncio.run(selfbench(args.selfbench))
        return 0
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
