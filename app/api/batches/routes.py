"""The Batch API's routes (``/v1/batches``), each scoped to the caller's key: create (the
input file must be the key's own ``batch`` file), list (newest first), retrieve, cancel.
The work happens in the background (:class:`app.batches.runner.BatchRunner`)."""

from __future__ import annotations

import time

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from app.batches.model import WINDOW, Batch, BatchStore, new_batch_id
from app.batches.runner import BatchRunner
from app.core.errors import InvalidRequest, NotFound
from app.http.auth import api_key, principal
from app.http.responses import JSONResponse
from app.knowledge.files import FileStore
from schemas.batches import CreateBatchBody

router = APIRouter()


def _store(request: Request) -> BatchStore:
    store: BatchStore = request.app.state.batches
    return store


def _missing(batch_id: str) -> NotFound:
    return NotFound(f"No batch found with id '{batch_id[:80]}'.", param="batch_id")


@router.post("/v1/batches")
async def create_batch(body: CreateBatchBody, request: Request) -> Response:
    who, key = principal(request), api_key(request)
    files: FileStore = request.app.state.files.store
    found = await files.get(body.input_file_id, who.tenant)
    if found is None:
        raise NotFound(f"No such File object: {body.input_file_id[:80]}", param="input_file_id")
    if found.purpose != "batch":
        raise InvalidRequest(f"The file {found.id} has purpose {found.purpose!r}; a batch's input "
                             "file must be uploaded with purpose 'batch'.", param="input_file_id")
    now = int(time.time())
    batch = Batch(new_batch_id(), who.tenant, None if key is None else key.sha256, body.endpoint,
                  found.id, now, now + WINDOW, metadata=body.metadata,
                  output_expires_after=(None if body.output_expires_after is None
                                        else body.output_expires_after.seconds),
                  allowed_models=None if who.models is None else sorted(who.models))
    await _store(request).create(batch)
    runner: BatchRunner | None = request.app.state.batch_runner
    if runner is not None:
        runner.wake()
    return JSONResponse(batch.resource())


@router.get("/v1/batches")
async def list_batches(request: Request, limit: int = Query(20, ge=1, le=100),
                       after: str | None = None) -> Response:
    found = await _store(request).page(principal(request).tenant, limit=limit + 1, after=after)
    if found is None:
        raise _missing(str(after))
    data = [b.resource() for b in found[:limit]]
    return JSONResponse({"object": "list", "data": data,
                         "first_id": data[0]["id"] if data else None,
                         "last_id": data[-1]["id"] if data else None,
                         "has_more": len(found) > limit})


@router.get("/v1/batches/{batch_id}")
async def retrieve_batch(batch_id: str, request: Request) -> Response:
    found = await _store(request).get(batch_id, principal(request).tenant)
    if found is None:
        raise _missing(batch_id)
    return JSONResponse(found.resource())


@router.post("/v1/batches/{batch_id}/cancel")
async def cancel_batch(batch_id: str, request: Request) -> Response:
    """``validating`` / ``in_progress`` → ``cancelling`` (the worker stops the lines in flight,
    writes what completed and ends ``cancelled``); any other status is answered as it is."""
    store = _store(request)
    found = await store.get(batch_id, principal(request).tenant)
    if found is None:
        raise _missing(batch_id)
    if found.status in ("validating", "in_progress"):
        found.status = "cancelling"
        found.times["cancelling_at"] = int(time.time())
        if not await store.update(found, expect=["validating", "in_progress"]):
            found = await store.refresh(found)
        runner: BatchRunner | None = request.app.state.batch_runner
        if runner is not None:
            runner.wake()
    return JSONResponse(found.resource())
