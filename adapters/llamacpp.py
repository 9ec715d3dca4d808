"""llama.cpp ``llama-server`` adapter: native ``POST /completion`` with token ids.

The prompt goes upstream as a list of token ids, so nothing the user typed can be
re-tokenized into a control token.  We always stream upstream (``stream: true``,
``return_tokens: true``); a non-streaming API answer is the fold of the same
chunks.  Every SSE event carries ``tokens`` (ids) and ``content`` (their text);
the final ``stop: true`` event carries ``stop_type`` (``eos`` / ``limit`` /
``word``) and the token counts (see ``tests/fixtures/wire/llamacpp``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx

from adapters.base import Capabilities, any_healthy, post_sse
from adapters.routing import ReplicaPool, RetryPolicy, failover
from app.errors import InvalidRequest, UpstreamError
from app.model import Chunk, Finish, GenerationParams, Prompt, TokenLogprob, TopLogprob, Usage

_STOP_TYPES = {"eos": "eos", "limit": "length", "word": "stop_string"}


def _logprobs(items: Sequence[dict[str, Any]]) -> tuple[TokenLogprob, ...]:
    out: list[TokenLogprob] = []
    for item in items:
        top = tuple(
            TopLogprob(str(t.get("token", "")), float(t.get("logprob", 0.0)),
                       tuple(t["bytes"]) if t.get("bytes") is not None else None, t.get("id"))
            for t in item.get("top_logprobs", ())
        )
        out.append(TokenLogprob(str(item.get("token", "")), float(item.get("logprob", 0.0)),
                                tuple(item["bytes"]) if item.get("bytes") is not None else None,
                                item.get("id"), top))
    return tuple(out)


def event_to_chunk(event: dict[str, Any]) -> Chunk:
    """One ``/completion`` stream event → :class:`Chunk` (pure; unit-tested on recordings)."""
    if "error" in event:
        err = event["error"]
        msg = err.get("message", "unknown error") if isinstance(err, dict) else str(err)
        raise UpstreamError(f"llama.cpp reported an error mid-stream: {msg}")
    probs = event.get("completion_probabilities")
    chunk_finish: Finish | None = None
    usage: Usage | None = None
    if event.get("stop"):
        kind = _STOP_TYPES.get(str(event.get("stop_type", "")))
        if kind is not None:
            chunk_finish = Finish(kind, event.get("stopping_word") or None)  # type: ignore[arg-type]
        timings = event.get("timings") or {}
        usage = Usage(
            prompt_tokens=int(event.get("tokens_evaluated", 0)),
            completion_tokens=int(event.get("tokens_predicted", 0)),
            cached_tokens=int(timings.get("cache_n", 0)),
        )
    return Chunk(
        text=str(event.get("content", "")),
        token_ids=tuple(event.get("tokens") or ()),
        logprobs=_logprobs(probs) if probs else None,
        finish=chunk_finish,
        usage=usage,
    )


class LlamaCppBackend:
    kind = "llamacpp"
    capabilities = Capabilities(token_ids=True, logprobs=True, max_top_logprobs=20, n=False,
                                seed=True, json_schema=False, images=False)

    def __init__(self, client: httpx.AsyncClient, base_urls: Sequence[str],
                 policy: RetryPolicy | None = None) -> None:
        if not base_urls:
            raise ValueError("llama.cpp backend needs at least one base URL")
        self._client = client
        self.base_urls = [u.rstrip("/") for u in base_urls]
        self.pool = ReplicaPool(self.base_urls, policy or RetryPolicy())

    async def ready(self) -> bool:
        return await any_healthy(self._client, self.base_urls)

    def request_body(self, prompt: Prompt, params: GenerationParams) -> dict[str, Any]:
        if prompt.token_ids is None:
            raise InvalidRequest("The llama.cpp adapter sends token ids; this prompt has none.")
        body: dict[str, Any] = {
            "prompt": list(prompt.token_ids),
            "stream": True,
            "return_tokens": True,
            "cache_prompt": True,
            "n_predict": params.max_tokens if params.max_tokens is not None else -1,
        }
        if params.temperature is not None:
            body["temperature"] = params.temperature
        if params.top_p is not None:
            body["top_p"] = params.top_p
        if params.seed is not None:
            body["seed"] = params.seed
        if params.frequency_penalty is not None:
            body["frequency_penalty"] = params.frequency_penalty
        if params.presence_penalty is not None:
            body["presence_penalty"] = params.presence_penalty
        if prompt.stop_strings:
            body["stop"] = list(prompt.stop_strings)
        if params.logprobs:
            body["n_probs"] = max(params.top_logprobs, 1)
        return body

    async def stream(self, prompt: Prompt, params: GenerationParams) -> AsyncIterator[Chunk]:
        body = self.request_body(prompt, params)
        def open_stream(base: str) -> AsyncIterator[dict[str, Any]]:
            return post_sse(self._client, base, "/completion", body, "llama.cpp")

        async for event in failover(self.pool, open_stream):
            yield event_to_chunk(event)
