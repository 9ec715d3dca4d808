"""The :class:`~app.knowledge.vectors.Embedder` of vector stores: ``[knowledge] embedding_model``,
a model of the config, asked through its backend's embeddings endpoint exactly as
``POST /v1/embeddings`` asks it (:mod:`adapters.passthrough`: llama.cpp / vLLM /
OpenAI-compatible ``/v1/embeddings``, Ollama ``/api/embed``).

Contract of :meth:`UpstreamEmbedder.embed`:

* one vector per text, in order, each scaled to unit length (L2), all of one length (the first
  answer sets :attr:`~UpstreamEmbedder.dimensions`; a later answer of another length, a
  non-finite value or a zero vector is an :class:`~app.core.errors.UpstreamError`);
* texts go upstream ``embedding_batch`` at a time, one batch (one request) after another;
* a transient upstream failure (429, 502, 503, 504: unreachable, timed out, overloaded,
  restarting) is retried with exponential backoff, ``[upstream] max_attempts`` tries in all,
  starting at ``[upstream] retry_backoff`` (at least :data:`MIN_BACKOFF`) and honouring a
  429's ``Retry-After`` up to :data:`MAX_BACKOFF`; anything else (a 400 for a text over the
  model's context, a backend without embeddings: ``unsupported_endpoint``) is raised at once,
  as are the transient ones once the tries are spent: always the gateway's own errors.  A text
  over the model's input is :class:`~app.core.errors.ContextLengthExceeded` (400, ``input``),
  also when llama.cpp says so with a 500 (an input beyond its physical batch).

:func:`check_space` refuses a vector store made with another model (or another vector length).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import anyio

from adapters.passthrough import passthrough
from app.config import GatewayConfig
from app.core.errors import ContextLengthExceeded, GatewayError, UpstreamError, UpstreamRateLimited
from app.knowledge.vectors import EmbeddingModelChanged, EmbeddingSpace

MIN_BACKOFF = 0.25  # seconds before the second try (a restarting server needs more than 50 ms)
MAX_BACKOFF = 30.0  # the longest wait between two tries, a Retry-After included
TRANSIENT = frozenset({429, 502, 503, 504})


class EmbeddingsClient(Protocol):
    """What the embedder needs of a backend (:class:`adapters.passthrough.Passthrough`):
    vectors in input order and the prompt tokens they cost."""

    async def embed(self, inputs: list[str] | list[list[int]], dimensions: int | None,
                    ) -> tuple[list[list[float]], int]: ...


def transient(exc: GatewayError) -> bool:
    """Worth another try: the upstream was unreachable, slow, overloaded or rate limiting (not
    a model or route it does not know, and not a request it refused)."""
    return (isinstance(exc, UpstreamError) and exc.status in TRANSIENT
            and exc.code != "upstream_not_found")


def too_long(exc: GatewayError) -> bool:
    """llama.cpp's answer to an input longer than its batch (a 500, checked before the
    context's 400): the text is too long, not the server failing."""
    return isinstance(exc, UpstreamError) and "too large to process" in exc.message


