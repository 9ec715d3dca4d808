"""A ``multipart/form-data`` upload parsed as it arrives, its one file part streamed out.

Starlette's form parser reads the whole body before the route runs (spooling files to disk);
an upload of several hundred MB would be read whole before its size could be refused.  Here
the body is fed to python-multipart's push parser one received chunk at a time, and the file
part's bytes leave as they are parsed (:meth:`Upload.file_chunks`), so a consumer that counts
them (a :class:`~app.knowledge.files.FileStore`'s ``put``) stops the upload the moment it
passes the limit: nothing beyond one received chunk is ever held in memory.

Bounds: the file part (``max_file``; more is :class:`~app.knowledge.files.FileTooLarge`, 413),
the number of parts (:data:`MAX_PARTS`), each form field (:data:`MAX_FIELD` bytes of UTF-8),
each part's headers (count and size, python-multipart's limits), and the whole body
(``max_file`` + :data:`OVERHEAD`: an epilogue after the last boundary is not read forever).
A malformed body, a second file part, a field that is not UTF-8 or a body that ends early is a
400 naming the parameter; never a 500.  An upload may take as long as it needs, but one that
stalls (nothing for ``idle_timeout`` seconds: ``[limits] body_timeout``) is a 408.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header

from app.core.errors import InvalidRequest
from app.knowledge.files import FileTooLarge

MAX_PARTS = 16
MAX_FIELD = 64 * 1024
OVERHEAD = MAX_PARTS * (MAX_FIELD + 8 * 1024) + 64 * 1024  # everything but the file's bytes


def _clean_name(raw: bytes) -> str:
    """The file name a client gave, as a base name of printable characters (≤ 255)."""
    name = raw.decode("utf-8", "replace").replace("\\", "/")
    name = os.path.basename(name)
    name = "".join(c for c in name if c.isprintable()).strip()
    return name[:255] or "upload"


class Upload:
    """One upload's body: form fields as they are parsed, and the one part named ``file``."""

    def __init__(self, body: AsyncIterator[bytes], content_type: str | None, *, max_file: int,
                 idle_timeout: float | None = None) -> None:
        media, options = parse_options_header(content_type or "")
        boundary = options.get(b"boundary")
        if media != b"multipart/form-data" or not boundary or len(boundary) > 200:
            raise InvalidRequest("The body must be multipart/form-data with a 'file' part and a "
                                 "'purpose' field.", param="file")
        self.fields: dict[str, str] = {}
        self.filename: str | None = None
        self.file_type: str | None = None
        self._body, self._max_file, self._max_body = body, max_file, max_file + OVERHEAD
        self._idle = idle_timeout
        self._read = self._parts = self._file_bytes = 0
        self._out: list[bytes] = []
        self._headers: dict[bytes, bytes] = {}
        self._field, self._value = b"", b""
        self._name: str | None = None
        self._buffer = bytearray()
        self._in_file = self._file_done = self._ended = self._exhausted = False
        self._parser = MultipartParser(boundary, {
            "on_part_begin": self._part_begin, "on_part_data": self._part_data,
            "on_part_end": self._part_end, "on_header_field": self._header_field,
            "on_header_value": self._header_value, "on_header_end": self._header_end,
            "on_headers_finished": self._headers_finished, "on_end": self._end})

    # -- the parser's callbacks ----------------------------------------------------------
    def _part_begin(self) -> None:
        self._parts += 1
        if self._parts > MAX_PARTS:
            raise InvalidRequest(f"The form has more than {MAX_PARTS} parts.", param="file")
        self._headers, self._field, self._value, self._buffer = {}, b"", b"", bytearray()

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self._field += data[start:end]

    def _header_value(self, data: bytes, start: int, end: int) -> None:
        self._value += data[start:end]

    def _header_end(self) -> None:
        self._headers[self._field.lower()] = self._value
        self._field, self._value = b"", b""

    def _headers_finished(self) -> None:
        disposition, options = parse_options_header(self._headers.get(b"content-disposition", b""))
        name = options.get(b"name")
        if disposition != b"form-data" or name is None:
            raise InvalidRequest("Every part of the form needs a Content-Disposition with a name.",
                                 param="file")
        self._name = name.decode("utf-8", "replace")
        if self._name == "file":
            if self.filename is not None:
                raise InvalidRequest("The form has more than one 'file' part.", param="file")
            self._in_file = True
            self.filename = _clean_name(options.get(b"filename", b"upload"))
            kind = self._headers.get(b"content-type", b"").decode("latin-1").strip()
            self.file_type = kind or None

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if self._in_file:
            self._file_bytes += end - start
            if self._file_bytes > self._max_file:
                raise FileTooLarge(self._max_file)
            self._out.append(bytes(data[start:end]))
            return
        self._buffer += data[start:end]
        if len(self._buffer) > MAX_FIELD:
            raise InvalidRequest(f"The form field {self._name!r} is longer than {MAX_FIELD} bytes.",
                                 param=self._name)

    def _part_end(self) -> None:
        if self._in_file:
            self._in_file, self._file_done = False, True
            return
        assert self._name is not None
        try:
            self.fields[self._name] = self._buffer.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRequest(f"The form field {self._name!r} is not UTF-8.", param=self._name) from None

    def _end(self) -> None:
        self._ended = True

    # -- reading ------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        """Whether the whole body has been read."""
        return self._exhausted

    async def _step(self) -> bool:
        """Feed the next received chunk; ``False`` once the body has ended (checked whole)."""
        if self._exhausted:
            return False
        try:
            async with asyncio.timeout(self._idle):
                chunk = await anext(self._body, None)
        except TimeoutError:
            raise InvalidRequest(f"The upload stalled: nothing arrived for {self._idle:g} s.",
                                 param="file", status=408, code="request_timeout") from None
        if chunk is None:
            self._exhausted = True
            if not self._ended:
                raise InvalidRequest("The multipart body ended before its closing boundary.",
                                     param="file")
            return False
        self._read += len(chunk)
        if self._read > self._max_body:
            raise FileTooLarge(self._max_file)
        if chunk and not self._ended:
            try:
                self._parser.write(chunk)
            except MultipartParseError as exc:
                raise InvalidRequest(f"The multipart body is malformed ({exc}).", param="file") from None
        return True

    async def until_file(self) -> bool:
        """Parse up to the start of the file part (or the end); whether there is a file."""
        while self.filename is None and await self._step():
            pass
        return self.filename is not None

    async def file_chunks(self) -> AsyncIterator[bytes]:
        """The file part's bytes as they arrive; then the rest of the body is read (the fields
        after the file), so once this ends every field is known."""
        while True:
            if self._out:
                out = b"".join(self._out)
                self._out.clear()
                yield out
            if self._file_done or not await self._step():
                break
        if self._out:  # the last bytes, parsed with the part's end
            out = b"".join(self._out)
            self._out.clear()
            yield out
        while await self._step():
            pass

    async def rest(self) -> None:
        """Read the remainder of the body (a form without a file part)."""
        while await self._step():
            pass
