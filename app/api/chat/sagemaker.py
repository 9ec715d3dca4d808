"""SageMaker LMI compatibility: ``POST /invocations`` and ``GET /ping``.

A body with ``messages`` is a chat completion (seed 003); streaming answers are JSON
lines (``application/jsonlines``, one ``chat.completion.chunk`` per line, no
``[DONE]``).  A body with ``inputs`` (and no ``messages``) is LMI's standard schema
(:mod:`app.api.chat.lmi`), as on LMI servers, per request on the same endpoint.  ``model``
may be omitted when the gateway serves one model or has a ``default_model``.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Request
from pydantic import ValidationError
from starlette.responses import Response

from app.api.chat.lmi import run_lmi
from app.api.chat.routes import run_chat
from app.core.errors import InvalidRequest
from app.engine.registry import Registry
from app.http.body import GatewayRoute
from app.http.responses import JSONResponse
from schemas.chat import ChatCompletionRequest

router = APIRouter(route_class=GatewayRoute)


@router.get("/ping")
async def ping() -> Response:
    return JSONResponse({"status": "healthy"})


@router.post("/invocations")
async def invocations(request: Request) -> Response:
    registry: Registry = request.app.state.registry
    try:
        data: Any = orjson.loads(await request.body())
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"The request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(data, dict) or ("messages" not in data and "inputs" not in data):
        raise InvalidRequest("/invocations takes a chat completions body ('messages') or LMI's "
                             "standard schema ('inputs', 'parameters').", param="messages")
    if not data.get("model"):
        default = registry.config.default_model or (
            next(iter(registry.routes)) if len(registry.routes) == 1 else None)
        if default is None:
            raise InvalidRequest("model is required: this gateway serves several models.", param="model")
        data["model"] = default
    if "messages" not in data:
        return await run_lmi(data, request)
    try:
        body = ChatCompletionRequest.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        param = ".".join(str(p) for p in err["loc"]) or None
        raise InvalidRequest(f"Invalid value for {param!r}: {err['msg']}", param=param,
                             code="invalid_value") from None
    return await run_chat(body, request, jsonlines=True)
