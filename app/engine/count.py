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
"""

from __future__ import annotations

from dataclasses import dataclass

from app.core.conversation import Conversation, GenerationParams
from app.core.errors import ContextLengthExceeded
from app.engine.generation import (
    check_capabilities,
    estimate_tokens,
    prepare,
    prompt_tokens,
    render_tokens,
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
        prompt = await render_tokens(route, conv, params)  # off the loop when it is large
    exact = prompt_tokens(prompt)
    return TokenCount(exact, True) if exact is not None else TokenCount(estimate_tokens(prompt), False)
