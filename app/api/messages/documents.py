"""Anthropic ``document`` blocks → text blocks, and ``url`` image sources → inline images,
before ingest.

A document sits in a user message's content or in a ``tool_result``'s.  Its ``source``:

* ``base64`` (``application/pdf``, or any type the reader takes) and ``text``
  (``text/plain``, the text itself) are read by the same bounded reader as the Responses API's
  ``input_file`` (:mod:`app.items.files`: PDFs in a killable worker, :mod:`app.items.file_jobs`;
  its size, page and text limits; a corrupt, encrypted or image-only PDF is a 400), and the
  model reads the text framed with the document's ``title`` (and ``context`` after it);
* ``content`` (a string or text blocks: a custom-chunked document) is taken as its text;
* ``file`` names a file of the gateway's Files API: only the caller's own (else a 404), read
  the same way;
* ``url`` is fetched under the operator's ``[media]`` allow-list and SSRF rules
  (:mod:`app.api.messages.fetch`; by default none: a 400), then read the same way.

An ``image`` with a ``url`` source is fetched the same way (up to the image size limit) and
becomes an inline image, checked as any other (:func:`app.core.media.check_image_url`).
Everything here stays text or image of the user's turn: inert, never a control token.
"""

from __future__ import annotations

import base64
from urllib.parse import urlsplit

from fastapi import Request

from app.api.messages.fetch import fetch
from app.config import MediaSettings
from app.core.errors import InvalidRequest
from app.core.media import MAX_IMAGE_BYTES
from app.http.auth import principal
from app.items import file_jobs, files
from app.items.file_ids import ReadBudget, inline_part
from schemas import messages as wire

CODE = "unsupported_file"
Block = wire.TextBlock | wire.ImageBlock | wire.ToolReferenceBlock | wire.DocumentBlock


def _needs_reading(block: object) -> bool:
    return isinstance(block, wire.DocumentBlock) or (
        isinstance(block, wire.ImageBlock) and isinstance(block.source, wire.URLSource))


def has_sources(body: wire.MessagesRequest | wire.CountTokensRequest) -> bool:
    return any(_needs_reading(b) or (isinstance(b, wire.ToolResultBlock) and isinstance(b.content, list)
                                     and any(_needs_reading(c) for c in b.content))
               for m in body.messages if isinstance(m.content, list) for b in m.content)


class _Reader:
    def __init__(self, request: Request) -> None:
        self.request = request
        self.budget = ReadBudget()
        self.media: MediaSettings = request.app.state.registry.config.media

    async def image(self, block: wire.ImageBlock, where: str) -> wire.ImageBlock:
        assert isinstance(block.source, wire.URLSource)
        declared, data = await fetch(block.source.url, self.media, MAX_IMAGE_BYTES, f"{where}.source.url")
        self.budget.take(len(data), where)
        source = wire.Base64Source(type="base64", media_type=declared or "image/unknown",
                                   data=base64.b64encode(data).decode())
        return wire.ImageBlock(type="image", source=source)

    async def document(self, doc: wire.DocumentBlock, where: str) -> wire.TextBlock:
        source = doc.source
        name = doc.title or "document"
        if isinstance(source, wire.ContentSource):
            body = source.content if isinstance(source.content, str) else \
                "\n\n".join(b.text for b in source.content)
            if len(body) > files.MAX_TEXT_CHARS:
                raise InvalidRequest(f"{where}: the document holds more than {files.MAX_TEXT_CHARS:,} "
                                     "characters of text.", param=f"{where}.source", code=CODE)
            text = f"<file name={name!r} type='text/plain'>\n{body}\n</file>"
            return wire.TextBlock(type="text", text=text if not doc.context else f"{text}\n{doc.context}")
        part: dict[str, str]
        if isinstance(source, wire.FileSource):
            service = getattr(self.request.app.state, "files", None)
            store = None if service is None else service.store
            part = await inline_part({"type": "input_file", "file_id": source.file_id, "filename": name},
                                     store, principal(self.request).tenant, f"{where}.source", self.budget)
        elif isinstance(source, wire.URLSource):
            declared, data = await fetch(source.url, self.media, files.MAX_FILE_BYTES, f"{where}.source.url")
            self.budget.take(len(data), where)
            filename = doc.title or urlsplit(source.url).path.rsplit("/", 1)[-1] or "document"
            part = {"file_data": f"data:{declared or ''};base64,{base64.b64encode(data).decode()}",
                    "filename": filename}
        elif isinstance(source, wire.PlainTextSource):
            data64 = base64.b64encode(source.data.encode()).decode()
            part = {"file_data": f"data:{source.media_type};base64,{data64}", "filename": name}
        else:
            part = {"file_data": f"data:{source.media_type};base64,{source.data}", "filename": name}
        given = {"type": "input_file", **part}
        try:
            text = await file_jobs.run(lambda: files.extract(given, f"{where}.source"))
        except InvalidRequest as exc:  # the reader names input_file's fields: point at the source
            if exc.param and exc.param.endswith((".file_data", ".filename")):
                exc.param = f"{where}.source"
            raise
        return wire.TextBlock(type="text", text=text if not doc.context else f"{text}\n{doc.context}")

    async def block(self, block: Block, where: str) -> Block:
        if isinstance(block, wire.DocumentBlock):
            return await self.document(block, where)
        if isinstance(block, wire.ImageBlock) and isinstance(block.source, wire.URLSource):
            return await self.image(block, where)
        return block


async def read_documents(body: wire.MessagesRequest | wire.CountTokensRequest, request: Request) -> None:
    """Replace every ``document`` block of ``body`` by a text block the model reads, and every
    ``url`` image source by the image's bytes."""
    if not has_sources(body):
        return
    reader = _Reader(request)
    for i, m in enumerate(body.messages):
        if not isinstance(m.content, list):
            continue
        for j, block in enumerate(m.content):
            where = f"messages[{i}].content[{j}]"
            if isinstance(block, wire.ToolResultBlock) and isinstance(block.content, list):
                for k, part in enumerate(block.content):
                    block.content[k] = await reader.block(part, f"{where}.content[{k}]")
            elif _needs_reading(block):
                if m.role != "user":
                    raise InvalidRequest(f"{where} is a {block.type} block, which only user messages "
                                         "may hold.", param=f"{where}.type")
                if isinstance(block, wire.DocumentBlock):
                    m.content[j] = await reader.document(block, where)
                elif isinstance(block, wire.ImageBlock):
                    m.content[j] = await reader.image(block, where)
