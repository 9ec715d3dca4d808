"""The Vector Stores API's routes, each scoped to the caller's API key (another key's store,
file or batch is a 404 exactly like a missing one):

* ``/v1/vector_stores``: create, list (``limit`` / ``after`` / ``before`` / ``order``),
  retrieve, update (``name``, ``metadata``, ``expires_after``), delete;
* ``/v1/vector_stores/{id}/files``: add one (``file_id``, ``attributes``,
  ``chunking_strategy``), list (``filter`` by status), retrieve, update ``attributes``, remove,
  ``/content`` (the file's chunks as indexed: ``vector_store.file_content.page``);
* ``/v1/vector_stores/{id}/file_batches``: create (``file_ids`` or ``files``), retrieve,
  cancel, list its files;
* ``POST /v1/vector_stores/{id}/search``: ``vector_store.search_results.page``
  (``rewrite_query`` is accepted; with no rewrite model the query is searched as given).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from app.api.vector_stores.bodies import (
    MAX_QUERIES,
    MAX_QUERY_CHARS,
    CreateBatchBody,
    CreateFileBody,
    CreateStoreBody,
    SearchBody,
    UpdateFileBody,
    UpdateStoreBody,
)
from app.core.errors import InvalidRequest
from app.http.auth import principal
from app.http.body import GatewayRoute
from app.http.responses import JSONResponse
from app.knowledge.catalog import Page, StoreChanges
from app.knowledge.service import Knowledge

router = APIRouter(route_class=GatewayRoute)
Order = Literal["asc", "desc"]
Status = Literal["in_progress", "completed", "failed", "cancelled"]


def _knowledge(request: Request) -> Knowledge:
    found: Knowledge = request.app.state.knowledge
    return found


def _owner(request: Request) -> str:
    return principal(request).tenant


def _list(data: Sequence[Any], more: bool) -> Response:
    items = [d.resource() for d in data]
    return JSONResponse({"object": "list", "data": items,
                         "first_id": items[0]["id"] if items else None,
                         "last_id": items[-1]["id"] if items else None, "has_more": more})


def _page(limit: int, after: str | None, before: str | None, order: Order) -> Page:
    return Page(limit, after, before, order == "asc")


@router.post("/v1/vector_stores")
async def create_store(body: CreateStoreBody, request: Request) -> Response:
    made = await _knowledge(request).create_store(
        _owner(request), name=body.name, metadata=body.metadata, description=body.description,
        expires_after_days=body.expires_after.days if body.expires_after else None,
        file_ids=body.file_ids or (), chunking_strategy=body.chunking_strategy)
    return JSONResponse(made.resource())


@router.get("/v1/vector_stores")
async def list_stores(request: Request, limit: int = Query(20, ge=1, le=100), after: str | None = None,
                      before: str | None = None, order: Order = "desc") -> Response:
    """The key's vector stores, newest first (``order=asc``: oldest first)."""
    data, more = await _knowledge(request).page_stores(_owner(request), _page(limit, after, before, order))
    return _list(data, more)


@router.get("/v1/vector_stores/{vector_store_id}")
async def get_store(vector_store_id: str, request: Request) -> Response:
    return JSONResponse((await _knowledge(request).get_store(_owner(request), vector_store_id)).resource())


@router.post("/v1/vector_stores/{vector_store_id}")
async def update_store(vector_store_id: str, body: UpdateStoreBody, request: Request) -> Response:
    sent = body.model_fields_set
    changes = StoreChanges(body.name, "name" in sent, body.metadata, "metadata" in sent,
                           body.expires_after.days if body.expires_after else None, "expires_after" in sent)
    found = await _knowledge(request).update_store(_owner(request), vector_store_id, changes)
    return JSONResponse(found.resource())


@router.delete("/v1/vector_stores/{vector_store_id}")
async def delete_store(vector_store_id: str, request: Request) -> Response:
    await _knowledge(request).delete_store(_owner(request), vector_store_id)
    return JSONResponse({"id": vector_store_id, "object": "vector_store.deleted", "deleted": True})


