"""What the overhead benchmark measures: the targets, their requests and baselines, and one
measured phase's numbers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

HARMONY_MODEL = "gpt-oss-bench"
CHAT_MODEL = "chat-bench"
UPSTREAM_CHAT_MODEL = "tiny"
MESSAGES = [{"role": "user", "content": "Say hello."}]
# fake upstream counters diffed per phase: TCP connections accepted, requests served, and answers
# built from scratch (a request body the fake had not seen: the gateway sent something new)
UPSTREAM_COUNTERS = ("connections", "requests", "built")


@dataclass(frozen=True)
class Target:
    """Where a request goes (``server``: ``gateway`` or one of the fake's dialects), what it
    asks, and which direct target is its baseline (the upstream request the gateway makes for it:
    same dialect, same number of generated tokens, so TTFT and gaps cancel out)."""

    name: str
    label: str
    server: str  # "gateway", "litellm" (the LiteLLM proxy), "openai" or "llamacpp"
    model: str
    stream: bool
    upstream: str  # the fake's dialect this target ends up at
    baseline: str | None = None
    # "chat": /v1/chat/completions; "responses": /v1/responses (store false); "messages": /v1/messages
    api: str = "chat"
    store: bool = False  # /v1/responses with store: true (the API's default)

    def body(self, prompt_ids: list[int]) -> bytes:
        """The request; ``prompt_ids``: the Harmony prompt as the gateway renders it (for the
        direct llama.cpp target)."""
        if self.server == "llamacpp":  # what the gateway's llama.cpp adapter sends
            return orjson.dumps({"prompt": prompt_ids, "stream": True, "return_tokens": True,
                                 "cache_prompt": True, "n_predict": -1})
        payload: dict[str, Any] = {"model": self.model, "messages": MESSAGES}
        if self.api == "responses":
            payload = {"model": self.model, "input": MESSAGES, "store": self.store}
        elif self.api == "messages":  # Anthropic's: max_tokens is required
            payload = {"model": self.model, "messages": MESSAGES, "max_tokens": 1024}
        if self.stream:
            payload["stream"] = True
        return orjson.dumps(payload)

    @property
    def path(self) -> str:
        if self.server == "llamacpp":
            return "/completion"
        return {"responses": "/v1/responses", "messages": "/v1/messages"}.get(self.api,
                                                                               "/v1/chat/completions")


HARMONY_PROMPT = f"<|start|>user<|message|>{MESSAGES[0]['content']}<|end|><|start|>assistant"


TARGETS = (
    Target("direct", "direct to fake: OpenAI chat, non-stream", "openai", UPSTREAM_CHAT_MODEL,
           False, "openai"),
    Target("direct_llamacpp", "direct to fake: llama.cpp /completion, stream", "llamacpp", "",
           True, "llamacpp"),
    Target("harmony", "gateway → llama.cpp, Harmony, non-stream", "gateway", HARMONY_MODEL, False,
           "llamacpp", "direct_llamacpp"),
    Target("harmony_stream", "gateway → llama.cpp, Harmony, stream", "gateway", HARMONY_MODEL, True,
           "llamacpp", "direct_llamacpp"),
    Target("passthrough", "gateway → OpenAI passthrough, non-stream", "gateway", CHAT_MODEL, False,
           "openai", "direct"),
)
# --stream-passthrough (and --litellm): an OpenAI chat stream, direct and through the gateway
STREAM_TARGETS = (
    Target("direct_stream", "direct to fake: OpenAI chat, stream", "openai", UPSTREAM_CHAT_MODEL,
           True, "openai"),
    Target("passthrough_stream", "gateway → OpenAI passthrough, stream", "gateway", CHAT_MODEL,
           True, "openai", "direct_stream"),
)
# --litellm: the same requests as the passthrough targets through the LiteLLM proxy
LITELLM_TARGETS = (
    Target("litellm", "LiteLLM proxy → OpenAI chat, non-stream", "litellm", CHAT_MODEL, False,
           "openai", "direct"),
    Target("litellm_stream", "LiteLLM proxy → OpenAI chat, stream", "litellm", CHAT_MODEL, True,
           "openai", "direct_stream"),
)
# --responses: the same Harmony answer through /v1/responses (the agentic loop's path, no tools)
RESPONSES_TARGETS = (
    Target("responses", "gateway → llama.cpp, /v1/responses, non-stream", "gateway", HARMONY_MODEL,
           False, "llamacpp", "direct_llamacpp", "responses"),
    Target("responses_stream", "gateway → llama.cpp, /v1/responses, stream", "gateway", HARMONY_MODEL,
           True, "llamacpp", "direct_llamacpp", "responses"),
)
# --responses-store: the same through /v1/responses with store: true (one stored response a request)
RESPONSES_STORE_TARGETS = (
    Target("responses_store", "gateway → llama.cpp, /v1/responses store, non-stream", "gateway",
           HARMONY_MODEL, False, "llamacpp", "direct_llamacpp", "responses", store=True),
    Target("responses_store_stream", "gateway → llama.cpp, /v1/responses store, stream", "gateway",
           HARMONY_MODEL, True, "llamacpp", "direct_llamacpp", "responses", store=True),
)
# --messages: the same Harmony answer through Anthropic's /v1/messages (the third front-end)
MESSAGES_TARGETS = (
    Target("messages", "gateway → llama.cpp, /v1/messages, non-stream", "gateway", HARMONY_MODEL,
           False, "llamacpp", "direct_llamacpp", "messages"),
    Target("messages_stream", "gateway → llama.cpp, /v1/messages, stream", "gateway", HARMONY_MODEL,
           True, "llamacpp", "direct_llamacpp", "messages"),
)
ALL_TARGETS = {t.name: t for t in (*TARGETS, *STREAM_TARGETS, *LITELLM_TARGETS, *RESPONSES_TARGETS,
                                   *RESPONSES_STORE_TARGETS, *MESSAGES_TARGETS)}
# gateway target -> the LiteLLM target sent the same request (compared side by side)
LITELLM_PAIRS = (("passthrough", "litellm"), ("passthrough_stream", "litellm_stream"))


def select_targets(stream_passthrough: bool, litellm: bool, responses: bool = False,
                   messages: bool = False, responses_store: bool = False) -> tuple[Target, ...]:
    """The measured targets: the default five, plus the streaming passthrough pair (implied by
    ``litellm``), plus the LiteLLM targets, plus the /v1/responses pairs (``store`` false, and
    true) and the /v1/messages pair."""
    return (*TARGETS, *(STREAM_TARGETS if stream_passthrough or litellm else ()),
            *(LITELLM_TARGETS if litellm else ()), *(RESPONSES_TARGETS if responses else ()),
            *(RESPONSES_STORE_TARGETS if responses_store else ()),
            *(MESSAGES_TARGETS if messages else ()))


@dataclass
class Phase:
    """One measurement of one target in one round."""

    target: str
    round: int
    kind: str  # "latency" (concurrency 1), "throughput" or "sweep" (--sweep: any concurrency)
    concurrency: int
    tree: str | None = None  # the gateway's source tree (None: a direct or LiteLLM target)
    ok: int = 0
    errors: int = 0
    first_error: str | None = None
    wall_s: float = 0.0
    rps: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    mean_ms: float = 0.0
    first_byte_p50_ms: float = 0.0
    cpu_us_per_req: dict[str, float] = field(default_factory=dict)
    upstream: dict[str, dict[str, int]] = field(default_factory=dict)

