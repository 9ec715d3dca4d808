"""A client's own prompt through the run engine's pieces: no rendering, no output format.

:func:`prepare_completion` does for a raw prompt what :func:`app.engine.generation.prepare`
does for a conversation (capacity check, capabilities, the real context window, an exact
budget where the prompt's tokens are known); the engine then opens and runs it
(:meth:`~app.engine.engine.Engine.start_prepared`: admission slot, failover and retries,
first chunk, cancellation), on a route whose backend is the model's passthrough and whose
format is :class:`RawFormat`: every chunk's text is answer text, with its logprobs.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace

from adapters.base import Capabilities
from adapters.passthrough import Passthrough, passthrough
from app.api.completions.ingest import DEFAULT_MAX_TOKENS, ClientPrompt, CompletionIngest
from app.core import events as ev
from app.core.conversation import Conversation, GenerationParams
from app.core.errors import ContextLengthExceeded, InvalidRequest
from app.core.output import Chunk, Usage
from app.core.prompt import Prompt
from app.engine.generation import ModelRoute, Prepared, check_capabilities, context_window
from app.formats.harmony.vocab import VOCAB_SIZE
from app.formats.parsing.accounting import Accounting


class RawParser:
    """Chunks → ``TextDelta`` (with the chunk's logprobs) and one terminal."""

    def __init__(self, prompt_tokens: int) -> None:
        self._acct = Accounting(prompt_tokens)
        self._done = False

    def feed(self, chunk: Chunk) -> list[ev.Event]:
        if self._done:
            return self._acct.late(chunk)
        out: list[ev.Event] = []
        self._acct.completion_tokens += len(chunk.token_ids) or (1 if chunk.text else 0)
        if chunk.text:  # an end token's empty text (and its logprob) is not part of the answer
            out.append(ev.TextDelta(chunk.text, chunk.logprobs))
        if chunk.usage is not None:
            self._acct.backend = chunk.usage
        if chunk.finish is not None:
            self._done = True
            out += self._acct.hold("length" if chunk.finish.kind == "length" else "stop", chunk)
        return out

    def close(self) -> list[ev.Event]:
        if self._done:
            return self._acct.drain()
        self._done = True
        return [ev.Error("The backend stream ended before the completion finished.",
                         code="stream_truncated")]

    def usage(self) -> Usage:
        return self._acct.usage()


@dataclass(frozen=True, slots=True)
class RawFormat:
    name: str = "raw"

    async def prepare(self) -> None:
        return None

    def render(self, conv: Conversation, params: GenerationParams) -> Prompt:
        raise InvalidRequest("A raw completion has no conversation to render.")

    def parser(self, prompt: Prompt, prompt_tokens: int) -> RawParser:
        return RawParser(prompt_tokens)


class RawBackend:
    """The model's passthrough as the engine's :class:`~adapters.base.Backend`."""

    def __init__(self, kind: str, capabilities: Capabilities, through: Passthrough) -> None:
        self.kind = kind
        self.capabilities = capabilities
        self.passthrough = through

    def stream(self, prompt: Prompt, params: GenerationParams) -> AsyncIterator[Chunk]:
        return self.passthrough.stream(prompt, params)

    async def ready(self) -> bool:
        return True


def _check(route: ModelRoute, raw: ModelRoute, ingest: CompletionIngest,
           prompt: ClientPrompt) -> None:
    """What the passthrough cannot do (400 naming it), and token ids checked against the
    vocabulary where the gateway knows it (a Harmony model's o200k_harmony)."""
    params = ingest.params
    caps = raw.backend.capabilities
    if ingest.logprobs is not None and (not caps.logprobs or ingest.logprobs > caps.max_top_logprobs):
        limit = f"at most {caps.max_top_logprobs}" if caps.logprobs else "not supported"
        raise InvalidRequest(f"logprobs is {limit} on the {route.backend.kind} backend.",
                             param="logprobs")
    check_capabilities(raw, params)
    if route.format.name == "harmony":  # the model's vocabulary is known: check ids here
        for token, _ in params.logit_bias:
            if token >= VOCAB_SIZE:
                raise InvalidRequest(f"Token id {token} is not in this model's vocabulary "
                                     f"(o200k_harmony: 0 to {VOCAB_SIZE - 1}).",
                                     param=f"logit_bias.{token}")
        if isinstance(prompt, tuple) and any(t >= VOCAB_SIZE for t in prompt):
            raise InvalidRequest(f"The prompt has a token id beyond this model's vocabulary "
                                 f"(o200k_harmony: 0 to {VOCAB_SIZE - 1}).", param="prompt")


async def _budget(route: ModelRoute, prompt: Prompt, params: GenerationParams) -> GenerationParams:
    """``max_tokens``: the client's, else the model's configured default, else 16; checked
    against the real window when the prompt's tokens are known (else the backend checks)."""
    max_tokens = params.max_tokens or DEFAULT_MAX_TOKENS
    if prompt.token_ids is None:
        return replace(params, max_tokens=max_tokens)
    window = await context_window(route)
    n_prompt = len(prompt.token_ids)
    room = window - n_prompt
    if room <= 0:
        raise ContextLengthExceeded(f"The prompt is {n_prompt} tokens, which does not fit the "
                                    f"context window of {window} tokens for model "
                                    f"{route.name!r}.", param="prompt")
    if params.max_tokens is not None and params.max_tokens > room:
        raise ContextLengthExceeded(f"The prompt ({n_prompt} tokens) plus max_tokens "
                                    f"({params.max_tokens}) exceeds the context window of "
                                    f"{window} tokens.", param="max_tokens")
    return replace(params, max_tokens=min(max_tokens, room))


def raw_route(route: ModelRoute) -> tuple[ModelRoute, Passthrough]:
    through = passthrough(route.backend)
    caps = replace(through.capabilities, tokenize=False, prompt=True, chat=False)
    backend = RawBackend(route.backend.kind, caps, through)
    return replace(route, backend=backend, format=RawFormat()), through


async def prepare_completion(route: ModelRoute, ingest: CompletionIngest, params: GenerationParams,
                             prompt: ClientPrompt) -> tuple[ModelRoute, Prepared]:
    """Check and budget one prompt (every failure here is an HTTP error)."""
    if route.admission is not None:
        route.admission.check()  # at capacity: refuse before any upstream call
    raw, through = raw_route(route)
    _check(route, raw, ingest, prompt)
    upstream = await through.prompt(prompt, ingest.stop)
    params = await _budget(route, upstream, params)  # the real backend knows its window
    return raw, Prepared(Conversation(()), params, upstream)


@contextlib.contextmanager
def prompt_param() -> Iterator[None]:
    """The backend's own context check (when the engine opens the run) names ``prompt``."""
    try:
        yield
    except ContextLengthExceeded as exc:
        raise ContextLengthExceeded(exc.message, param="prompt") from None
