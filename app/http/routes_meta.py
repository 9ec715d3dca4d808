"""Operational routes: ``/health`` (liveness), ``/ready`` (backends reachable), ``/metrics``,
and ``/v1/models``, ``/v1/models/{id}`` (in Anthropic's shape when the request carries
``anthropic-version``: the models the key may use, then the aliases of those models)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.responses import Response

from app.engine.registry import Registry
from app.http.anthropic import model_object, model_page
from app.http.auth import check_model, may_use
from app.http.body import GatewayRoute
from app.http.machine_metrics import MachineMetrics
from app.http.responses import JSONResponse

router = APIRouter(route_class=GatewayRoute)


@router.get("/health")
async def health() -> Response:
    return JSONResponse({"status": "ok"})


def _model_card(registry: Registry, name: str) -> dict[str, object]:
    cfg = registry.config.models[name]
    return {"id": name, "object": "model", "created": registry.created, "owned_by": cfg.owned_by,
            "context_window": cfg.context_window}


@router.get("/ready")
async def ready(request: Request) -> Response:
    """200 when every model has a reachable backend replica, else 503 with the details."""
    registry: Registry = request.app.state.registry
    names = list(registry.routes)
    checks = await asyncio.gather(*(registry.routes[n].backend.ready() for n in names))
    models = dict(zip(names, checks, strict=True))
    ok = all(checks)
    return JSONResponse({"status": "ready" if ok else "unavailable", "models": models},
                        status_code=200 if ok else 503)


@router.get("/metrics")
async def prometheus_metrics(request: Request) -> Response:
    # this process's registry; with serve --workers N, every worker's counts added up
    # (app/http/machine_metrics.py)
    machine: MachineMetrics | None = getattr(request.app.state, "machine_metrics", None)
    if machine is not None:
        return Response(await machine.render(), media_type=CONTENT_TYPE_LATEST)
    data = generate_latest(request.app.state.metrics.registry)
    return Response(data, media_type=CONTENT_TYPE_LATEST)


def _anthropic_models(request: Request, registry: Registry) -> list[dict[str, object]]:
    models = [n for n in registry.routes if may_use(request, n)]
    aliases = [(a, m) for a, m in registry.config.aliases.items() if m in models]
    return [*(model_object(n, n, registry.created) for n in models),
            *(model_object(a, m, registry.created) for a, m in aliases)]


@router.get("/v1/models")
async def list_models(request: Request) -> Response:
    registry: Registry = request.app.state.registry
    if "anthropic-version" in request.headers:
        q = request.query_params
        return JSONResponse(model_page(_anthropic_models(request, registry), limit=q.get("limit"),
                                       after_id=q.get("after_id"), before_id=q.get("before_id")))
    return JSONResponse({"object": "list",
                         "data": [_model_card(registry, n) for n in registry.routes if may_use(request, n)]})


@router.get("/v1/models/{model_id:path}")
async def get_model(model_id: str, request: Request) -> Response:
    registry: Registry = request.app.state.registry
    if "anthropic-version" in request.headers:
        model = registry.canonical(model_id)
        check_model(request, model)
        registry.lookup(model)
        return JSONResponse(model_object(model_id, model, registry.created))
    check_model(request, model_id)
    registry.lookup(model_id)
    return JSONResponse(_model_card(registry, model_id))
