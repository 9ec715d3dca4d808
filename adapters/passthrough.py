"""Client prompts, embeddings and tokenize / detokenize on each backend (the passthrough
endpoints: ``/v1/completions``, ``/v1/embeddings``, ``/tokenize``, ``/detokenize``).

:func:`passthrough` gives a backend's :class:`Passthrough`, which shares the backend's HTTP
client and replica pool:

* **completions**: the client's own prompt (text or token ids) as it is; the gateway renders
  nothing.  llama.cpp gets token ids on ``/completion`` (a text prompt is tokenized by the
  server's ``/tokenize`` the way its ``/completion`` would: BOS added, special tokens parsed,
  so the budget is exact); vLLM and OpenAI-compatible servers get their ``/v1/completions``
  (vLLM with its own defaults, i.e. special tokens skipped in the text); Ollama
  ``/api/generate`` with ``raw: true`` (text only).
* **embeddings**: vLLM / OpenAI-compatible / llama.cpp ``/v1/embeddings`` (llama.cpp only when
  started with ``--embeddings``), Ollama ``/api/embed``; always asked for floats.
* **tokenize / detokenize**: llama.cpp ``/tokenize`` / ``/detokenize``, vLLM's own
  ``/tokenize`` / ``/detokenize``; the others have none (:class:`NotSupported`, a 400).
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import httpx
import orjson

from adapters.base import Capabilities, transport_error
from adapters.chat_messages import body_error, stream_error
from adapters.llamacpp import LlamaCppBackend
from adapters.ollama import OllamaBackend
from adapters.openai_chat import OpenAIChatBackend, OpenAIChatDialect, api_root
from adapters.transport import Dialect, Framing, HttpBackend, any_healthy
from adapters.vllm import VLLMBackend, VLLMDialect, VLLMReader
from app.core.conversation import GenerationParams
from app.core.errors import ContextLengthExceeded, GatewayError, InvalidRequest, UpstreamError
from app.core.output import Chunk, Finish, StopKind, Usage
from app.core.prompt import Prompt

ClientPrompt = str | tuple[int, ...]
Embeddings = tuple[list[list[float]], int]  # vectors in input order, prompt tokens


class NotSupported(InvalidRequest):
    """The model's backend has no such endpoint (or was not started with it)."""

    code = "unsupported_endpoint"


def _options(params: GenerationParams) -> dict[str, Any]:
    body: dict[str, Any] = {}
    for name in ("max_tokens", "temperature", "top_p", "seed", "frequency_penalty",
                 "presence_penalty"):
        value = getattr(params, name)
        if value is not None:
            body[name] = value
    return body


def _openai_body(model: str, prompt: Prompt, params: GenerationParams) -> dict[str, Any]:
    """A legacy ``/v1/completions`` body for a client prompt (ids or text, as given)."""
    upstream = list(prompt.token_ids) if prompt.token_ids is not None else prompt.text
    body: dict[str, Any] = {"model": model, "prompt": upstream, "stream": True,
                            "stream_options": {"include_usage": True}, **_options(params)}
    if prompt.stop_strings:
        body["stop"] = list(prompt.stop_strings)
    if params.logprobs:
        body["logprobs"] = params.top_logprobs
    if params.logit_bias:
        body["logit_bias"] = {str(token): bias for token, bias in params.logit_bias}
    if params.user is not None:
        body["user"] = params.user
    return body


class VLLMCompletionsDialect(VLLMDialect):
    """vLLM's ``/v1/completions`` for a client prompt: vLLM's own text defaults (special
    tokens skipped), token ids still returned."""

    def request_body(self, prompt: Prompt, params: GenerationParams) -> dict[str, Any]:
        body = super().request_body(prompt, params)
        body.pop("skip_special_tokens", None)
        if params.logprobs:
            body["logprobs"] = params.top_logprobs
        return body


class OpenAICompletionsReader(VLLMReader):
    pass


class OpenAICompletionsDialect(OpenAIChatDialect):
    """Any OpenAI-compatible ``/completions`` (legacy text completions, streamed)."""

    capabilities = Capabilities(token_ids=False, logprobs=True, max_top_logprobs=5, seed=True,
                                logit_bias=True)

    def __init__(self, model: str, headers: Mapping[str, str]) -> None:
        super().__init__(model)
        self._headers = dict(headers)

    def url(self, base: str) -> str:
        return f"{api_root(base)}/completions"

    def reader(self) -> OpenAICompletionsReader:  # type: ignore[override]
        return OpenAICompletionsReader()

    def request_body(self, prompt: Prompt, params: GenerationParams) -> dict[str, Any]:
        return _openai_body(self._model, prompt, params)


