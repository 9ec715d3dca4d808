"""A stored file's text, for ingestion into a vector store: blocking, bounded; call it in a
thread (never on the event loop).

* **Kinds** (:func:`kind_of`, by the file name's extension first, then its media type, then
  ``%PDF-``): PDF; plain text, Markdown, CSV, code (:data:`CODE_EXTENSIONS`); HTML (the text
  of the page, ``script`` / ``style`` / ``template`` / ``noscript`` dropped, blocks on their
  own lines: :class:`_HtmlText`, stdlib :mod:`html.parser`); JSON (validated, kept as
  written).  Anything else is :class:`Unreadable` ``unsupported_file`` (DOCX / PPTX too: no
  reader here).
* **Text** must be UTF-8 (a BOM allowed; UTF-16 with its BOM too) without NUL characters;
  otherwise, and for JSON that does not parse, ``invalid_file``.  A file with no text at all
  is ``invalid_file``; one past :data:`MAX_TEXT_CHARS` is ``unsupported_file``.
* **Every kind is read in the file worker process** (:func:`app.items.file_jobs.isolated`:
  memory capped, killed at the deadline of the :class:`~app.items.file_jobs.Budget` given, or
  when it is cancelled; the calling thread only waits): decoding, JSON validation and the HTML
  parser there (:func:`read_here`), so no part of a 64 MB file's reading holds the gateway's GIL
  (its text comes back as raw UTF-8, decoded a megabyte at a time).
* **PDF** goes through the gateway's hardened reader (:mod:`app.items.pdf`) with the same
  bounds as an ``input_file`` except its pages (:data:`MAX_PDF_PAGES`), text and fonts'
  character-map entries (:data:`MAX_FONT_ENTRIES`); a damaged, encrypted or costly PDF is
  ``invalid_file``, one without a text layer ``unsupported_file``.
"""

from __future__ import annotations

import html.parser
import mimetypes
from typing import Literal

import orjson

from app.core.errors import InvalidRequest
from app.items import file_jobs
from app.knowledge.catalog import ErrorCode

Kind = Literal["pdf", "text", "html", "json"]
MAX_TEXT_CHARS = 20_000_000  # ~5M tokens: OpenAI's limit of one file in a vector store
MAX_PDF_PAGES = 2000
PDF_SECONDS = 120.0  # one PDF's reading, in the worker process
MAX_FONT_ENTRIES = 16_000_000  # a PDF's fonts' character-map entries (16 x an input_file's)
CODE_EXTENSIONS = frozenset({
    "c", "cc", "cpp", "cxx", "h", "hpp", "cs", "css", "go", "java", "js", "mjs", "cjs", "jsx", "ts",
    "tsx", "php", "py", "rb", "rs", "sh", "bash", "swift", "kt", "kts", "scala", "sql", "tex", "r",
    "lua", "pl", "m", "vue", "svelte", "yaml", "yml", "toml", "ini", "cfg", "xml", "proto"})
TEXT_EXTENSIONS = frozenset({"txt", "text", "md", "markdown", "mdx", "rst", "csv", "tsv", "log"})
_BY_EXTENSION: dict[str, Kind] = {**{e: "text" for e in CODE_EXTENSIONS | TEXT_EXTENSIONS},
                                  "pdf": "pdf", "html": "html", "htm": "html", "xhtml": "html",
                                  "json": "json"}
_TEXT_MEDIA = frozenset({"application/javascript", "application/x-javascript", "application/typescript",
                         "application/x-sh", "application/x-tex", "application/x-python",
                         "application/xml", "application/x-yaml", "application/toml"})
_SKIPPED = frozenset({"script", "style", "template", "noscript", "svg", "math", "head"})
_BLOCKS = frozenset({"p", "div", "br", "li", "ul", "ol", "tr", "table", "section", "article", "header",
                     "footer", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "blockquote", "title",
                     "dt", "dd", "hr", "nav", "aside", "main", "figure", "figcaption", "td", "th"})