class UpstreamEmbedder:
    """An :class:`~app.knowledge.vectors.Embedder` over one backend (see the module docstring)."""

    def __init__(self, model: str, client: EmbeddingsClient, *, batch_size: int = 32,
                 max_input_tokens: int = 512, request_dimensions: int | None = None,
                 max_attempts: int = 3, backoff: float = MIN_BACKOFF,
                 sleep: Callable[[float], Awaitable[None]] = anyio.sleep) -> None:
        if batch_size < 1 or max_attempts < 1:
            raise ValueError("batch_size and max_attempts must be at least 1")
        self.model = model
        self.dimensions: int | None = None  # known after the first answer
        self.max_input_tokens = max_input_tokens
        self.prompt_tokens = 0  # what every answer so far cost, as the backend counted it
        self._client = client
        self._batch = batch_size
        self._request_dimensions = request_dimensions
        self._attempts = max_attempts
        self._backoff = max(backoff, MIN_BACKOFF)
        self._sleep = sleep

    @property
    def space(self) -> EmbeddingSpace:
        """What this embedder's vectors are (record it with a vector store)."""
        return EmbeddingSpace(self.model, self.dimensions)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self._batch):
            vectors += await self._embed_batch(list(texts[start:start + self._batch]))
        return vectors

    async def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        for attempt in range(1, self._attempts + 1):
            try:
                vectors, tokens = await self._client.embed(texts, self._request_dimensions)
            except GatewayError as exc:
                if too_long(exc):  # deterministic: never retried
                    raise ContextLengthExceeded(
                        f"A text is longer than the embedding model {self.model!r} takes "
                        f"(about {self.max_input_tokens} tokens): {exc.message}", param="input",
                    ) from exc
                if attempt == self._attempts or not transient(exc):
                    raise
                await self._sleep(self._delay(attempt, exc))
                continue
            checked = [self._unit(v) for v in vectors]
            if len(checked) != len(texts):
                raise UpstreamError(f"The embedding model {self.model!r} answered {len(checked)} "
                                    f"vectors for {len(texts)} texts.")
            self.prompt_tokens += tokens
            return checked
        raise AssertionError("unreachable")  # pragma: no cover - the last attempt returns or raises

    def _delay(self, attempt: int, exc: GatewayError) -> float:
        delay = self._backoff * 2.0 ** (attempt - 1)
        if isinstance(exc, UpstreamRateLimited) and exc.retry_after is not None:
            delay = max(delay, float(exc.retry_after))
        return min(delay, MAX_BACKOFF)

    def _unit(self, vector: list[float]) -> list[float]:
        if self.dimensions is None:
            self.dimensions = len(vector)
        elif len(vector) != self.dimensions:
            raise UpstreamError(f"The embedding model {self.model!r} answered a vector of "
                                f"{len(vector)} values after vectors of {self.dimensions}.")
        norm = math.sqrt(math.fsum(x * x for x in vector))
        if not math.isfinite(norm) or norm == 0.0:
            raise UpstreamError(f"The embedding model {self.model!r} answered a vector that "
                                "cannot be normalised (zero or not finite).")
        return [x / norm for x in vector]


def check_space(vector_store_id: str, recorded: EmbeddingSpace | None,
                current: EmbeddingSpace) -> None:
    """Refuse to search or fill ``vector_store_id`` with vectors of another model or length
    than the ones it holds (``recorded``; ``None``: the store has none yet)."""
    if recorded is None:
        return
    if recorded.model != current.model:
        raise EmbeddingModelChanged(
            f"Vector store {vector_store_id} was embedded with {recorded.model!r}, but the "
            f"gateway's [knowledge] embedding_model is now {current.model!r}: their vectors do not "
            "compare. Set embedding_model back, or create a new vector store with these files.")
    if None not in (recorded.dimensions, current.dimensions) and (
            recorded.dimensions != current.dimensions):
        raise EmbeddingModelChanged(
            f"Vector store {vector_store_id} holds vectors of {recorded.dimensions} values, but "
            f"{current.model!r} now makes vectors of {current.dimensions}: their vectors do not "
            "compare. Create a new vector store with these files.")


def embedder_for(config: GatewayConfig, backend: object) -> UpstreamEmbedder | None:
    """The embedder of ``[knowledge] embedding_model`` (``None`` when unset); ``backend`` is
    that model's live backend (the registry's route for it, built by the caller)."""
    knowledge = config.knowledge
    if knowledge.embedding_model is None:
        return None
    return UpstreamEmbedder(
        knowledge.embedding_model, passthrough(backend), batch_size=knowledge.embedding_batch,
        max_input_tokens=knowledge.max_input_tokens,
        request_dimensions=knowledge.embedding_dimensions,
        max_attempts=config.upstream.max_attempts, backoff=config.upstream.retry_backoff)
