"""A response format's JSON schema enforced on the answer only (Harmony, chat templates).

A gpt-oss answer reasons first (``analysis``) and answers in a ``final`` message; a template
model may think first (``<think>...</think>``) or call a tool instead of answering; only the
answer must be the schema's JSON.  A backend constrains a whole generation (llama.cpp's
``json_schema`` grammar, vLLM's structured outputs), and the lazy grammars that start at a
trigger differ between llama.cpp versions in what text they feed the grammar, so the
gateway constrains the answer in two requests over token ids:

1. the prompt as rendered, unconstrained, until the format's watch (:class:`AnswerWatch`)
   sees the answer start: Harmony's final message header (``<|channel|>final ...
   <|message|>``), a template's end of reasoning (without tools), or the first text, at the
   start or after the reasoning, that is not a tool call (held back until it is known, then
   dropped); that request is then closed.  A tool call is never constrained, wherever the
   watch finds it (:mod:`app.formats.template.answer`): the model keeps its tools;
2. the prompt plus every token generated so far, with ``json_schema``: everything the model
   writes now is the final message's body, constrained to the schema, ended by the model's
   end token once the JSON is complete.  The backend's prompt cache makes the second prompt
   cost nothing to read again.

Chunks of both go to the one parser as if they were one generation; usage is reported as
one generation (the second request's prompt counts the first one's output).  A prompt that
already opens the final message (a prefill) is constrained from its first token.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from adapters.base import Backend
from app.core.answer import HOLD, RESTART, AnswerWatch, WatchesAnswer
from app.core.conversation import GenerationParams
from app.core.output import Chunk, Finish, Usage
from app.core.prompt import Prompt


def answer_chunks(backend: Backend, fmt: object, prompt: Prompt, params: GenerationParams,
                  schema: dict[str, Any] | None) -> AsyncIterator[Chunk]:
    """The backend's chunks for ``prompt``, with ``schema`` enforced on the answer where
    the format can find it and the backend takes token ids and a JSON schema."""
    if (schema is None or prompt.token_ids is None or prompt.json_schema is not None
            or not isinstance(fmt, WatchesAnswer) or not backend.capabilities.json_schema
            or not backend.capabilities.token_ids):
        return backend.stream(prompt, params)
    watch = fmt.answer_watch(prompt)
    if watch is None:
        return backend.stream(prompt, params)
    if watch.at_start():
        return backend.stream(replace(prompt, json_schema=schema), params)
    return _two_requests(backend, prompt, params, schema, watch)


def _cut(chunk: Chunk, n: int) -> Chunk:
    """The first ``n`` tokens of ``chunk`` (llama.cpp and vLLM send one token per event;
    text follows the ids where it can)."""
    if n >= len(chunk.token_ids):
        return replace(chunk, finish=None, usage=None)
    logprobs = chunk.logprobs[:n] if chunk.logprobs is not None else None
    return Chunk(token_ids=chunk.token_ids[:n], logprobs=logprobs)


async def _two_requests(backend: Backend, prompt: Prompt, params: GenerationParams,
                        schema: dict[str, Any], watch: AnswerWatch) -> AsyncIterator[Chunk]:
    assert prompt.token_ids is not None
    generated: list[int] = []
    held: list[Chunk] = []
    first = backend.stream(prompt, params)
    try:
        async for chunk in first:
            cut = watch.feed(chunk)
            if cut == HOLD and chunk.finish is None:
                held.append(chunk)
                continue
            if cut is None or cut == HOLD:  # passed on (a HOLD at the end: nothing more comes)
                for piece in (*held, chunk):
                    generated += piece.token_ids
                    yield piece
                held = []
                if chunk.finish is not None:
                    return  # ended before any answer (a tool call, the budget, ...)
                continue
            if cut != RESTART:
                assert isinstance(cut, int)
                for piece in (*held, _cut(chunk, cut)):
                    generated += piece.token_ids
                    yield piece
            break
        else:
            for piece in held:
                yield piece
            return
    finally:
        aclose = getattr(first, "aclose", None)
        if aclose is not None:
            await aclose()
    budget = None if params.max_tokens is None else params.max_tokens - len(generated)
    if budget is not None and budget <= 0:
        yield Chunk(finish=Finish("length"),
                    usage=Usage(prompt_tokens=len(prompt.token_ids), completion_tokens=len(generated)))
        return
    second = backend.stream(
        replace(prompt, token_ids=(*prompt.token_ids, *generated), json_schema=schema),
        replace(params, max_tokens=budget))
    try:
        async for chunk in second:
            if chunk.usage is not None:
                u = chunk.usage
                prompt_tokens = max(u.prompt_tokens - len(generated), 0)
                chunk = replace(chunk, usage=replace(
                    u, prompt_tokens=prompt_tokens, completion_tokens=u.completion_tokens + len(generated),
                    cached_tokens=min(u.cached_tokens, prompt_tokens)))
            yield chunk
    finally:
        aclose = getattr(second, "aclose", None)
        if aclose is not None:
            await aclose()
