"""``input_file`` parts → the text the model reads, for any model.

The gateway extracts the text itself (plain text, Markdown, CSV, JSON as UTF-8; PDF with
pypdf) and gives it to the model as an ``input_text`` part framed with the file's name, so
a file works on every backend, chat templates and Harmony alike.  Only ``file_data`` is
taken (base64, or a ``data:MEDIA;base64,`` URL as the OpenAI SDK sends it):

* ``file_id``: this gateway has no Files API;
* ``file_url``: fetching it would let any request make the gateway call any address
  (cloud metadata endpoints, the internal network), and there is no operator allow-list;

Reading is bounded: pages, decompressed drawing commands (per page and per file), drawing
operators and time (:mod:`app.items.file_jobs`); a PDF past a bound is a 400.
Both are a 400 naming the part, as are unsupported types, corrupt or encrypted PDFs (a PDF
without a cross-reference table or trailer is read, as viewers read it), PDFs
without a text layer (no OCR here) and files over the limits below.  Every failure of the
decoder is a 400 (:class:`~app.core.errors.InvalidRequest`), never a 500.
"""

from __future__ import annotations

import base64
import binascii
import io
import logging
import re
from typing import Any

from app.core.errors import InvalidRequest
from app.items.file_jobs import Cancelled, budget

MAX_FILE_BYTES = 10 * 1024 * 1024  # decoded size of one file
MAX_PDF_PAGES = 500
MAX_TEXT_CHARS = 1_000_000  # extracted text of one file
MAX_PAGE_CONTENT = 2 * 1024 * 1024  # decompressed drawing commands of one page
MAX_CONTENT = 8 * 1024 * 1024  # ... of all pages of one file (~4.5 s of parsing at worst)
MAX_OPERATORS = 1_000_000  # drawing operators of one file

CODE = "unsupported_file"
_TEXT_TYPES = {"text/plain": "text", "text/markdown": "text", "text/x-markdown": "text",
               "text/csv": "text", "application/json": "text", "application/pdf": "pdf"}
_EXTENSIONS = {"txt": "text/plain", "text": "text/plain", "md": "text/markdown",
               "markdown": "text/markdown", "csv": "text/csv", "json": "application/json",
               "pdf": "application/pdf"}
SUPPORTED = "text/plain, text/markdown, text/csv, application/json, application/pdf"

logging.getLogger("pypdf").setLevel(logging.ERROR)  # a damaged PDF is the client's 400, not our log


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


_CATALOG = re.compile(rb"(\d{1,10})\s+(\d{1,5})\s+obj\s*<<\s*/Type\s*/Catalog")


def _repaired(data: bytes) -> bytes:
    """``data`` with the end a reader needs: many real PDFs (and the Open Responses compliance
    suite's fixture) have no cross-reference table, no ``startxref`` or no trailer.  A wrong
    ``startxref`` makes pypdf rebuild the table by scanning the objects, as PDF viewers do;
    a missing trailer gets one naming the catalog object."""
    tail = b"\nstartxref\n0\n%%EOF\n"
    if b"trailer" not in data[-65536:]:
        found = _CATALOG.search(data)
        if found is not None:
            tail = b"\ntrailer\n<</Root " + found.group(1) + b" " + found.group(2) + b" R>>" + tail
    return data + tail


def _open_pdf(data: bytes) -> Any:
    import pypdf  # here: only requests with PDFs pay for the import

    try:
        return pypdf.PdfReader(io.BytesIO(data))
    except pypdf.errors.PdfReadError:
        if b"startxref" in data[-2048:]:
            raise
        return pypdf.PdfReader(io.BytesIO(_repaired(data)))


def _check_content(reader: Any, param: str) -> None:
    """Refuse, before parsing any, content streams too big to parse in bounded time (parsing is
    ~0.55 s a MB; a 7 KB bomb inflates to 30 pages of 1.4 MB each)."""
    total = 0
    for i, page in enumerate(reader.pages):
        contents = page.get_contents()
        size = len(contents.get_data()) if contents is not None else 0
        if size > MAX_PAGE_CONTENT:
            raise InvalidRequest(f"input_file: page {i + 1} of the PDF holds {size:,} bytes of drawing "
                                 f"commands; at most {MAX_PAGE_CONTENT:,} are read.", param=param, code=CODE)
        total += size
        if total > MAX_CONTENT:
            raise InvalidRequest(f"input_file: the PDF's pages hold over {MAX_CONTENT:,} bytes of "
                                 "drawing commands; is it built to be costly?", param=param, code=CODE)


def _pdf(data: bytes, param: str) -> tuple[str, int]:
    from pypdf.errors import FileNotDecryptedError

    try:
        reader = _open_pdf(data)
        if reader.is_encrypted and not reader.decrypt(""):
            raise FileNotDecryptedError("password")
        pages = len(reader.pages)
        if pages > MAX_PDF_PAGES:
            raise InvalidRequest(f"input_file: the PDF has {pages} pages; at most {MAX_PDF_PAGES} "
                                 "are read.", param=param, code=CODE)
        _check_content(reader, param)
        job = budget()
        operators = [0]

        def visit(*_: object) -> None:  # every drawing operator: count, and now and then check
            operators[0] += 1
            if operators[0] > MAX_OPERATORS:
                raise InvalidRequest(f"input_file: the PDF has over {MAX_OPERATORS:,} drawing "
                                     "operators; is it built to be costly?", param=param, code=CODE)
            if operators[0] % 512 == 0:
                job.check(param)

        texts: list[str] = []
        size = 0
        for page in reader.pages:
            job.check(param)
            texts.append(page.extract_text(visitor_operand_before=visit).strip())
            size += len(texts[-1])
            if size > MAX_TEXT_CHARS:
                break
    except (InvalidRequest, Cancelled):
        raise
    except FileNotDecryptedError:
        raise InvalidRequest("input_file: the PDF is password-protected.", param=param,
                             code=CODE) from None
    except RecursionError:
        raise InvalidRequest("input_file: the PDF is nested too deeply to read.", param=param,
                             code=CODE) from None
    except Exception as exc:  # pypdf raises many kinds (PdfReadError, ValueError, KeyError, ...)
        raise InvalidRequest(f"input_file: the PDF cannot be read ({type(exc).__name__}); is it "
                             "damaged?", param=param, code=CODE) from None
    text = "\n\n".join(t for t in texts if t)
    if not text.strip():
        raise InvalidRequest("input_file: the PDF has no text layer (a scanned document? this "
                             "gateway does not run OCR).", param=param, code=CODE)
    return text, pages


def extract(part: dict[str, Any], param: str) -> str:
    """The text the model reads for one ``input_file`` part (wire form); ``param`` names it."""
    if part.get("file_id"):
        raise InvalidRequest("input_file file_id is not supported: this gateway has no Files API; "
                             "send the file's content as file_data (base64).",
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
