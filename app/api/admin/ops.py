"""What an operator watches: ``/admin/usage`` (per key × model over time), ``/admin/models``
(each model's prompt format, context window and upstream replicas: in flight, cooldown),
``/admin/runs`` (runs in flight in this replica; cancel one, on any replica when Redis is
shared), ``/admin/errors`` (this replica's recent errors with their request ids).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import httpx
from fastapi import APIRouter, Depends, Query, Request

from app.api.admin.auth import require_admin
from app.core.errors import InvalidRequest, NotFound
from app.engine.engine import Engine
from app.engine.registry import Registry
from app.http.machine_metrics import run_rows
from app.http.usage import UsageRecorder
from app.stores.accounts import AccountStore, UsageRow

Json = dict[str, Any]
router = APIRouter(prefix="/admin", tags=["admin"], dependencies=[Depends(require_admin)])
GROUPS = ("key", "model", "hour", "day")
MAX_RANGE = 400 * 86400
LATEST = 253_402_300_799  # 9999-12-31T23:59:59Z


def _time(value: str | None, default: float, param: str) -> int:
    """Unix seconds, or an ISO 8601 date / time (UTC unless it says otherwise)."""
    if value is None or value == "":
        return int(default)
    if value.isascii() and value.isdigit():  # not "²", which isdigit() too
        seconds = int(value)
    else:
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise InvalidRequest(f"{param} must be Unix seconds or an ISO 8601 date.",
                                 param=param) from None
        seconds = int((parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp())
    if not 0 <= seconds <= LATEST:
        raise InvalidRequest(f"{param} must be between 1970 and 9999 (Unix seconds 0 to {LATEST}).",
                             param=param)
    return seconds


@router.get("/usage")
async def usage(request: Request, key: str | None = None, model: str | None = None,
                from_: Annotated[str | None, Query(alias="from", max_length=40)] = None,
                to: Annotated[str | None, Query(max_length=40)] = None,
                group_by: Annotated[str, Query(max_length=40)] = "key,model,day") -> Json:
    """Rows summed by ``group_by`` (any of key, model, hour, day; ``hour`` reads the hourly
    rows, kept ``[usage] hourly_days``).  Includes this replica's counts not flushed yet."""
    groups = [g.strip() for g in group_by.split(",") if g.strip()]
    if not groups or any(g not in GROUPS for g in groups) or {"hour", "day"} <= set(groups):
        raise InvalidRequest("group_by takes key, model and one of hour / day, comma-separated.",
                             param="group_by")
    now = time.time()
    start, end = _time(from_, now - 7 * 86400, "from"), _time(to, now + 1, "to")
    if end <= start or end - start > MAX_RANGE:
        raise InvalidRequest("from must be before to, at most 400 days apart.", param="from")
    grain: Literal["hour", "day"] = "hour" if "hour" in groups else "day"
    recorder: UsageRecorder | None = getattr(request.app.state, "usage", None)
    if recorder is not None:
        await recorder.flush()
    store: AccountStore = request.app.state.accounts
    step = 3600 if grain == "hour" else 86400
    rows = await store.usage(grain, start // step * step, end, key=key, model=model)
    sums: dict[tuple[object, ...], UsageRow] = {}
    for row in rows:
        ident = (row.key if "key" in groups else "*", row.model if "model" in groups else "*",
                 row.bucket if grain in groups else 0)
        total = sums.get(ident)
        if total is None:
            total = sums[ident] = UsageRow(grain, int(ident[2]), str(ident[0]), str(ident[1]))
        total.add(row)
    data = []
    for total in sums.values():
        out = total.to_json()
        for group in ("key", "model"):
            if group not in groups:
                out.pop(group)
        if grain not in groups:
            out.pop("start")
        data.append(out)
    return {"object": "list", "grain": grain, "from": start, "to": end, "group_by": groups, "data": data}


def _safe_url(url: str) -> str:
    """An upstream URL without credentials in it."""
    parsed = httpx.URL(url)
    return str(parsed.copy_with(username=None, password=None)) if parsed.userinfo else url


@router.get("/models")
async def models(request: Request) -> Json:
    registry: Registry = request.app.state.registry
    now = time.monotonic()
    data = []
    for name, route in registry.routes.items():
        cfg = registry.config.models[name]
        pool = getattr(route.backend, "pool", None)
        replicas = [{"url": _safe_url(r.url), "in_flight": r.outstanding,
                     "cooldown_seconds": round(max(0.0, r.cooldown_until - now), 1),
                     "healthy": r.cooldown_until <= now}
                    for r in (pool.replicas if pool is not None else [])]
        data.append({"id": name, "backend": cfg.backend, "prompt_format": cfg.prompt_format,
                     "context_window": route.context_window, "replicas": replicas})
    admission = registry.admission
    return {"object": "list", "data": data,
            "admission": {"in_flight": admission.inflight, "queued": admission.queued}}


@router.get("/runs")
async def runs(request: Request) -> Json:
    machine = getattr(request.app.state, "machine_metrics", None)
    if machine is not None:  # serve --workers N: every worker's runs (app/http/machine_metrics.py)
        data, _, _ = await machine.view("runs")
    else:
        data = run_rows(request.app.state.engine)
    return {"object": "list", "data": sorted(data, key=lambda r: -float(r["age_seconds"]))}


@router.post("/runs/{run_id}/cancel")
async def cancel(request: Request, run_id: str) -> Json:
    engine: Engine = request.app.state.engine
    run = engine.find(run_id)
    if run is not None:
        run.cancel()
        await run.finished(within=5)
        return {"id": run_id, "cancelled": True, "where": "here"}
    signals = request.app.state.responses.signals
    if signals.shared:  # maybe on another replica: it stops within a second if it is
        await signals.cancel(run_id)
        return {"id": run_id, "cancelled": True, "where": "published"}
    raise NotFound(f"No run {run_id!r} in flight.", param="run_id")


@router.get("/errors")
async def errors(request: Request, limit: Annotated[int, Query(ge=1, le=200)] = 50) -> Json:
    recent = list(request.app.state.recent_errors)[-limit:]
    return {"object": "list", "data": recent[::-1]}