class Unreadable(Exception):
    """The file cannot be ingested: OpenAI's ``last_error`` ``code`` and ``message``."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code: ErrorCode = code
        self.message = message


def kind_of(filename: str, content_type: str, head: bytes) -> Kind | None:
    """How the file is read, or ``None`` (not supported)."""
    ext = filename.rsplit(".", 1)[1].lower() if "." in filename else ""
    if ext in _BY_EXTENSION:
        return _BY_EXTENSION[ext]
    guessed, _ = mimetypes.guess_type(filename, strict=False)
    if ext and guessed and _kind_of_media(guessed, head) is None:
        return None  # a .docx, .png or .zip is what its name says, whatever type it was sent as
    media = (content_type or "").split(";")[0].strip().lower()
    return _kind_of_media(guessed or "" if media in ("", "application/octet-stream") else media, head)


def _kind_of_media(media: str, head: bytes) -> Kind | None:
    if media == "application/pdf" or head.startswith(b"%PDF-"):
        return "pdf"
    if media in ("text/html", "application/xhtml+xml"):
        return "html"
    if media == "application/json":
        return "json"
    if media.startswith("text/") or media in _TEXT_MEDIA:
        return "text"
    return None


def decode(data: bytes) -> str:
    """UTF-8 (or BOM-marked UTF-16) text without NULs, or ``invalid_file``."""
    try:
        if data.startswith((b"\xff\xfe", b"\xfe\xff")):
            text = data.decode("utf-16")
        else:
            text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise Unreadable("invalid_file", "The file is not UTF-8 text.") from None
    if "\x00" in text:
        raise Unreadable("invalid_file", "The file contains NUL characters (binary data?).")
    return text


class _HtmlText(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIPPED:
            self.skipping += 1
        elif tag in _BLOCKS:
            self.parts.append("\n")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIPPED:
            self.skipping = max(0, self.skipping - 1)
        elif tag in _BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.skipping:
            self.parts.append(data)


def html_text(source: str) -> str:
    """The text a reader of the page sees (scripts, styles and the head left out)."""
    parser = _HtmlText()
    parser.feed(source)
    parser.close()
    lines = (" ".join(line.split()) for line in "".join(parser.parts).splitlines())
    return "\n".join(line for line in lines if line)


def read_here(kind: str, data: bytes, param: str, limits: dict[str, int]) -> dict[str, str]:
    """``{"text"}`` of a ``text``, ``json`` or ``html`` file: run in the file worker process
    (:data:`app.items.file_worker.READERS`), where decoding 64 MB, validating its JSON or
    parsing its HTML holds no GIL of the gateway's; :class:`Unreadable` becomes the worker's
    refusal (an :class:`InvalidRequest` carrying its code)."""
    try:
        text = decode(data)
        if kind == "json":
            try:
                orjson.loads(text)
            except orjson.JSONDecodeError as exc:
                raise Unreadable("invalid_file", f"The file is not valid JSON ({exc}).") from None
        elif kind == "html":
            text = html_text(text)
        _check_text(text, limits["text_chars"])
    except Unreadable as exc:
        raise InvalidRequest(exc.message, param=param, code=exc.code) from None
    return {"text": text}


def _check_text(text: str, most: int) -> None:
    if len(text) > most:
        raise Unreadable("unsupported_file", f"The file holds more than {most:,} characters of text.")
    if not text.strip():
        raise Unreadable("invalid_file", "The file has no text.")


def _isolated(kind: Kind, data: bytes, budget: file_jobs.Budget | None) -> str:
    """The text of ``data`` read in the file worker process, under ``budget``."""
    from app.items import files as items_files

    limits = {"text_chars": MAX_TEXT_CHARS}
    if kind == "pdf":
        limits |= {"pages": MAX_PDF_PAGES, "page_content": items_files.MAX_PAGE_CONTENT,
                   "content": items_files.MAX_CONTENT, "operators": items_files.MAX_OPERATORS,
                   "stream": items_files.MAX_STREAM, "forms": items_files.MAX_FORM_DRAWS,
                   "font_entries": MAX_FONT_ENTRIES}
    file_jobs._LOCAL.budget = budget or file_jobs.Budget(PDF_SECONDS)  # isolated() reads it
    try:
        found = file_jobs.isolated(kind, data, "file", limits)
    except InvalidRequest as exc:
        message = exc.message.removeprefix("input_file: ")
        message = message[:1].upper() + message[1:]
        code: ErrorCode = "unsupported_file" if "no text layer" in message else "invalid_file"
        if kind != "pdf" and exc.code == "unsupported_file":  # read_here's own code
            code = "unsupported_file"
        raise Unreadable(code, message) from None
    finally:
        file_jobs._LOCAL.budget = None
    return str(found["text"])


def extract(data: bytes, filename: str, content_type: str,
            budget: file_jobs.Budget | None = None) -> str:
    """The text of a stored file (see the module docstring), or :class:`Unreadable`."""
    kind = kind_of(filename, content_type, data[:8])
    if kind is None:
        shown = filename.rsplit(".", 1)[1] if "." in filename else content_type or "unknown"
        raise Unreadable("unsupported_file", f"Files of type {shown[:64]!r} are not supported; this "
                         "gateway reads PDF, text, Markdown, HTML, JSON and source code.")
    if not data:
        raise Unreadable("invalid_file", "The file is empty.")
    text = _isolated(kind, data, budget)
    _check_text(text, MAX_TEXT_CHARS)
    return text