_DONE: dict[str, StopKind] = {"stop": "eos", "length": "length"}


class OllamaGenerateReader:
    def is_last(self, event: dict[str, Any]) -> bool:
        return bool(event.get("done"))

    def chunk(self, event: dict[str, Any]) -> Chunk:
        if "error" in event:
            raise stream_error(event["error"], "Ollama")
        finish = usage = None
        if event.get("done"):
            finish = Finish(_DONE.get(str(event.get("done_reason") or "stop"), "eos"))
            usage = Usage(prompt_tokens=int(event.get("prompt_eval_count") or 0),
                          completion_tokens=int(event.get("eval_count") or 0))
        return Chunk(text=str(event.get("response") or ""), finish=finish, usage=usage)


class OllamaGenerateDialect:
    """Ollama's ``/api/generate`` with ``raw: true``: the client's text, no template."""

    kind = "ollama"
    label = "Ollama"
    framing: Framing = "ndjson"
    capabilities = Capabilities(seed=True)

    def __init__(self, model: str) -> None:
        self._model = model

    def url(self, base: str) -> str:
        return f"{base}/api/generate"

    def headers(self) -> Mapping[str, str]:
        return {}

    def reader(self) -> OllamaGenerateReader:
        return OllamaGenerateReader()

    def error(self, status: int, body: bytes, headers: httpx.Headers) -> GatewayError:
        return body_error(status, body, headers, "ollama")

    async def ready(self, client: httpx.AsyncClient, bases: Sequence[str]) -> bool:
        return await any_healthy(client, [f"{b}/api/version" for b in bases])

    async def context_window(self, client: httpx.AsyncClient, bases: Sequence[str]) -> int | None:
        return None

    def request_body(self, prompt: Prompt, params: GenerationParams) -> dict[str, Any]:
        options = _options(params)
        if "max_tokens" in options:
            options["num_predict"] = options.pop("max_tokens")
        if prompt.stop_strings:
            options["stop"] = list(prompt.stop_strings)
        body: dict[str, Any] = {"model": self._model, "prompt": prompt.text or "", "raw": True,
                                "stream": True}
        if options:
            body["options"] = options
        return body


class Passthrough:
    """One backend's passthrough endpoints (see the module docstring); a subclass per server."""

    label = "This backend"
    tokenizes = False  # has tokenize / detokenize

    def __init__(self, backend: HttpBackend, dialect: Dialect, model: str) -> None:
        self.backend = backend
        self.dialect = dialect
        self.model = model  # the upstream model name
        self.capabilities = dialect.capabilities

    async def prompt(self, value: ClientPrompt, stop: tuple[str, ...]) -> Prompt:
        """The client's prompt as it goes upstream."""
        if isinstance(value, tuple):
            return Prompt(token_ids=value, stop_strings=stop)
        return Prompt(token_ids=None, text=value, stop_strings=stop)

    def stream(self, prompt: Prompt, params: GenerationParams) -> AsyncIterator[Chunk]:
        return self.backend.stream_via(self.dialect, prompt, params)

    async def _post(self, path: str, body: dict[str, Any], what: str) -> Any:
        """POST JSON to the least busy replica (``path`` from the API root); a 404 / 405 /
        501 answer means the server has no such endpoint."""
        replica = self.backend.pool.pick(set())
        url = self._url(replica.url, path)
        replica.outstanding += 1
        try:
            response = await self.backend.client.post(
                url, content=orjson.dumps(body),
                headers={"content-type": "application/json", **self.dialect.headers()})
        except httpx.HTTPError as exc:
            raise transport_error(exc, replica.url) from exc
        finally:
            replica.outstanding -= 1
        if response.status_code in (404, 405, 501):
            detail = response.content.decode("utf-8", "replace")[:300]
            raise NotSupported(f"The {self.backend.kind} backend of this model does not serve "
                               f"{what} ({path} answered {response.status_code}: {detail}).",
                               param="model")
        if response.status_code != 200:
            raise self.dialect.error(response.status_code, response.content, response.headers)
        try:
            return orjson.loads(response.content)
        except orjson.JSONDecodeError:
            raise UpstreamError(f"{self.dialect.label} answered {path} with invalid JSON.") from None

    def _url(self, base: str, path: str) -> str:
        return base + path

    async def embed(self, inputs: list[str] | list[list[int]], dimensions: int | None,
                    ) -> Embeddings:
        """Vectors in input order; an input longer than the model takes is a 400
        ``context_length_exceeded`` naming ``input``."""
        body: dict[str, Any] = {"model": self.model, "input": inputs, "encoding_format": "float"}
        if dimensions is not None:
            body["dimensions"] = dimensions
        try:
            answer = await self._post(self.embeddings_path, body, "embeddings")
        except ContextLengthExceeded as exc:
            raise ContextLengthExceeded(exc.message.replace("The prompt", "An input", 1),
                                        param="input") from None
        return openai_embeddings(answer, len(inputs), self.dialect.label)

    embeddings_path = "/v1/embeddings"

    async def tokenize(self, text: str, add_special: bool, pieces: bool,
                       ) -> tuple[list[int], list[str] | None]:
        raise NotSupported(f"The {self.backend.kind} backend has no tokenizer endpoint.",
                           param="model")

    async def detokenize(self, ids: Sequence[int]) -> str:
        raise NotSupported(f"The {self.backend.kind} backend has no detokenizer endpoint.",
                           param="model")


