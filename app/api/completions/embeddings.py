"""``POST /v1/embeddings``: passed through to the model's backend where it has embeddings.

vLLM, OpenAI-compatible servers and llama.cpp (started with ``--embeddings``) get their
``/v1/embeddings``; Ollama its ``/api/embed``.  The gateway always asks for floats and
encodes ``encoding_format: "base64"`` itself (little-endian float32, what the OpenAI SDK
asks for by default), so every backend answers both.  A backend without embeddings (an
endpoint that answers 404 / 405 / 501, e.g. llama.cpp without ``--embeddings``) is a 400
``unsupported_endpoint`` naming ``model``: it is a property of the model, and SDKs do not
retry a 4xx.
"""

from __future__ import annotations

import base64
import struct
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from adapters.passthrough import passthrough
from app.api.completions.ingest import prompts
from app.core.errors import InvalidRequest
from app.engine.registry import Registry
from app.http.auth import check_model
from app.http.body import GatewayRoute
from app.http.disconnect import cancel_on_disconnect
from app.http.responses import JSONResponse
from schemas.completions import EmbeddingRequest

router = APIRouter(route_class=GatewayRoute)

MAX_INPUTS = 2048  # OpenAI's limit per request


def _encode(vector: list[float], fmt: str) -> list[float] | str:
    if fmt == "float":
        return vector
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()


@router.post("/v1/embeddings")
async def embeddings(body: EmbeddingRequest, request: Request) -> Response:
    """OpenAI's Embeddings, passed to the model's backend; a backend without embeddings is a
    400 ``unsupported_endpoint`` naming ``model``."""
    registry: Registry = request.app.state.registry
    check_model(request, body.model)
    route = registry.lookup(body.model)  # a model of any kind: chat models embed too
    try:
        items = prompts(body.input)
    except InvalidRequest as exc:
        raise InvalidRequest(exc.message.replace("prompt", "input"),
                             param=(exc.param or "prompt").replace("prompt", "input")) from None
    if len(items) > MAX_INPUTS:
        raise InvalidRequest(f"input may hold at most {MAX_INPUTS} items.", param="input")
    inputs: list[Any] = [i if isinstance(i, str) else list(i) for i in items]
    vectors, prompt_tokens = await cancel_on_disconnect(
        request, passthrough(route.backend).embed(inputs, body.dimensions))
    data = [{"object": "embedding", "index": i, "embedding": _encode(v, body.encoding_format)}
            for i, v in enumerate(vectors)]
    return JSONResponse({"object": "list", "data": data, "model": body.model,
                         "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}})
