"""What an operator watches: ``/admin/usage`` (per key × model over time), ``/admin/models``
(each model's prompt format, context window and upstream replicas: in flight, cooldown),
``/admin/runs`` (runs in flight in this replica; cancel one, on any replica when Redis is
shared), ``/admin/errors`` (this replica's recent errors with their request ids).

With ``serve --workers N`` runs, errors and models (replicas' in flight and cooldown, admission)
are every worker's, gathered through the metrics relay's views and merged
(:mod:`app.api.admin.live`); each answer then says ``workers``: how many answered within the
relay's deadline, how many are connected.  Usage reads the store once every worker of this
``serve`` has flushed its counts (asked through the machine's signal hub,
:mod:`app.engine.machine_asks`, for at most :data:`FLUSH_SECONDS`; ``workers`` says how many
did), so it is exact for the machine; another replica's counts (Redis, PostgreSQL) show after
that replica's next flush (``[usage] flush_seconds``).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import httpx
from fastapi import APIRouter, Depends, Query, Request

from app.api.admin.auth import require_admin
from app.api.admin.live import merge_errors, merge_models, model_rows
from app.core.errors import InvalidRequest, NotFound
from app.engine.engine import Engine
from app.engine.machine_signals import MachineSignals
from app.engine.registry import Registry
from app.http.machine_metrics import MachineMetrics, run_rows
from app.http.usage import UsageRecorder
from app.stores.accounts import AccountStore, UsageRow

Json = dict[str, Any]
router = APIRouter(prefix="/admin", tags=["admin"], dependencies=[Depends(require_admin)])
GROUPS = ("key", "model", "hour", "day")
MAX_RANGE = 400 * 86400
LATEST = 253_402_300_799  # 9999-12-31T23:59:59Z
FLUSH_SECONDS = 2.0  # /admin/usage waits this long at most for the other workers' flushes


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
    rows, kept ``[usage] hourly_days``).  Includes the counts not flushed yet of this replica
    (every worker of its ``serve``)."""
    groups = [g.strip() for g in group_by.split(",") if g.strip()]
    if not groups or any(g not in GROUPS for g in groups) or {"hour", "day"} <= set(groups):
        raise InvalidRequest("group_by takes key, model and one of hour / day, comma-separated.",
                             param="group_by")
    now = time.time()
    start, end = _time(from_, now - 7 * 86400, "from"), _time(to, now + 1, "to")
    if end <= start or end - start > MAX_RANGE:
        raise InvalidRequest("from must be before to, at most 400 days apart.", param="from")
    grain: Literal["hour", "day"] = "hour" if "hour" in groups else "day"
    workers = await _flush_workers(request)
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
    return {"object": "list", "grain": grain, "from": start, "to": end, "group_by": groups, "data": data,
            **workers}


async def _flush_workers(request: Request) -> Json:
    """With ``serve --workers N`` (no Redis): every other worker flushes its usage counts now;
    ``{"workers": {answered, connected}}`` (the hub away: this worker's alone, 1 and 0)."""
    signals = getattr(getattr(request.app.state, "responses", None), "signals", None)
    if not isinstance(signals, MachineSignals):
        return {}
    try:
        answered, asked = await signals.everywhere(["usage"], within=FLUSH_SECONDS)
    except (OSError, TimeoutError):
        return {"workers": {"answered": 1, "connected": 0}}
    return {"workers": {"answered": 1 + answered, "connected": 1 + asked}}


def _safe_url(url: str) -> str:
    """An upstream URL without credentials in it."""
    parsed = httpx.URL(url)
    return str(parsed.copy_with(username=None, password=None)) if parsed.userinfo else url


def _machine(request: Request) -> MachineMetrics | None:
    """The metrics relay's worker side with ``serve --workers N`` (app/http/machine_metrics.py)."""
    return getattr(request.app.state, "machine_metrics", None)


async def _view(request: Request, name: str, own: list[Any]) -> tuple[list[Any], Json]:
    """Every worker's rows of view ``name`` with ``serve --workers N`` (and how many answered),
    else this worker's ``own``."""
    machine = _machine(request)
    if machine is None:
        return own, {}
    rows, answered, connected = await machine.view(name)
    return rows, {"workers": {"answered": answered, "connected": connected}}


@router.get("/models")
async def models(request: Request) -> Json:
    registry: Registry = request.app.state.registry
    rows, workers = await _view(request, "models", model_rows(registry) if _machine(request) is None else [])
    replicas, admission = merge_models(rows)
    data = []
    for name, route in registry.routes.items():
        cfg = registry.config.models[name]
        pool = getattr(route.backend, "pool", None)
        listed = []
        for r in (pool.replicas if pool is not None else []):
            in_flight, cooldown = replicas.get((name, r.url), (0, 0.0))
            listed.append({"url": _safe_url(r.url), "in_flight": in_flight,
                           "cooldown_seconds": round(cooldown, 1), "healthy": cooldown <= 0})
        data.append({"id": name, "backend": cfg.backend, "prompt_format": cfg.prompt_format,
                     "context_window": route.context_window, "replicas": listed})
    return {"object": "list", "data": data, "admission": admission, **workers}


@router.get("/runs")
async def runs(request: Request) -> Json:
    own = run_rows(request.app.state.engine) if _machine(request) is None else []
    data, workers = await _view(request, "runs", own)
    return {"object": "list", "data": sorted(data, key=lambda r: -float(r["age_seconds"])), **workers}


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
    own = list(request.app.state.recent_errors) if _machine(request) is None else []
    rows, workers = await _view(request, "errors", own)
    return {"object": "list", "data": merge_errors(rows, limit), **workers}
