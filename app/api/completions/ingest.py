"""Legacy Completions request → the client's prompt(s) + :class:`GenerationParams`.

The prompt is the client's own text (or token ids) and goes upstream as it is: control
tokens in it are the client's responsibility, nothing is rendered or made inert.  What
the gateway cannot honour is a 400 naming the parameter (``n``, ``best_of``, ``suffix``,
``echo`` with ``logprobs``).  A batch of prompts and ``n`` are choices: prompt ``i``'s
``j``-th is choice ``i * n + j``.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.core.conversation import GenerationParams
from app.core.errors import InvalidRequest
from app.items.validate import logit_bias, stop_strings
from schemas.completions import CompletionRequest

ClientPrompt = str | tuple[int, ...]

DEFAULT_MAX_TOKENS = 16  # OpenAI's and vLLM's default for legacy completions


@dataclass(frozen=True, slots=True)
class CompletionIngest:
    model: str
    prompts: tuple[ClientPrompt, ...]  # ``n`` choices each (a batch when several)
    n: int
    params: GenerationParams
    stop: tuple[str, ...]  # handed to the backend (there is no reasoning to keep them from)
    stream: bool
    include_usage: bool
    echo: bool
    logprobs: int | None  # alternatives per token, when the client asked for logprobs


def prompts(value: str | list[str] | list[int] | list[list[int]]) -> tuple[ClientPrompt, ...]:
    if isinstance(value, str):
        out: tuple[ClientPrompt, ...] = (value,)
    elif value and all(isinstance(v, int) for v in value):
        out = (tuple(v for v in value if isinstance(v, int)),)
    else:
        out = tuple(v if isinstance(v, str) else tuple(v) for v in value if not isinstance(v, int))
    if not out:
        raise InvalidRequest("prompt must not be an empty list.", param="prompt")
    for i, p in enumerate(out):
        if not p:
            where = "prompt" if len(out) == 1 else f"prompt[{i}]"
            raise InvalidRequest("The prompt is empty.", param=where)
    return out


def ingest_completion(req: CompletionRequest) -> CompletionIngest:
    if req.stream_options is not None and not req.stream:
        raise InvalidRequest("stream_options is only allowed when stream is true.",
                             param="stream_options")
    if req.suffix:
        raise InvalidRequest("suffix (insertion) is not supported.", param="suffix")
    if req.best_of is not None and req.best_of != req.n:
        raise InvalidRequest("best_of is not supported (send several requests).", param="best_of")
    if req.echo and req.logprobs is not None:
        raise InvalidRequest("echo together with logprobs is not supported (the prompt's own "
                             "logprobs are not available).", param="echo")
    stop = stop_strings(req.stop)
    params = GenerationParams(
        max_tokens=req.max_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        seed=req.seed,
        ignore_eos=req.ignore_eos,
        user=req.user,
        frequency_penalty=req.frequency_penalty,
        presence_penalty=req.presence_penalty,
        logprobs=req.logprobs is not None,
        top_logprobs=req.logprobs or 0,
        logit_bias=logit_bias(req.logit_bias),
    )
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    return CompletionIngest(req.model, prompts(req.prompt), req.n, params, stop, req.stream,
                            include_usage, req.echo, req.logprobs)
