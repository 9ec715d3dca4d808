"""The Files API's routes (``/v1/files``), each scoped to the caller's API key: upload
(multipart, parsed as it streams: :mod:`app.http.multipart`), list, retrieve, content
(streamed with the type it was uploaded with) and delete."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Query, Request
from starlette.responses import Response, StreamingResponse

from app.api.files.service import FilesService
from app.core.errors import GatewayError, InvalidRequest
from app.http.auth import principal
from app.http.multipart import Upload
from app.http.responses import JSONResponse, error_response
from app.knowledge.files import PURPOSES, SYSTEM_PURPOSES

router = APIRouter()
_UPLOAD_BODY = {"required": True, "content": {"multipart/form-data": {"schema": {
    "type": "object", "required": ["file", "purpose"],
    "properties": {"file": {"type": "string", "format": "binary"},
                   "purpose": {"enum": list(PURPOSES)},
                   "expires_after[anchor]": {"const": "created_at"},
                   "expires_after[seconds]": {"type": "integer", "minimum": 3600,
                                              "maximum": 2592000}}}}}}


def _service(request: Request) -> FilesService:
    service: FilesService = request.app.state.files
    return service


@router.post("/v1/files", openapi_extra={"requestBody": _UPLOAD_BODY})
async def upload_file(request: Request) -> Response:
    """Upload one file (form fields ``file``, ``purpose``, optional ``expires_after``)."""
    service = _service(request)
    upload = Upload(request.stream(), request.headers.get("content-type"), max_file=service.max_bytes,
                    idle_timeout=request.app.state.config.limits.body_timeout)
    try:
        return JSONResponse(await service.upload(upload, principal(request)))
    except GatewayError as exc:
        refused = error_response(exc)
        if not upload.done:  # refused mid-body: close, rather than read the rest to discard it
            refused.headers["connection"] = "close"
        return refused


@router.get("/v1/files")
async def list_files(request: Request, purpose: str | None = None,
                     limit: int = Query(10000, ge=1, le=10000), after: str | None = None,
                     order: Literal["asc", "desc"] = "desc") -> Response:
    """The key's files, newest first (``order=asc``: oldest first), of one ``purpose`` if given."""
    if purpose is not None and purpose not in PURPOSES + SYSTEM_PURPOSES:
        raise InvalidRequest(f"Invalid value for 'purpose': {purpose[:64]!r}.", param="purpose",
                             code="invalid_value")
    data, more = await _service(request).page(principal(request), purpose=purpose, limit=limit,
                                              after=after, ascending=order == "asc")
    return JSONResponse({"object": "list", "data": data,
                         "first_id": data[0]["id"] if data else None,
                         "last_id": data[-1]["id"] if data else None, "has_more": more})


@router.get("/v1/files/{file_id}")
async def retrieve_file(file_id: str, request: Request) -> Response:
    return JSONResponse(await _service(request).get(file_id, principal(request)))


@router.get("/v1/files/{file_id}/content")
async def file_content(file_id: str, request: Request) -> Response:
    """The file's bytes, streamed, with the media type it was uploaded with."""
    meta, chunks = await _service(request).content(file_id, principal(request))
    quoted = meta.filename.replace("\\", "_").replace('"', "_")
    ascii_name = quoted.encode("ascii", "replace").decode().replace("?", "_")
    return StreamingResponse(chunks, media_type=meta.content_type, headers={
        "content-length": str(meta.bytes),
        "content-disposition": f'attachment; filename="{ascii_name}"'})


@router.delete("/v1/files/{file_id}")
async def delete_file(file_id: str, request: Request) -> Response:
    return JSONResponse(await _service(request).delete(file_id, principal(request)))
