"""Chat Completions' ``{"type": "file", "file": {...}}`` parts → text parts, before ingest.

A part names a file of the Files API (``file_id``: only the caller's own, else a 404 naming
``messages[i].content[j].file.file_id``) or carries it (``file_data``, base64 or a ``data:``
URL, with ``filename``).  Either way it is read by the same bounded reader as the Responses
API's ``input_file`` (:mod:`app.items.files`; PDFs in a killable worker,
:mod:`app.items.file_jobs`) and the model reads its text, framed with its name."""

from __future__ import annotations

from fastapi import Request

from app.core.errors import GatewayError
from app.http.auth import principal
from app.items import file_jobs, files
from app.items.file_ids import ReadBudget, inline_part
from schemas import chat as wire


def file_parts(body: wire.ChatCompletionRequest) -> list[tuple[int, int]]:
    """(message, part) of every file part of ``body``'s user messages."""
    return [(i, j) for i, m in enumerate(body.messages) if isinstance(m, wire.UserMessage)
            and isinstance(m.content, list)
            for j, part in enumerate(m.content) if isinstance(part, wire.FileContentPart)]


def has_file_parts(body: wire.ChatCompletionRequest) -> bool:
    return any(isinstance(m, wire.UserMessage) and isinstance(m.content, list)
               and any(isinstance(part, wire.FileContentPart) for part in m.content) for m in body.messages)


async def read_files(body: wire.ChatCompletionRequest, request: Request) -> None:
    """Replace every file part of ``body``'s user messages by the text the model reads."""
    found = file_parts(body)
    if not found:
        return
    service = getattr(request.app.state, "files", None)
    store = None if service is None else service.store
    owner, budget = principal(request).tenant, ReadBudget()
    for i, j in found:
        message = body.messages[i]
        assert isinstance(message, wire.UserMessage) and isinstance(message.content, list)
        part = message.content[j]
        assert isinstance(part, wire.FileContentPart)
        where = f"messages[{i}].content[{j}].file"
        given = {"type": "input_file", **part.file.model_dump(exclude_none=True)}
        if given.get("file_id"):
            given = await inline_part(given, store, owner, where, budget)
        try:
            text = await file_jobs.run(lambda g=given, w=where: files.extract(g, w))  # type: ignore[misc]
        except GatewayError as exc:  # the reader names input_file's fields; these are file.*
            if exc.param and exc.param.endswith(".file_data") and not part.file.file_data:
                exc.param = f"{where}.file_id"
            raise
        message.content[j] = wire.TextContentPart(type="text", text=text)
