"""vLLM adapter: ``POST /v1/completions`` with a token-id prompt.

The prompt is a list of token ids (user text cannot become a control token);
``return_token_ids`` brings the generated ids back and ``skip_special_tokens: false``
keeps Harmony markers in the text.  Streamed choices carry ``token_ids`` (sometimes
several per chunk) and ``finish_reason`` on the chunk of the last token;
``stream_options.include_usage`` adds a final usage chunk with ``choices: []``
(see ``tests/fixtures/wire/vllm``).

Images are refused (400 naming the content part): vLLM's ``/v1/completions`` takes a
prompt as text or token ids and has no field for image data (its multimodal input is
the chat endpoint's ``messages``, which would re-tokenize client text).  A vision model
on vLLM is served through the ``openai`` backend with ``prompt_format = "chat"``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from adapters.base import Capabilities, get_json, status_error, token_ids
from adapters.routing import RetryPolicy
from adapters.transport import Framing, HttpBackend, usage_only
from app.core.conversation import GenerationParams
from app.core.errors import GatewayError, InvalidRequest, UpstreamError
from app.core.output import Chunk, Finish, TokenLogprob, TopLogprob, Usage
from app.core.prompt import Prompt


def _logprobs(lp: dict[str, Any]) -> tuple[TokenLogprob, ...]:
    """vLLM's legacy completions logprobs (token strings only, no ids or bytes)."""
    tokens = lp.get("tokens") or []
    values = lp.get("token_logprobs") or []
    tops = lp.get("top_logprobs") or [None] * len(tokens)
    out: list[TokenLogprob] = []
    for token, value, top in zip(tokens, values, tops, strict=False):
        alternatives = tuple(TopLogprob(str(t), float(v)) for t, v in (top or {}).items())
        out.append(TokenLogprob(str(token), float(value if value is not None else 0.0), top=alternatives))
    return tuple(out)


def event_to_chunk(event: dict[str, Any]) -> Chunk:
    """One ``text_completion`` stream event → :class:`Chunk` (pure; tested on recordings)."""
    usage = event.get("usage")
    chunk_usage = None
    if usage:
        details = usage.get("prompt_tokens_details") or {}
        chunk_usage = Usage(prompt_tokens=int(usage.get("prompt_tokens", 0)),
                            completion_tokens=int(usage.get("completion_tokens", 0)),
                            cached_tokens=int(details.get("cached_tokens") or 0))
    choices = event.get("choices") or []
    if not choices:
        return Chunk(usage=chunk_usage)
    choice = choices[0]
    finish = None
    reason = choice.get("finish_reason")
    if reason == "length":
        finish = Finish("length")
    elif reason == "stop":
        stop_reason = choice.get("stop_reason")
        finish = Finish("stop_string", stop_reason) if isinstance(stop_reason, str) else Finish("eos")
    lp = choice.get("logprobs")
    return Chunk(text=str(choice.get("text") or ""), token_ids=token_ids(choice.get("token_ids"), "vLLM"),
                 logprobs=_logprobs(lp) if lp else None, finish=finish, usage=chunk_usage)


class VLLMDialect:
    """vLLM's ``/v1/completions`` with token ids (see the module docstring)."""

    kind = "vllm"
    label = "vLLM"
    framing: Framing = "sse"
    # n > 1 is refused (400): the pipeline streams one choice; send n requests instead.
    capabilities = Capabilities(token_ids=True, logprobs=True, max_top_logprobs=20, n=False,
                                seed=True, json_schema=True, images=False, ignore_eos=True, logit_bias=True)

    def __init__(self, served_model: str) -> None:
        self._model = served_model

    def url(self, base: str) -> str:
        return f"{base}/v1/completions"

    def headers(self) -> Mapping[str, str]:
        return {}

    def reader(self) -> VLLMReader:
        return VLLMReader()

    def error(self, status: int, body: bytes, headers: httpx.Headers) -> GatewayError:
        return status_error(status, body, headers)

    async def ready(self, client: httpx.AsyncClient, bases: Sequence[str]) -> bool:
        """Healthy, and serving the configured model (a wrong ``upstream_model`` is not ready)."""
        for url in bases:
            models = await get_json(client, f"{url}/v1/models")
            if any(m.get("id") == self._model for m in _models(models)):
                return True
        return False

    async def context_window(self, client: httpx.AsyncClient, bases: Sequence[str]) -> int | None:
        """``max_model_len`` of the served model in ``GET /v1/models`` (smallest over replicas)."""
        windows = []
        for url in bases:
            for m in _models(await get_json(client, f"{url}/v1/models")):
                if m.get("id") == self._model and isinstance(m.get("max_model_len"), int):
                    windows.append(m["max_model_len"])
        return min(windows) if windows else None

    def request_body(self, prompt: Prompt, params: GenerationParams) -> dict[str, Any]:
        if prompt.token_ids is not None:
            upstream_prompt: list[int] | str = list(prompt.token_ids)
        elif prompt.text is not None:
            # Only formats whose renderer has made client text inert set ``text`` (OpenChatML).
            upstream_prompt = prompt.text
        else:
            raise InvalidRequest("vLLM needs token ids or a text-safe prompt; this prompt format "
                                 "produces neither for vLLM (use llama.cpp, which tokenizes segments).")
        body: dict[str, Any] = {
            "model": self._model, "prompt": upstream_prompt, "stream": True,
            "return_token_ids": True, "skip_special_tokens": False,
            "stream_options": {"include_usage": True},
        }
        if params.max_tokens is not None:
            body["max_tokens"] = params.max_tokens
        for name in ("temperature", "top_p", "seed", "frequency_penalty", "presence_penalty"):
            value = getattr(params, name)
            if value is not None:
                body[name] = value
        if prompt.stop_strings:
            body["stop"] = list(prompt.stop_strings)
        if params.ignore_eos:
            body["ignore_eos"] = True
        if params.logprobs:
            body["logprobs"] = max(params.top_logprobs, 1)
        if params.logit_bias:
            body["logit_bias"] = {str(token): bias for token, bias in params.logit_bias}
        if prompt.json_schema is not None:
            body["structured_outputs"] = {"json": prompt.json_schema}  # vLLM >= 0.10.2
        return body


class VLLMReader:
    def chunk(self, event: dict[str, Any]) -> Chunk:
        if "error" in event:
            raise UpstreamError(f"vLLM reported an error mid-stream: {event['error']}")
        return event_to_chunk(event)

    def is_last(self, event: dict[str, Any]) -> bool:
        return usage_only(event)


class VLLMBackend(HttpBackend):
    kind = VLLMDialect.kind
    capabilities = VLLMDialect.capabilities

    def __init__(self, client: httpx.AsyncClient, base_urls: Sequence[str], served_model: str,
                 policy: RetryPolicy | None = None) -> None:
        super().__init__(client, base_urls, VLLMDialect(served_model), policy)


def _models(listing: Any) -> list[dict[str, Any]]:
    data = listing.get("data") if isinstance(listing, dict) else None
    return [m for m in data if isinstance(m, dict)] if isinstance(data, list) else []
