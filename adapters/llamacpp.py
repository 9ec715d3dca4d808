"""llama.cpp ``llama-server`` adapter: native ``POST /completion`` with token ids.

The prompt goes upstream as a list of token ids, so nothing the user typed can be
re-tokenized into a control token.  We always stream upstream (``stream: true``,
``return_tokens: true``); a non-streaming API answer is the fold of the same
chunks.  Every SSE event carries ``tokens`` (ids) and ``content`` (their text);
the final ``stop: true`` event carries ``stop_type`` (``eos`` / ``limit`` /
``word``) and the token counts (see ``tests/fixtures/wire/llamacpp``).

:meth:`LlamaCppBackend.total_slots` reads a replica's ``/props`` ``total_slots`` (its ``-np``):
the engine keeps at most that many generations in flight to it (``app.engine.admission``).

A prompt with images (a server with a multimodal projector) goes as llama.cpp's
multimodal prompt object instead, checked so that client text still cannot become a
control token (:mod:`adapters.llamacpp_media`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from contextlib import aclosing
from typing import Any, cast

import httpx
import orjson

from adapters.base import Capabilities, get_json, status_error, token_ids, transport_error
from adapters.gguf import GGUFError, read_vocabulary
from adapters.llamacpp_media import images_of, pieces, prompt_object, strip_prefix
from adapters.routing import RetryPolicy, failover
from adapters.safe_tokens import IsMarker, by_ids, by_shape, safe_ids
from adapters.transport import Framing, HttpBackend, any_healthy, post_stream
from app.core.conversation import GenerationParams
from app.core.errors import GatewayError, InvalidRequest, UpstreamError
from app.core.output import Chunk, Finish, TokenLogprob, TopLogprob, Usage
from app.core.prompt import Prompt

log = logging.getLogger("ocm_gateway")

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
    if not probs and not event.get("stop"):  # a token mid-stream, the usual event
        content = event.get("content", "")
        return Chunk(content if type(content) is str else str(content),
                     token_ids(event.get("tokens"), "llama.cpp"))
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
        token_ids=token_ids(event.get("tokens"), "llama.cpp"),
        logprobs=_logprobs(probs) if probs else None,
        finish=chunk_finish,
        usage=usage,
    )


class LlamaCppDialect:
    """llama-server's native ``/completion`` (see the module docstring)."""

    kind = "llamacpp"
    label = "llama.cpp"
    framing: Framing = "sse"
    # images: only when the server can see, which its /props tells (LlamaCppBackend.tokenize)
    capabilities = Capabilities(token_ids=True, logprobs=True, max_top_logprobs=20, n=False,
                                seed=True, json_schema=True, images=True, tokenize=True,
                                ignore_eos=True, logit_bias=True)

    def url(self, base: str) -> str:
        return f"{base}/completion"

    def headers(self) -> Mapping[str, str]:
        return {}

    def reader(self) -> LlamaCppReader:
        return LlamaCppReader()

    def error(self, status: int, body: bytes, headers: httpx.Headers) -> GatewayError:
        return status_error(status, body, headers)

    async def ready(self, client: httpx.AsyncClient, bases: Sequence[str]) -> bool:
        return await any_healthy(client, [f"{b}/health" for b in bases])

    async def context_window(self, client: httpx.AsyncClient, bases: Sequence[str]) -> int | None:
        """The per-slot context from ``GET /props`` (``-c`` divided among ``-np`` slots); the
        smallest over the replicas, since a request may land on any of them."""
        windows = []
        for url in bases:
            props = await get_json(client, f"{url}/props")
            n_ctx = (props or {}).get("default_generation_settings", {}).get("n_ctx")
            if isinstance(n_ctx, int) and n_ctx > 0:
                windows.append(n_ctx)
        return min(windows) if windows else None

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
        if params.ignore_eos:
            body["ignore_eos"] = True
        if params.logprobs:
            body["n_probs"] = max(params.top_logprobs, 1)
        if params.logit_bias:
            body["logit_bias"] = [[token, bias] for token, bias in params.logit_bias]
        if prompt.json_schema is not None:
            body["json_schema"] = prompt.json_schema  # llama.cpp compiles it to a grammar
        return body


class LlamaCppReader:
    def chunk(self, event: dict[str, Any]) -> Chunk:
        return event_to_chunk(event)

    def is_last(self, event: dict[str, Any]) -> bool:
        return event.get("stop") is True


