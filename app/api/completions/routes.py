"""``POST /v1/completions`` (OpenAI's legacy Completions): the client's own prompt, raw.

The prompt (text or token ids) reaches the model as the client wrote it: control tokens
in it are the client's responsibility; nothing is rendered, escaped or parsed.  Everything
else is the chat endpoint's: auth and the key's model allow-list, the model's route,
limits and admission, failover before the first byte, cancellation when the client leaves,
errors as ``{"error": {...}}``.  One prompt per request and ``n = 1`` (a 400 naming
``prompt`` / ``n`` otherwise).
"""

from __future__ import annotations

import time

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.api.completions import embeddings, tokens
from app.api.completions.encode import CompletionEncoder
from app.api.completions.ingest import CompletionIngest, ingest_completion
from app.api.completions.raw import open_completion
from app.core.errors import InvalidRequest
from app.core.ids import random_id
from app.engine.engine import Engine
from app.engine.run import Run
from app.http.auth import check_model, principal
from app.http.body import GatewayRoute
from app.http.disconnect import cancel_on_disconnect
from app.http.sse import data_event
from app.http.streaming import json_answer, sse_response
from schemas.completions import CompletionRequest

router = APIRouter(route_class=GatewayRoute)


async def _start(request: Request, ingest: CompletionIngest, completion_id: str) -> Run:
    engine: Engine = request.app.state.engine
    route = engine.registry.route(ingest.model)
    params = engine.registry.with_defaults(ingest.model, ingest.params)
    prompt = ingest.prompts[0]
    echo = ""
    if ingest.echo:
        echo = prompt if isinstance(prompt, str) else await tokens.detokenize(route, prompt, "echo")
    stream, _ = await open_completion(route, ingest, params, prompt)
    encoder = CompletionEncoder(completion_id, ingest.model, int(time.time()),
                                include_usage=ingest.include_usage, logprobs=ingest.logprobs,
                                echo=echo, stream=ingest.stream)
    run = Run(completion_id, ingest.model, principal(request), encoder,
              "stream" if ingest.stream else "wait", None, engine.runs)
    run.begin(stream)
    return run


@router.post("/v1/completions")
async def completions(body: CompletionRequest, request: Request) -> Response:
    """OpenAI's legacy Completions. **The prompt is the client's own responsibility**: it is
    sent to the model as it is (control tokens in it are real control tokens) and the answer
    is the model's raw text. One prompt, ``n = 1``."""
    ingest = ingest_completion(body)
    check_model(request, ingest.model)
    if len(ingest.prompts) > 1:
        raise InvalidRequest("One prompt per request: a batch of prompts is not supported "
                             "(send one request per prompt).", param="prompt")
    completion_id = random_id("cmpl-")
    starting = _start(request, ingest, completion_id)
    if not ingest.stream:
        return await json_answer(request, starting)
    run = await cancel_on_disconnect(request, starting)
    engine: Engine = request.app.state.engine
    return sse_response(run, data_event, engine.registry.config.shutdown_grace_seconds)


# The other passthrough routes, as routes of this router (not an included router, whose
# routes the error handlers' path tables would not see: a TRACE /tokenize must be a 405).
router.routes.extend([*embeddings.router.routes, *tokens.router.routes])
