"""``input_file`` parts → the text the model reads, for any model.

The gateway extracts the text itself (plain text, Markdown, CSV, JSON as UTF-8; PDF with
pypdf) and gives it to the model as an ``input_text`` part framed with the file's name, so
a file works on every backend, chat templates and Harmony alike.  ``file_data`` is taken
(base64, or a ``data:MEDIA;base64,`` URL as the OpenAI SDK sends it); a ``file_id`` of the
Files API has been turned into ``file_data`` before this point (:mod:`.file_ids`).  Not taken:

* ``file_url``: fetching it would let any request make the gateway call any address
  (cloud metadata endpoints, the internal network), and there is no operator allow-list;

Reading is bounded: every format but UTF-8 text is read in a worker process that is killed
when the request's time budget runs out or its client leaves, with its memory capped
(:mod:`app.items.file_jobs`, :mod:`app.items.file_worker`); a PDF also by its pages, any
stream's decompressed size, the drawing commands of each page (forms included) and of the file
(a form counted at each use, nested forms multiplied, before any is parsed), the character-map
entries its fonts build (a font counted at each page and form that uses it), and its drawing
operators (:mod:`app.items.pdf`, :mod:`app.items.pdf_cost`).  A file past a
bound is a 400 naming the part, as are unsupported types, corrupt or encrypted PDFs (a PDF
without a cross-reference table or trailer is read, as viewers read it), PDFs without a text
layer (no OCR here) and files over the limits below.  Every failure of the
decoder is a 400 (:class:`~app.core.errors.InvalidRequest`), never a 500.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from app.core.errors import InvalidRequest
from app.items.file_jobs import isolated

MAX_FILE_BYTES = 10 * 1024 * 1024  # decoded size of one file
MAX_PDF_PAGES = 500
MAX_TEXT_CHARS = 1_000_000  # extracted text of one file
MAX_PAGE_CONTENT = 2 * 1024 * 1024  # decompressed drawing commands of one page
MAX_CONTENT = 8 * 1024 * 1024  # ... of all pages of one file (~4.5 s of parsing at worst)
MAX_OPERATORS = 1_000_000  # drawing operators of one file
MAX_STREAM = 16 * 1024 * 1024  # any one stream, decompressed
MAX_FORM_DRAWS = 2_000  # forms drawn while extracting one page
MAX_FONT_ENTRIES = 1_000_000  # character-map entries built (a font at each page / form using it)

CODE = "unsupported_file"
_TEXT_TYPES = {"text/plain": "text", "text/markdown": "text", "text/x-markdown": "text",
               "text/csv": "text", "application/json": "text", "application/pdf": "pdf"}
_EXTENSIONS = {"txt": "text/plain", "text": "text/plain", "md": "text/markdown",
               "markdown": "text/markdown", "csv": "text/csv", "json": "application/json",
               "pdf": "application/pdf"}
SUPPORTED = "text/plain, text/markdown, text/csv, application/json, application/pdf"


def _split_data_url(data: str, param: str) -> tuple[str | None, str]:
    """``data:MEDIA[;params];base64,PAYLOAD`` → (media type, payload); plain base64 as is."""
    if not data.startswith("data:"):
        return None, data
    head, sep, payload = data[5:].partition(",")
    fields = head.split(";")
    if not sep or "base64" not in fields[1:]:
        raise InvalidRequest("input_file file_data must be base64 (a data URL needs ';base64,').",
                             param=f"{param}.file_data", code=CODE)
    return fields[0].strip().lower() or None, payload


def _decode(payload: str, param: str) -> bytes:
    compact = "".join(payload.split())
    if not compact.isascii() or (len(compact) * 3) // 4 > MAX_FILE_BYTES + 3:
        too_big = compact.isascii()
        raise InvalidRequest(
            f"input_file is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB." if too_big
            else "input_file file_data is not base64.", param=f"{param}.file_data", code=CODE)
    try:
        data = base64.b64decode(compact.replace("-", "+").replace("_", "/") + "=" * (-len(compact) % 4),
                                validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest("input_file file_data is not base64.", param=f"{param}.file_data",
                             code=CODE) from None
    if len(data) > MAX_FILE_BYTES:
        raise InvalidRequest(f"input_file is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB.",
                             param=f"{param}.file_data", code=CODE)
    return data


def _media_type(declared: str | None, filename: str | None, data: bytes, param: str) -> str:
    if declared and declared != "application/octet-stream":
        media = declared
    elif filename and "." in filename:
        media = _EXTENSIONS.get(filename.rsplit(".", 1)[1].lower(), "")
    else:
        media = "application/pdf" if data.startswith(b"%PDF-") else ""
    if media not in _TEXT_TYPES:
        shown = media or (f"the file {filename!r}" if filename else "a file without a media type")
        raise InvalidRequest(f"input_file: {shown} is not supported; this gateway reads {SUPPORTED} "
                             "(give a data: URL with the media type, or a filename with its extension).",
                             param=param, code=CODE)
    return media


def _text(data: bytes, param: str) -> str:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InvalidRequest("input_file: a text file must be UTF-8.", param=param, code=CODE) from None
    if "\x00" in text:
        raise InvalidRequest("input_file: the text file contains NUL bytes (binary data?).",
                             param=param, code=CODE)
    return text


def _pdf(data: bytes, param: str) -> tuple[str, int]:
    """The PDF's text and pages, read in the file worker (:mod:`app.items.pdf`)."""
    limits = {"pages": MAX_PDF_PAGES, "page_content": MAX_PAGE_CONTENT, "content": MAX_CONTENT,
              "operators": MAX_OPERATORS, "text_chars": MAX_TEXT_CHARS, "stream": MAX_STREAM,
              "forms": MAX_FORM_DRAWS, "font_entries": MAX_FONT_ENTRIES}
    found = isolated("pdf", data, param, limits)
    return str(found["text"]), int(found["pages"])


def extract(part: dict[str, Any], param: str) -> str:
    """The text the model reads for one ``input_file`` part (wire form); ``param`` names it."""
    if part.get("file_id"):
        raise InvalidRequest("input_file file_id was not read (app/items/file_ids.py runs first).",
                             param=f"{param}.file_id", code=CODE)
    if part.get("file_url"):
        raise InvalidRequest("input_file file_url is not supported: the gateway does not fetch "
                             "URLs for clients; send the file's content as file_data (base64).",
                             param=f"{param}.file_url", code=CODE)
    raw = part.get("file_data")
    if not isinstance(raw, str) or not raw:
        raise InvalidRequest("input_file needs file_data (the file's content in base64).",
                             param=f"{param}.file_data", code="missing_required_parameter")
    filename = part.get("filename") if isinstance(part.get("filename"), str) else None
    declared, payload = _split_data_url(raw, param)
    data = _decode(payload, param)
    media = _media_type(declared, filename, data, param)
    if _TEXT_TYPES[media] == "pdf":
        text, pages = _pdf(data, param)
        about = f"{media}, {pages} page{'s' if pages != 1 else ''}"
    else:
        text, about = _text(data, param), media
    if len(text) > MAX_TEXT_CHARS:
        raise InvalidRequest(f"input_file: the file holds more than {MAX_TEXT_CHARS:,} characters "
                             "of text.", param=param, code=CODE)
    name = filename or "file"
    return f"<file name={name!r} type={about!r}>\n{text}\n</file>"