class LlamaCppBackend(HttpBackend):
    """llama.cpp over the shared transport; it also tokenizes (segments → safe token ids)
    and reports the GGUF's chat template (``GET /props``)."""

    kind = LlamaCppDialect.kind
    capabilities = LlamaCppDialect.capabilities

    def __init__(self, client: httpx.AsyncClient, base_urls: Sequence[str],
                 policy: RetryPolicy | None = None, *, gguf: str | None = None) -> None:
        super().__init__(client, base_urls, LlamaCppDialect(), policy)
        self._gguf = gguf
        self._is_marker: IsMarker | None = None
        self._marker_lock = asyncio.Lock()
        self._vision: tuple[bool, float] | None = None  # (every replica sees, when asked)
        self._prefix: tuple[str, list[int]] | None = None  # what the server puts in front (BOS)

    async def chat_template(self) -> tuple[str, str, str, str]:
        """(chat_template, bos_token, eos_token, chat_template_tool_use or "") from the first
        replica's ``GET /props``."""
        base = self.base_urls[0]
        try:
            response = await self._client.get(f"{base}/props")
        except httpx.HTTPError as exc:
            raise transport_error(exc, base) from exc
        if response.status_code != 200:
            raise status_error(response.status_code, response.content, response.headers)
        props = orjson.loads(response.content)
        template = props.get("chat_template") if isinstance(props, dict) else None
        if not isinstance(template, str) or not template:
            raise UpstreamError(f"The backend at {base} reports no chat template in /props.")
        tool_use = props.get("chat_template_tool_use")
        return (template, str(props.get("bos_token") or ""), str(props.get("eos_token") or ""),
                tool_use if isinstance(tool_use, str) else "")

    async def total_slots(self, base: str) -> int | None:
        """The replica's parallel slots (``GET /props`` ``total_slots``); None when it does not
        answer or reports none."""
        props = await get_json(self._client, f"{base}/props")
        slots = props.get("total_slots") if isinstance(props, dict) else None
        return slots if isinstance(slots, int) and not isinstance(slots, bool) and slots > 0 else None

    async def _tokenize(self, text: str, special: bool, add_special: bool = False) -> list[dict[str, Any]]:
        body = {"content": text, "add_special": add_special, "parse_special": special,
                "with_pieces": True}
        replica = self.pool.pick(set())
        try:
            response = await self._client.post(f"{replica.url}/tokenize", content=orjson.dumps(body),
                                               headers={"content-type": "application/json"})
        except httpx.HTTPError as exc:
            raise transport_error(exc, replica.url) from exc
        if response.status_code != 200:
            raise status_error(response.status_code, response.content, response.headers)
        tokens = orjson.loads(response.content).get("tokens")
        if not isinstance(tokens, list):
            raise UpstreamError("llama.cpp /tokenize answered without a token list.")
        return [t if isinstance(t, dict) else {"id": t, "piece": ""} for t in tokens]

    async def _untrusted_ids(self, text: str) -> list[int]:
        """Client text → ids that are never a marker token (:mod:`adapters.safe_tokens`)."""
        return await safe_ids(text, lambda t: self._tokenize(t, False), await self._marker_check())

    async def _marker_check(self) -> IsMarker:
        """Which tokens are markers: from the model's vocabulary when its GGUF file can be
        read (``gguf`` in the config, else ``/props`` ``model_path``), else by shape.
        Decided once, on first use."""
        if self._is_marker is None:
            async with self._marker_lock:
                if self._is_marker is None:
                    self._is_marker = await self._resolve_marker_check()
        return self._is_marker

    async def _resolve_marker_check(self) -> IsMarker:
        path = self._gguf
        if path is None:
            props = await get_json(self._client, f"{self.base_urls[0]}/props")
            reported = (props or {}).get("model_path")
            if isinstance(reported, str) and await asyncio.to_thread(os.path.isfile, reported):
                path = reported
        if path is not None:
            try:
                vocab = await asyncio.to_thread(read_vocabulary, path)
            except GGUFError as exc:
                if self._gguf is not None:  # the operator named it: no silent downgrade
                    log.error("llama.cpp at %s: cannot read the configured gguf: %s",
                              self.base_urls[0], exc)
                    raise UpstreamError(f"The model's vocabulary file cannot be read: {exc}") from None
                log.warning("llama.cpp at %s: cannot read %s (%s); client text is checked for "
                            "tag-shaped tokens instead", self.base_urls[0], path, exc)
            else:
                log.info("llama.cpp at %s: %d marker tokens from the vocabulary in %s",
                         self.base_urls[0], len(vocab.markers), path)
                return by_ids(frozenset(vocab.markers))
        else:
            log.warning("llama.cpp at %s: its model file is not readable here (set gguf in the "
                        "model config); client text is checked for tag-shaped tokens instead",
                        self.base_urls[0])
        return by_shape

    async def _trusted_ids(self, text: str) -> list[int]:
        return [int(t["id"]) for t in await self._tokenize(text, True)]

    async def tokenize(self, segments: Sequence[tuple[str, bool]]) -> list[int]:
        if images_of(segments):
            return await self._media_ids(segments)
        parts = await asyncio.gather(*(
            self._trusted_ids(text) if trusted else self._untrusted_ids(text)
            for text, trusted in segments))
        return [i for part in parts for i in part]

    # -- images (adapters.llamacpp_media) ------------------------------------------------

    VISION_RECHECK = 30.0  # seconds between two /props reads that said "cannot see"

    async def can_see(self) -> bool:
        """Whether every replica that answers ``GET /props`` reports ``modalities.vision``.
        A yes is kept; a no (or no answer) is asked again after :attr:`VISION_RECHECK` s,
        so a server restarted with ``--mmproj`` is noticed."""
        if self._vision is not None and (self._vision[0] or
                                         time.monotonic() - self._vision[1] < self.VISION_RECHECK):
            return self._vision[0]
        answers = [await get_json(self._client, f"{base}/props") for base in self.base_urls]
        seen = [bool(((a or {}).get("modalities") or {}).get("vision")) for a in answers
                if isinstance(a, dict)]
        vision = bool(seen) and all(seen)
        self._vision = (vision, time.monotonic())
        return vision

    async def _server_prefix(self) -> tuple[str, list[int]]:
        """(text, ids) of what the server adds in front of a prompt it tokenizes (its BOS)."""
        if self._prefix is None:
            tokens = await self._tokenize("", True, add_special=True)
            self._prefix = ("".join(str(t.get("piece") or "") for t in tokens),
                            [int(t["id"]) for t in tokens])
        return self._prefix

    async def _media_ids(self, segments: Sequence[tuple[str, bool]]) -> list[int]:
        """The text token ids of a prompt with images (their own tokens are the server's),
        once the model is known to see and no client text can become a control token."""
        images = images_of(segments)
        if not await self.can_see():
            raise InvalidRequest("This model cannot see images: its llama.cpp server reports no "
                                 "vision in /props (it needs a multimodal projector, --mmproj).",
                                 param=images[0][0], code="unsupported_content_type")
        is_marker = await self._marker_check()
        prefix, prefix_ids = await self._server_prefix()
        ids = list(prefix_ids)
        for piece in pieces(strip_prefix(segments, prefix)):
            text = "".join(t for t, _ in piece)
            server, *trusted = await asyncio.gather(
                self._tokenize(text, True),
                *(self._tokenize(t, True) for t, ok in piece if ok))
            expected = [int(t["id"]) for part in trusted for t in part if is_marker(t)]
            if [int(t["id"]) for t in server if is_marker(t)] != expected:
                raise InvalidRequest("The message text contains a sequence this model's tokenizer "
                                     "treats as a control token.", param="messages",
                                     code="control_token_in_text")
            ids += [int(t["id"]) for t in server]
        return ids

    def stream(self, prompt: Prompt, params: GenerationParams) -> AsyncIterator[Chunk]:
        if images_of(prompt.segments):
            return self._stream_media(prompt, params)
        return super().stream(prompt, params)

    async def _stream_media(self, prompt: Prompt, params: GenerationParams) -> AsyncIterator[Chunk]:
        body = self.dialect.request_body(prompt, params)
        segments = strip_prefix(prompt.segments, (await self._server_prefix())[0])
        reader = self.dialect.reader()

        async def open_stream(base: str) -> AsyncIterator[dict[str, Any]]:
            props = await get_json(self._client, f"{base}/props")  # this replica's marker, now
            marker = props.get("media_marker") if isinstance(props, dict) else None
            if not isinstance(marker, str) or not marker:
                raise UpstreamError(f"The llama.cpp server at {base} reports no media_marker in "
                                    "/props, so it cannot be sent images.")
            upstream = {**body, "prompt": prompt_object(segments, marker)}
            async with aclosing(cast(AsyncGenerator[dict[str, Any], None], post_stream(
                    self._client, self.dialect.url(base), upstream, self.dialect.label,
                    errors=self.dialect.error, is_last=reader.is_last))) as events:
                async for event in events:
                    yield event

        async with aclosing(failover(self.pool, open_stream, params.affinity)) as events:
            async for event in events:
                yield reader.chunk(event)