def openai_embeddings(answer: Any, count: int, label: str) -> Embeddings:
    """``{"data": [{"index", "embedding"}], "usage"}`` → vectors in input order, checked."""
    data = answer.get("data") if isinstance(answer, dict) else None
    vectors: list[list[float]] = [[] for _ in range(count)]
    if not isinstance(data, list) or len(data) != count:
        raise UpstreamError(f"{label} answered embeddings without one vector per input.")
    for i, item in enumerate(data):
        index = item.get("index", i) if isinstance(item, dict) else None
        vector = item.get("embedding") if isinstance(item, dict) else None
        if not isinstance(index, int) or not 0 <= index < count or not isinstance(vector, list):
            raise UpstreamError(f"{label} answered an embedding item without index or vector.")
        vectors[index] = _floats(vector, label)
    usage = answer.get("usage") or {}
    return vectors, int(usage.get("prompt_tokens") or 0)


def _floats(vector: list[Any], label: str) -> list[float]:
    if vector and isinstance(vector[0], list):  # llama.cpp without pooling: one per token
        raise UpstreamError(f"{label} answered per-token embeddings (start it with a pooling type).")
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in vector):
        raise UpstreamError(f"{label} answered an embedding that is not a list of numbers.")
    return [float(v) for v in vector]


class LlamaCppPassthrough(Passthrough):
    tokenizes = True

    async def embed(self, inputs: list[str] | list[list[int]], dimensions: int | None,
                    ) -> Embeddings:
        """llama.cpp has no ``dimensions``: the vectors are cut to their first ``dimensions``
        values and scaled back to unit length, as OpenAI's and Ollama's ``dimensions`` do
        (meaningful for Matryoshka-trained models, which most current embedders are)."""
        vectors, tokens = await super().embed(inputs, None)
        if dimensions is None:
            return vectors, tokens
        size = len(vectors[0]) if vectors else 0
        if dimensions > size:
            raise InvalidRequest(f"dimensions is {dimensions}, but this model's embeddings have "
                                 f"{size}.", param="dimensions")
        return [_shortened(v, dimensions) for v in vectors], tokens

    async def prompt(self, value: ClientPrompt, stop: tuple[str, ...]) -> Prompt:
        if isinstance(value, str):  # what /completion does with text: BOS, specials parsed
            ids, _ = await self.tokenize(value, True, False)
            if not ids:
                raise InvalidRequest("The prompt has no tokens.", param="prompt")
            value = tuple(ids)
        return Prompt(token_ids=value, stop_strings=stop)

    async def tokenize(self, text: str, add_special: bool, pieces: bool,
                       ) -> tuple[list[int], list[str] | None]:
        answer = await self._post("/tokenize", {"content": text, "add_special": add_special,
                                                "parse_special": True, "with_pieces": pieces},
                                  "tokenize")
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, list):
            raise UpstreamError("llama.cpp /tokenize answered without a token list.")
        if not pieces:
            return [int(t) for t in tokens], None
        return [int(t["id"]) for t in tokens], [str(t.get("piece", "")) for t in tokens]

    async def detokenize(self, ids: Sequence[int]) -> str:
        answer = await self._post("/detokenize", {"tokens": list(ids)}, "detokenize")
        content = answer.get("content") if isinstance(answer, dict) else None
        if not isinstance(content, str):
            raise UpstreamError("llama.cpp /detokenize answered without content.")
        return content


