"""``GET /health``, ``GET /metrics``, ``GET /v1/models`` and ``GET /v1/models/{id}``."""

from __future__ import annotations

from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.responses import Response

from app.http.auth import check_model, may_use
from app.http.responses import JSONResponse
from app.registry import Registry

router = APIRouter()


@router.get("/health")
async def health() -> Response:
    return JSONResponse({"status": "ok"})


def _model_card(registry: Registry, name: str) -> dict[str, object]:
    cfg = registry.config.models[name]
    return {"id": name, "object": "model", "created": registry.created, "owned_by": cfg.owned_by,
            "context_window": cfg.context_window}


@router.get("/metrics")
async def prometheus_metrics(request: Request) -> Response:
    data = generate_latest(request.app.state.metrics.registry)
    return Response(data, media_type=CONTENT_TYPE_LATEST)


@router.get("/v1/models")
async def list_models(request: Request) -> Response:
    registry: Registry = request.app.state.registry
    return JSONResponse({"object": "list",
                         "data": [_model_card(registry, n) for n in registry.routes if may_use(request, n)]})


@router.get("/v1/models/{model_id:path}")
async def get_model(model_id: str, request: Request) -> Response:
    registry: Registry = request.app.state.registry
    check_model(request, model_id)
    registry.route(model_id)
    return JSONResponse(_model_card(registry, model_id))
