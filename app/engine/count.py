"""The prompt a run would send, counted (``POST /v1/responses/input_tokens``): planned like a
run, never opened (:meth:`app.engine.engine.Engine.count`).

The prompt is rendered exactly as :meth:`app.engine.engine.Engine.plan` renders a run's
(the model's configured defaults, its prompt format, ``truncation: auto`` dropping the
oldest turns to fit), then counted:

* Harmony renders token ids in the gateway: the count is exact (o200k_harmony);
* a chat template or OpenChatML on llama.cpp is tokenized by llama.cpp's ``/tokenize``: exact;
* a chat-mode backend (Ollama, OpenAI-compatible) takes messages, and no count of its own
  tokenizer is available to the gateway: the answer is an *estimate* (about 3 characters
  per token), flagged with ``"ocm:estimated": true`` (and the header ``ocm-token-count:
  estimated``), never passed off as exact.

A long conversation (:func:`~app.engine.generation.is_big`) is rendered *and counted* in a
worker thread: only the number comes back to the event loop, and the token ids (700,000 for
100,000 short messages) are freed there a piece at a time (dropping their tuple at once held
the GIL ~10 ms, on the event loop where the count was taken).  A truncated count's prompt is
handed to :func:`~app.core.shed.shed_later` the same way.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from app.core.conversation import Conversation, GenerationParams
from app.core.errors import ContextLengthExceeded
from app.core.prompt import Prompt
from app.core.shed import shed, shed_later
from app.engine.generation import (
    ModelRoute,
    check_capabilities,
    estimate_tokens,
    is_big,
    prepare,
    prompt_tokens,
    render,
    render_tokens,
    tokenize,
)
from app.engine.registry import Registry


@dataclass(frozen=True, slots=True)
class TokenCount:
    tokens: int
    exact: bool

    def body(self) -> dict[str, object]:
        out: dict[str, object] = {"object": "response.input_tokens", "input_tokens": self.tokens}
        if not self.exact:
            out["ocm:estimated"] = True
        return out


async def count_tokens(registry: Registry, model: str, conv: Conversation, params: GenerationParams,
                       *, truncate: bool = False) -> TokenCount:
    route = registry.route(model)
    params = registry.with_defaults(model, params)
    if truncate:
        try:
            prompt = (await prepare(route, conv, params, truncate=True)).prompt
        except ContextLengthExceeded:
            truncate = False  # not even the latest turn fits: count all of it, as it stands
    if not truncate:
        check_capabilities(route, params, conv)
        await route.format.prepare()
        if is_big(conv):
            counted = await asyncio.to_thread(_render_counted, route, conv, params)
            if isinstance(counted, int):
                return TokenCount(counted, True)
            prompt = await tokenize(route, counted)  # the backend counts (llama.cpp /tokenize)
        else:
            prompt = await render_tokens(route, conv, params, big=False)
    exact = prompt_tokens(prompt)
    if prompt.token_ids is not None and len(prompt.token_ids) > _PIECE:
        shed_later(prompt.token_ids)  # freed in pieces off the loop (the tuple's drop only counts down)
    return TokenCount(exact, True) if exact is not None else TokenCount(estimate_tokens(prompt), False)


_PIECE = 10_000  # token ids: a longer prompt's are freed off the event loop


def _render_counted(route: ModelRoute, conv: Conversation, params: GenerationParams) -> Prompt | int:
    """In a worker thread: the number of the prompt's token ids where the gateway renders
    them (Harmony), the ids freed here in pieces; else the prompt, for its backend to count."""
    prompt = render(route, conv, params)
    if prompt.token_ids is None:
        return prompt
    ids = list(prompt.token_ids)  # holds them while the tuple goes (a count down, no frees)
    del prompt
    count = len(ids)
    shed(ids)
    return count
