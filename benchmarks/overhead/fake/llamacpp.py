"""The llama.cpp ``llama-server`` dialect, as build b1-7e4c0a9 answers (``Server: llama.cpp``).

``POST /completion`` with token ids (stream and non-stream), ``GET /health``, ``GET /props``,
``POST /tokenize``; the answers reproduce ``tests/fixtures/wire/llamacpp`` (see the package
docstring and ``--verify``).
"""

from __future__ import annotations

from typing import Any

import orjson

from benchmarks.overhead.fake.dialect import CLOSE, Dialect, Reply, sse, status_line
from benchmarks.overhead.fake.script import harmony_encoding

LLAMA_MODEL_PATH = "/models/final.gguf"
LLAMA_BUILD = "b1-7e4c0a9"

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


LLAMA_SSE_HEADERS = (b"Server: llama.cpp\r\nAccess-Control-Allow-Origin: \r\nX-Accel-Buffering: no\r\n"
                     b"Content-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n")
LLAMA_JSON_HEADERS = (b"Server: llama.cpp\r\nAccess-Control-Allow-Origin: \r\n"
                      b"Content-Type: application/json; charset=utf-8\r\n")
LLAMA_KEEPALIVE = b"Keep-Alive: timeout=5, max=%d\r\n"


class LlamaCpp(Dialect):
    """llama.cpp ``llama-server``: ``/completion`` (token ids), ``/health``, ``/props``, ``/tokenize``."""

    def keep_alive_line(self) -> bytes:
        return LLAMA_KEEPALIVE % (self.settings.keepalive_max or 100)

    def _json(self, status: int, obj: Any, delay: float = 0.0) -> Reply:
        data = orjson.dumps(obj)
        close = status >= 400  # llama.cpp closes the connection after an error
        head = (status_line(status) + LLAMA_JSON_HEADERS + b"Content-Length: %d\r\n" % len(data)
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
            "total_slots": self.settings.slots, "model_alias": LLAMA_MODEL_PATH, "model_ftype": "F16",
            "model_path": LLAMA_MODEL_PATH,
            "modalities": {"vision": False, "video": False, "audio": False},
            "media_marker": "<__media_WF0xRPkdzJCtMXQUVKFcEtEsE4qU3VKu__>", "endpoint_slots": True,
            "endpoint_props": False, "endpoint_metrics": False, "ui": True, "ui_settings": {},
            "chat_template": HARMONY_MIN_TEMPLATE, "chat_template_caps": CHAT_TEMPLATE_CAPS,
            "bos_token": "<|startoftext|>", "eos_token": "<|return|>", "build_info": LLAMA_BUILD,
            "is_sleeping": False, "cors_proxy_enabled": False,
        }

    def _tokenize(self, body: bytes) -> Reply:
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
        pieces = [sse({"index": 0, "content": script.texts[i], "tokens": [script.ids[i]],
                        "stop": False, "id_slot": -1, "tokens_predicted": i + 1,
                        "tokens_evaluated": n_eval}) for i in range(n)]
        pieces.append(sse({"index": 0, "content": "", "tokens": [], "id_slot": 0, "stop": True,
                            **tail}))
        pieces.append(b"0\r\n\r\n")
        head = status_line(200) + LLAMA_SSE_HEADERS + self.keep_alive_line()
        return Reply(200, head, pieces, lead=0, paced=n)
