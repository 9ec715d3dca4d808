"""The Files API's rules between the routes and the store: the upload's form fields
(``purpose``, ``expires_after``) checked as OpenAI checks them, default expiry (``batch``
files: 30 days, as OpenAI), pages, and 404s that never tell another key's file exists."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import orjson

from app.core.access import Principal
from app.core.errors import InvalidRequest, NotFound
from app.http.multipart import Upload
from app.knowledge.files import PURPOSES, FileStore, NewFile, StoredFile, content_type

Json = dict[str, Any]
MIN_EXPIRY, MAX_EXPIRY = 3600, 30 * 24 * 3600  # OpenAI's bounds of expires_after.seconds
BATCH_EXPIRY = 30 * 24 * 3600


def missing(file_id: str) -> NotFound:
    return NotFound(f"No such File object: {file_id[:80]}", param="id")


def _purpose(fields: dict[str, str]) -> str:
    purpose = fields.get("purpose")
    if purpose is None:
        raise InvalidRequest("Missing required parameter: 'purpose'.", param="purpose",
                             code="missing_required_parameter")
    if purpose not in PURPOSES:
        raise InvalidRequest(f"Invalid value for 'purpose': {purpose[:64]!r}; supported values are "
                             f"{', '.join(repr(p) for p in PURPOSES)}.", param="purpose",
                             code="invalid_value")
    return purpose


def _expiry(fields: dict[str, str]) -> tuple[str, str] | None:
    """``expires_after`` as the SDK sends it (``expires_after[anchor]`` and
    ``expires_after[seconds]``), or one field holding its JSON object."""
    anchor, seconds = fields.get("expires_after[anchor]"), fields.get("expires_after[seconds]")
    if "expires_after" in fields:
        try:
            given = orjson.loads(fields["expires_after"])
        except orjson.JSONDecodeError:
            given = None
        if not isinstance(given, dict):
            raise InvalidRequest("expires_after must be an object {anchor, seconds}.",
                                 param="expires_after")
        anchor, seconds = given.get("anchor"), given.get("seconds")
        anchor = None if anchor is None else str(anchor)
        seconds = None if seconds is None else str(seconds)
    if anchor is None and seconds is None:
        return None
    if anchor != "created_at":
        raise InvalidRequest("expires_after.anchor must be 'created_at'.", param="expires_after.anchor")
    if seconds is None:
        raise InvalidRequest("Missing required parameter: 'expires_after.seconds'.",
                             param="expires_after.seconds", code="missing_required_parameter")
    return anchor, seconds


def _expires_at(fields: dict[str, str], purpose: str, now: int) -> int | None:
    found = _expiry(fields)
    if found is None:
        return now + BATCH_EXPIRY if purpose == "batch" else None
    raw = found[1].strip()
    if not raw.isdigit() or not MIN_EXPIRY <= int(raw) <= MAX_EXPIRY:
        raise InvalidRequest(f"expires_after.seconds must be an integer from {MIN_EXPIRY} to "
                             f"{MAX_EXPIRY}.", param="expires_after.seconds")
    return now + int(raw)


class FilesService:
    def __init__(self, store: FileStore, max_bytes: int) -> None:
        self.store, self.max_bytes = store, max_bytes

    async def upload(self, upload: Upload, who: Principal) -> Json:
        await upload.until_file()
        if "purpose" in upload.fields:  # sent before the file (as the SDKs do): checked first
            _purpose(upload.fields)
            _expiry(upload.fields)
        if upload.filename is None:
            await upload.rest()
            raise InvalidRequest("Missing required parameter: 'file'.", param="file",
                                 code="missing_required_parameter")

        def describe() -> NewFile:
            purpose = _purpose(upload.fields)
            filename = upload.filename or "upload"
            return NewFile(filename, purpose, content_type(upload.file_type, filename),
                           _expires_at(upload.fields, purpose, int(time.time())))

        stored = await self.store.put(who.tenant, upload.file_chunks(), describe,
                                      max_bytes=self.max_bytes)
        return stored.resource()

    async def get(self, file_id: str, who: Principal) -> Json:
        found = await self.store.get(file_id, who.tenant)
        if found is None:
            raise missing(file_id)
        return found.resource()

    async def content(self, file_id: str, who: Principal) -> tuple[StoredFile, AsyncIterator[bytes]]:
        opened = await self.store.open(file_id, who.tenant)
        if opened is None:
            raise missing(file_id)
        return opened

    async def page(self, who: Principal, *, purpose: str | None, limit: int, after: str | None,
                   ascending: bool) -> tuple[list[Json], bool]:
        found = await self.store.page(who.tenant, purpose=purpose, limit=limit + 1, after=after,
                                      ascending=ascending)
        if found is None:
            raise NotFound(f"No such File object: {str(after)[:80]}", param="after")
        return [f.resource() for f in found[:limit]], len(found) > limit

    async def delete(self, file_id: str, who: Principal) -> Json:
        if not await self.store.delete(file_id, who.tenant):
            raise missing(file_id)
        return {"id": file_id, "object": "file", "deleted": True}
