"""``POST /v1/completions`` (OpenAI's legacy Completions): the client's own prompt, raw.

The prompt (text or token ids) reaches the model as the client wrote it: control tokens
in it are the client's responsibility; nothing is rendered, escaped or parsed.  Everything
else is the chat endpoint's: auth and the key's model allow-list, the model's route,
limits and admission, failover before the first byte, cancellation when the client leaves,
errors as ``{"error": {...}}``.  A batch of prompts and ``n`` are several choices (prompt
``i``'s ``j``-th answer is choice ``i * n + j``), each its own run merged by
:class:`~app.engine.choices.Choices` (each holds an admission slot; ``[limits] max_n`` caps
them), with ``seed + j`` for the ``j``-th answer to one prompt.
"""

from __future__ import annotations

import time
from dataclasses import replace

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.api.completions import embeddings, tokens
from app.api.completions.encode import CompletionEncoder, merge, total_usage, usage_dict
from app.api.completions.ingest import CompletionIngest, ingest_completion
from app.api.completions.raw import prepare_completion, prompt_param
from app.core.errors import InvalidRequest
from app.core.ids import random_id
from app.engine.choices import Choices
from app.engine.engine import Engine
from app.engine.generation import ModelRoute, Prepared
from app.engine.run import Encoder, Json, Mode, Run
from app.http.auth import check_model, principal
from app.http.body import GatewayRoute
from app.http.disconnect import cancel_on_disconnect
from app.http.responses import JSONResponse
from app.http.sse import data_event
from app.http.streaming import json_answer, sse_response
from schemas.completions import CompletionRequest

router = APIRouter(route_class=GatewayRoute)


class Completion:
    """One request's choices: their encoders, and how each is prepared and opened."""

    def __init__(self, request: Request, ingest: CompletionIngest) -> None:
        self.request = request
        self.ingest = ingest
        self.engine: Engine = request.app.state.engine
        self.id = random_id("cmpl-")
        self.created = int(time.time())
        self.encoders: list[CompletionEncoder] = []

    async def _echo(self, index: int) -> str:
        prompt = self.ingest.prompts[index]
        if not self.ingest.echo:
            return ""
        if isinstance(prompt, str):
            return prompt
        return await tokens.detokenize(self.engine.registry.route(self.ingest.model), prompt, "echo")

    def _encoder(self, index: int, echo: str, usage: bool) -> CompletionEncoder:
        ingest = self.ingest
        enc = CompletionEncoder(self.id, ingest.model, self.created, include_usage=usage,
                                logprobs=ingest.logprobs, echo=echo, stream=ingest.stream,
                                index=index)
        self.encoders.append(enc)
        return enc

    async def one(self) -> Run:
        ingest, engine = self.ingest, self.engine
        route = engine.registry.route(ingest.model)
        params = engine.registry.with_defaults(ingest.model, ingest.params)
        echo = await self._echo(0)
        raw, prepared = await prepare_completion(route, ingest, params, ingest.prompts[0])
        with prompt_param():
            return await engine.start_prepared(ingest.model, raw, prepared,
                                               self._encoder(0, echo, ingest.include_usage), run_id=self.id,
                                               mode="stream" if ingest.stream else "wait",
                                               owner=principal(self.request))

    def _closing(self, runs: list[Run]) -> list[Json]:
        if not self.ingest.include_usage:
            return []
        usage = total_usage(self.encoders, len(self.ingest.prompts))
        return [{"id": self.id, "object": "text_completion", "created": self.created,
                 "model": self.ingest.model, "choices": [], "usage": usage_dict(usage)}]

    async def several(self) -> Choices:
        ingest, engine = self.ingest, self.engine
        route = engine.registry.route(ingest.model)
        base = engine.registry.with_defaults(ingest.model, ingest.params)
        mode: Mode = "stream" if ingest.stream else "wait"
        ready: list[tuple[ModelRoute, Prepared, Encoder]] = []
        for i, prompt in enumerate(ingest.prompts):  # each prompt checked and tokenized once
            raw, prepared = await prepare_completion(route, ingest, base, prompt)
            echo = await self._echo(i)
            for j in range(ingest.n):
                index = i * ingest.n + j
                seed = prepared.params.seed
                params = replace(prepared.params, seed=None if seed is None else seed + j)
                ready.append((raw, replace(prepared, params=params), self._encoder(index, echo, False)))
        with prompt_param():
            return await engine.start_prepared_choices(ingest.model, ready, run_id=self.id, mode=mode,
                                                       owner=principal(self.request), closing=self._closing)


@router.post("/v1/completions")
async def completions(body: CompletionRequest, request: Request) -> Response:
    """OpenAI's legacy Completions. **The prompt is the client's own responsibility**: it is
    sent to the model as it is (control tokens in it are real control tokens) and the answer
    is the model's raw text."""
    ingest = ingest_completion(body)
    check_model(request, ingest.model)
    engine: Engine = request.app.state.engine
    cap = engine.registry.config.limits.max_n
    if ingest.n > cap:
        raise InvalidRequest(f"n may be at most {cap} on this gateway.", param="n")
    if len(ingest.prompts) * ingest.n > cap:
        raise InvalidRequest(f"A batch of prompts times n may be at most {cap} choices on this "
                             "gateway.", param="prompt")
    completion = Completion(request, ingest)
    grace = engine.registry.config.shutdown_grace_seconds
    if len(ingest.prompts) == 1 and ingest.n == 1:
        if not ingest.stream:
            return await json_answer(request, completion.one())
        return sse_response(await cancel_on_disconnect(request, completion.one()), data_event, grace)
    if not ingest.stream:
        async def answer() -> Json:
            choices = await completion.several()
            bodies = await choices.results()
            return merge(sorted(bodies, key=lambda b: b["choices"][0]["index"]),
                         total_usage(completion.encoders, len(ingest.prompts)))

        return JSONResponse(await cancel_on_disconnect(request, answer()))
    return sse_response(await cancel_on_disconnect(request, completion.several()), data_event, grace)


# The other passthrough routes, as routes of this router (not an included router, whose
# routes the error handlers' path tables would not see: a TRACE /tokenize must be a 405).
router.routes.extend([*embeddings.router.routes, *tokens.router.routes])
