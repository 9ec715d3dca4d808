"""``POST /tokenize`` and ``POST /detokenize`` in vLLM's shapes.

Request ``{"model", "prompt", "add_special_tokens", "return_token_strs"}`` → ``{"count",
"max_model_len", "tokens", "token_strs"}``; ``{"model", "tokens"}`` → ``{"prompt"}``.
A Harmony model is tokenized by the gateway's own o200k_harmony (the ids it sends
upstream; special tokens in the text are parsed, as vLLM does); other models by their
backend: llama.cpp's ``/tokenize`` / ``/detokenize``, vLLM's own.  Ollama and
OpenAI-compatible backends have none: a 400 naming ``model``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from fastapi import APIRouter, Request
from starlette.responses import Response

from adapters.passthrough import NotSupported, passthrough
from app.core.errors import InvalidRequest
from app.engine.generation import ModelRoute, context_window
from app.engine.registry import Registry
from app.formats.harmony.text import encode_text
from app.formats.harmony.vocab import VOCAB_SIZE, harmony_encoding
from app.http.auth import check_model
from app.http.body import GatewayRoute
from app.http.responses import JSONResponse
from schemas.completions import DetokenizeRequest, TokenizeRequest

router = APIRouter(route_class=GatewayRoute)


def _harmony(route: ModelRoute) -> bool:
    return route.format.name == "harmony"


async def tokenize(route: ModelRoute, text: str, add_special: bool, pieces: bool,
                   ) -> tuple[list[int], list[str] | None]:
    if _harmony(route):  # o200k_harmony adds no BOS / EOS
        enc = harmony_encoding()
        def work() -> tuple[list[int], list[str] | None]:
            ids = encode_text(enc, text, allowed_special="all")
            return ids, [enc.decode([i]) for i in ids] if pieces else None

        return await asyncio.to_thread(work) if len(text) > 16_384 else work()
    return await passthrough(route.backend).tokenize(text, add_special, pieces)


async def detokenize(route: ModelRoute, ids: Sequence[int], param: str) -> str:
    if _harmony(route):
        if any(i >= VOCAB_SIZE for i in ids):
            raise InvalidRequest(f"A token id is beyond this model's vocabulary (o200k_harmony: "
                                 f"0 to {VOCAB_SIZE - 1}).", param=param)
        return str(harmony_encoding().decode(list(ids)))
    try:
        return await passthrough(route.backend).detokenize(ids)
    except NotSupported as exc:
        raise NotSupported(exc.message, param=param) from None


def _route(request: Request, model: str) -> ModelRoute:
    registry: Registry = request.app.state.registry
    check_model(request, model)
    return registry.route(model)


@router.post("/tokenize")
async def tokenize_route(body: TokenizeRequest, request: Request) -> Response:
    """vLLM's ``/tokenize``: the model's token ids for ``prompt`` (special tokens parsed)."""
    route = _route(request, body.model)
    ids, strs = await tokenize(route, body.prompt, body.add_special_tokens, body.return_token_strs)
    return JSONResponse({"count": len(ids), "max_model_len": await context_window(route),
                         "tokens": ids, "token_strs": strs})


@router.post("/detokenize")
async def detokenize_route(body: DetokenizeRequest, request: Request) -> Response:
    """vLLM's ``/detokenize``: the text of ``tokens``."""
    route = _route(request, body.model)
    return JSONResponse({"prompt": await detokenize(route, body.tokens, "tokens")})
