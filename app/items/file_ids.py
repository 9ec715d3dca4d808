"""``file_id`` inputs → the stored file's bytes, before the items are resolved.

An ``input_file`` or ``input_image`` part that names a file of the Files API (``/v1/files``)
is replaced, in wire form, by the same part carrying the file's content inline: ``input_file``
gets ``file_data`` (a ``data:`` URL with the type it was uploaded with) and its ``filename``,
``input_image`` gets an ``image_url`` data URL.  From there the usual readers take over: the
bounded file reader (:mod:`.files`: PDFs in a killable worker) and the image checks
(:mod:`app.core.media`), so a stored file is held to exactly the same rules as an inline one.

A file that does not exist, or belongs to another key, is a 404 naming the part's ``file_id``
(``No such File object``, as OpenAI answers); one larger than the reader takes is a 400 naming
it; never a 500.  Only the caller's own files (the request's tenant) are ever read.  A request
reads at most :data:`MAX_REQUEST_BYTES` of stored files in all (a short body naming one large
file a thousand times would otherwise hold gigabytes): past it, a 400 naming the part.
"""

from __future__ import annotations

import base64
from typing import Any

from app.core.errors import InvalidRequest, NotFound
from app.core.media import MAX_IMAGE_BYTES
from app.items.files import MAX_FILE_BYTES
from app.knowledge.files import FileStore, FileTooLarge, read_all

Json = dict[str, Any]
_KINDS = ("input_file", "input_image")
MAX_REQUEST_BYTES = 32 * 1024 * 1024  # stored files read for one request, in all


class ReadBudget:
    """What one request may still read of stored files."""

    def __init__(self, total: int | None = None) -> None:
        self.left = MAX_REQUEST_BYTES if total is None else total

    def take(self, size: int, param: str) -> None:
        if size > self.left:
            raise InvalidRequest(f"{param}: the request's files hold more than "
                                 f"{MAX_REQUEST_BYTES // (1024 * 1024)} MiB in all.",
                                 param=f"{param}.file_id", code="unsupported_file")
        self.left -= size


def has_file_ids(items: list[Json]) -> bool:
    return any(isinstance(part, dict) and part.get("type") in _KINDS and part.get("file_id")
               for item in items for key in ("content", "output")
               if isinstance(item.get(key), list) for part in item[key])


async def inline_part(part: Json, files: FileStore | None, owner: str, param: str,
                      budget: ReadBudget) -> Json:
    """One part with its ``file_id`` read (``param``: the part's name in the request)."""
    file_id = part.get("file_id")
    if not isinstance(file_id, str) or not file_id:
        raise InvalidRequest(f"{param}.file_id must be a file id.", param=f"{param}.file_id")
    image = part.get("type") == "input_image"
    per_file = MAX_IMAGE_BYTES if image else MAX_FILE_BYTES
    limit = min(per_file, budget.left)
    try:
        found = None if files is None else await read_all(files, file_id, owner, limit)
    except FileTooLarge:
        if limit < per_file:  # over what is left of the request's budget: that is the error
            budget.take(budget.left + 1, param)
        raise InvalidRequest(f"{param}: the file {file_id!r} is larger than {per_file // (1024 * 1024)} "
                             "MiB, the most the gateway reads for one input.", param=f"{param}.file_id",
                             code="unsupported_file") from None
    if found is None:
        raise NotFound(f"No such File object: {file_id[:80]}", param=f"{param}.file_id")
    meta, data = found
    budget.take(len(data), param)
    url = f"data:{meta.content_type};base64,{base64.b64encode(data).decode()}"
    rest = {k: v for k, v in part.items() if k != "file_id"}
    if image:
        return {**rest, "image_url": url}
    return {**rest, "file_data": url, "filename": part.get("filename") or meta.filename}


async def inline_file_ids(items: list[Json], files: FileStore | None, owner: str,
                          prefix: str = "input") -> list[Json]:
    """``items`` (request items, ``prefix[i]``) with every ``file_id`` part read; the same
    list when there are none."""
    if not has_file_ids(items):
        return items
    out: list[Json] = []
    budget = ReadBudget()
    for i, item in enumerate(items):
        for key in ("content", "output"):
            parts = item.get(key)
            if not isinstance(parts, list) or not any(
                    isinstance(p, dict) and p.get("type") in _KINDS and p.get("file_id") for p in parts):
                continue
            new = []
            for j, p in enumerate(parts):
                if isinstance(p, dict) and p.get("type") in _KINDS and p.get("file_id"):
                    p = await inline_part(p, files, owner, f"{prefix}[{i}].{key}[{j}]", budget)
                new.append(p)
            item = {**item, key: new}
        out.append(item)
    return out