@router.post("/v1/vector_stores/{vector_store_id}/search")
async def search(vector_store_id: str, body: SearchBody, request: Request) -> Response:
    queries = body.queries()
    if not 1 <= len(queries) <= MAX_QUERIES or any(not q.strip() or len(q) > MAX_QUERY_CHARS
                                                   for q in queries):
        raise InvalidRequest(f"Invalid 'query': a non-empty string (at most {MAX_QUERY_CHARS} characters) "
                             f"or a list of 1 to {MAX_QUERIES} of them.", param="query", code="invalid_value")
    hits = await _knowledge(request).search(_owner(request), [vector_store_id], queries,
                                            max_num_results=body.max_num_results, filters=body.filters,
                                            ranking_options=body.ranking_options)
    return JSONResponse({"object": "vector_store.search_results.page", "search_query": queries,
                         "data": [{"file_id": h.file_id, "filename": h.filename, "score": h.score,
                                   "attributes": dict(h.attributes),
                                   "content": [{"type": "text", "text": h.text}]} for h in hits],
                         "has_more": False, "next_page": None})


@router.post("/v1/vector_stores/{vector_store_id}/files")
async def add_file(vector_store_id: str, body: CreateFileBody, request: Request) -> Response:
    added = await _knowledge(request).add_file(_owner(request), vector_store_id, body.file_id,
                                               attributes=body.attributes,
                                               chunking_strategy=body.chunking_strategy)
    return JSONResponse(added.resource())


@router.get("/v1/vector_stores/{vector_store_id}/files")
async def list_files(vector_store_id: str, request: Request, limit: int = Query(20, ge=1, le=100),
                     after: str | None = None, before: str | None = None, order: Order = "desc",
                     filter: Status | None = None) -> Response:
    data, more = await _knowledge(request).page_files(_owner(request), vector_store_id,
                                                      _page(limit, after, before, order), status=filter)
    return _list(data, more)


@router.get("/v1/vector_stores/{vector_store_id}/files/{file_id}")
async def get_file(vector_store_id: str, file_id: str, request: Request) -> Response:
    found = await _knowledge(request).get_file(_owner(request), vector_store_id, file_id)
    return JSONResponse(found.resource())


@router.post("/v1/vector_stores/{vector_store_id}/files/{file_id}")
async def update_file(vector_store_id: str, file_id: str, body: UpdateFileBody, request: Request) -> Response:
    found = await _knowledge(request).update_file(_owner(request), vector_store_id, file_id, body.attributes)
    return JSONResponse(found.resource())


@router.delete("/v1/vector_stores/{vector_store_id}/files/{file_id}")
async def remove_file(vector_store_id: str, file_id: str, request: Request) -> Response:
    await _knowledge(request).remove_file(_owner(request), vector_store_id, file_id)
    return JSONResponse({"id": file_id, "object": "vector_store.file.deleted", "deleted": True})


@router.get("/v1/vector_stores/{vector_store_id}/files/{file_id}/content")
async def file_content(vector_store_id: str, file_id: str, request: Request) -> Response:
    """The file's chunks as indexed, in order (none until it is ``completed``)."""
    _, texts = await _knowledge(request).file_content(_owner(request), vector_store_id, file_id)
    return JSONResponse({"object": "vector_store.file_content.page",
                         "data": [{"type": "text", "text": t} for t in texts],
                         "has_more": False, "next_page": None})


@router.post("/v1/vector_stores/{vector_store_id}/file_batches")
async def create_batch(vector_store_id: str, body: CreateBatchBody, request: Request) -> Response:
    files = None if body.files is None else [f.model_dump() for f in body.files]
    made = await _knowledge(request).create_batch(_owner(request), vector_store_id, file_ids=body.file_ids,
                                                  files=files, attributes=body.attributes,
                                                  chunking_strategy=body.chunking_strategy)
    return JSONResponse(made.resource())


@router.get("/v1/vector_stores/{vector_store_id}/file_batches/{batch_id}")
async def get_batch(vector_store_id: str, batch_id: str, request: Request) -> Response:
    found = await _knowledge(request).get_batch(_owner(request), vector_store_id, batch_id)
    return JSONResponse(found.resource())


@router.post("/v1/vector_stores/{vector_store_id}/file_batches/{batch_id}/cancel")
async def cancel_batch(vector_store_id: str, batch_id: str, request: Request) -> Response:
    found = await _knowledge(request).cancel_batch(_owner(request), vector_store_id, batch_id)
    return JSONResponse(found.resource())


@router.get("/v1/vector_stores/{vector_store_id}/file_batches/{batch_id}/files")
async def list_batch_files(vector_store_id: str, batch_id: str, request: Request,
                           limit: int = Query(20, ge=1, le=100), after: str | None = None,
                           before: str | None = None, order: Order = "desc",
                           filter: Status | None = None) -> Response:
    data, more = await _knowledge(request).page_files(_owner(request), vector_store_id,
                                                      _page(limit, after, before, order), status=filter,
                                                      batch_id=batch_id)
    return _list(data, more)