class VLLMPassthrough(Passthrough):
    tokenizes = True

    async def tokenize(self, text: str, add_special: bool, pieces: bool,
                       ) -> tuple[list[int], list[str] | None]:
        answer = await self._post("/tokenize", {"model": self.model, "prompt": text,
                                                "add_special_tokens": add_special,
                                                "return_token_strs": pieces}, "tokenize")
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, list):
            raise UpstreamError("vLLM /tokenize answered without a token list.")
        strs = answer.get("token_strs")
        return [int(t) for t in tokens], [str(s) for s in strs] if isinstance(strs, list) else None

    async def detokenize(self, ids: Sequence[int]) -> str:
        answer = await self._post("/detokenize", {"model": self.model, "tokens": list(ids)},
                                  "detokenize")
        text = answer.get("prompt") if isinstance(answer, dict) else None
        if not isinstance(text, str):
            raise UpstreamError("vLLM /detokenize answered without a prompt.")
        return text


class OpenAIPassthrough(Passthrough):
    def _url(self, base: str, path: str) -> str:
        return api_root(base) + path.removeprefix("/v1")  # the API root is configured


class OllamaPassthrough(Passthrough):
    embeddings_path = "/api/embed"

    async def prompt(self, value: ClientPrompt, stop: tuple[str, ...]) -> Prompt:
        if isinstance(value, tuple):
            raise InvalidRequest("The ollama backend takes text prompts only, not token ids.",
                                 param="prompt")
        return await super().prompt(value, stop)

    async def embed(self, inputs: list[str] | list[list[int]], dimensions: int | None,
                    ) -> Embeddings:
        if any(not isinstance(i, str) for i in inputs):
            raise InvalidRequest("The ollama backend embeds text only, not token ids.",
                                 param="input")
        body: dict[str, Any] = {"model": self.model, "input": inputs}
        if dimensions is not None:
            body["dimensions"] = dimensions
        answer = await self._post(self.embeddings_path, body, "embeddings")
        vectors = answer.get("embeddings") if isinstance(answer, dict) else None
        if not isinstance(vectors, list) or len(vectors) != len(inputs) or not all(
                isinstance(v, list) for v in vectors):
            raise UpstreamError("Ollama answered /api/embed without one vector per input.")
        return [_floats(v, "Ollama") for v in vectors], int(answer.get("prompt_eval_count") or 0)


def _shortened(vector: list[float], dimensions: int) -> list[float]:
    head = vector[:dimensions]
    norm = math.sqrt(sum(x * x for x in head))
    return [x / norm for x in head] if norm > 0 else head


def _upstream_model(backend: HttpBackend) -> str:
    return str(getattr(backend.dialect, "_model", ""))


def passthrough(backend: object) -> Passthrough:
    """The passthrough of a configured backend (a 400 for a backend kind without one)."""
    if isinstance(backend, LlamaCppBackend):
        return LlamaCppPassthrough(backend, backend.dialect, "")
    if isinstance(backend, VLLMBackend):
        model = _upstream_model(backend)
        return VLLMPassthrough(backend, VLLMCompletionsDialect(model), model)
    if isinstance(backend, OpenAIChatBackend):
        model = _upstream_model(backend)
        dialect = OpenAICompletionsDialect(model, backend.dialect.headers())
        return OpenAIPassthrough(backend, dialect, model)
    if isinstance(backend, OllamaBackend):
        model = _upstream_model(backend)
        return OllamaPassthrough(backend, OllamaGenerateDialect(model), model)
    kind = getattr(backend, "kind", type(backend).__name__)
    raise NotSupported(f"The {kind} backend has no passthrough endpoints.", param="model")

