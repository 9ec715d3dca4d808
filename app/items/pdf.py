"""A PDF's text layer with pypdf, bounded: run only in the file worker process.

:func:`read` runs in :mod:`app.items.file_worker`'s process, which the gateway kills when the
request's time budget runs out or its client leaves (:mod:`app.items.file_jobs`): that is the
bound on everything pypdf does (decompression, fonts and their maps, forms, whatever comes
next).  The checks here refuse the known bombs early, in a fraction of a second, with a message
that says why:

* every stream inflates to at most ``stream`` bytes (pypdf's decoders stop there);
* before any parsing, a page's drawing commands and every form XObject it can reach (nested
  forms included, each counted once) hold at most ``page_content`` bytes, and all pages at most
  ``content``;
* before any parsing too, what extraction will do (:mod:`app.items.pdf_cost`): a form's
  commands counted at each draw, nested draws multiplied, against ``content``, and fonts'
  character-map entries counted at each page and form drawn that uses them, against
  ``font_entries`` (nested forms drawn 10 x 10 x 10 times and 200 fonts sharing a 65,536-code
  map, which ran into the time budget, are refused in milliseconds);
* while extracting, every ``Do`` is charged the size of the form it draws (pypdf parses a form
  again at each use), with the pages' own commands, against ``content``; drawing operators
  (forms' included) against ``operators``.  These raise :class:`_Refused`, a
  ``BaseException``, because pypdf swallows ``Exception`` from inside a form.

Annotations' appearance streams and Type3 glyph procedures are never parsed for text.
"""

from __future__ import annotations

import io
import logging
import re
from typing import Any

from app.core.errors import InvalidRequest
from app.items import pdf_cost

CODE = "unsupported_file"
MAX_FORM_DEPTH = 16  # nested forms followed by the size check (pypdf stops cycles itself)

logging.getLogger("pypdf").setLevel(logging.ERROR)  # a damaged PDF is the client's 400, not our log


class _Refused(BaseException):  # a control-flow signal, like KeyboardInterrupt
    """A bound was reached inside pypdf (which catches ``Exception`` around a form)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


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


def _open(data: bytes) -> Any:
    import pypdf

    try:
        return pypdf.PdfReader(io.BytesIO(data))
    except pypdf.errors.PdfReadError:
        if b"startxref" in data[-2048:]:
            raise
        return pypdf.PdfReader(io.BytesIO(_repaired(data)))


def _forms(resources: Any, depth: int, seen: dict[int, int], sizes: dict[str, int]) -> None:
    """Every form XObject reachable from ``resources``: ``seen`` (id -> decompressed size, each
    form once) and ``sizes`` (name -> the largest form of that name: what a ``Do`` costs)."""
    if depth > MAX_FORM_DEPTH or not hasattr(resources, "get"):
        return
    found = resources.get("/XObject")
    xobjects: Any = found.get_object() if found is not None else None
    if not hasattr(xobjects, "items"):
        return
    for name, ref in xobjects.items():
        form = ref.get_object()
        if not hasattr(form, "get_data") or form.get("/Subtype") != "/Form" or id(form) in seen:
            continue
        seen[id(form)] = len(form.get_data())
        sizes[str(name)] = max(sizes.get(str(name), 0), seen[id(form)])
        inner = form.get("/Resources")
        _forms(inner.get_object() if inner is not None else None, depth + 1, seen, sizes)


def _check_content(reader: Any, limits: dict[str, int]) -> tuple[list[int], dict[str, int]]:
    """Refuse, before parsing any, drawing commands too big to parse in bounded time (parsing
    is ~0.55 s a MB): each page's size and what each form name costs."""
    pages: list[int] = []
    costs: dict[str, int] = {}
    drawn: list[tuple[bytes, Any]] = []
    total = 0
    for i, page in enumerate(reader.pages):
        contents = page.get_contents()
        seen: dict[int, int] = {}
        resources = page.get("/Resources")
        _forms(resources.get_object() if resources is not None else None, 0, seen, costs)
        drawn.append((contents.get_data() if contents is not None else b"", resources))
        pages.append(len(drawn[-1][0]))
        size = pages[-1] + sum(seen.values())
        if size > limits["page_content"]:
            raise _Refused(f"page {i + 1} of the PDF draws {size:,} bytes of drawing commands "
                           f"(forms included); at most {limits['page_content']:,} are read.")
        total += pages[-1]
        if total > limits["content"]:
            raise _Refused(f"the PDF's pages hold over {limits['content']:,} bytes of drawing "
                           "commands; is it built to be costly?")
    pdf_cost.check(drawn, limits)  # forms at each draw, fonts at each page and form: TooCostly
    return pages, costs


def _configured(limits: dict[str, int]) -> Any:
    import pypdf

    stream = limits["stream"]
    return pypdf.apply_configuration(
        zlib_maximum_output_length=stream, lzw_maximum_output_length=stream,
        run_length_maximum_output_length=stream, brotli_maximum_output_length=stream,
        jbig2_maximum_output_length=stream, array_based_stream_maximum_output_length=stream,
        zlib_maximum_recovery_input_length=min(stream, 1_000_000),
        stream_decoding_work_maximum_length=4 * stream,
        xform_maximum_invocations_per_extraction=limits["forms"])


def _extract(reader: Any, limits: dict[str, int]) -> list[str]:
    sizes, costs = _check_content(reader, limits)
    parsed = [0, 0]  # bytes of drawing commands parsed, operators seen

    def visit(operator: bytes, operands: Any, *_: object) -> None:
        parsed[1] += 1
        if parsed[1] > limits["operators"]:
            raise _Refused(f"the PDF has over {limits['operators']:,} drawing operators; is it "
                           "built to be costly?")
        if operator == b"Do" and operands:
            parsed[0] += costs.get(str(operands[0]), 0)
            if parsed[0] > limits["content"]:
                raise _Refused(f"the PDF draws its forms to over {limits['content']:,} bytes of "
                               "drawing commands; is it built to be costly?")

    texts: list[str] = []
    chars = 0
    for page, size in zip(reader.pages, sizes, strict=True):
        parsed[0] += size
        texts.append(page.extract_text(visitor_operand_before=visit).strip())
        chars += len(texts[-1])
        if chars > limits["text_chars"]:
            break
    return texts


def read(data: bytes, param: str, limits: dict[str, int]) -> dict[str, Any]:
    """``{"text", "pages"}`` of a PDF, or an :class:`InvalidRequest` naming ``param``."""
    from pypdf.errors import FileNotDecryptedError, LimitReachedError

    def refused(message: str) -> InvalidRequest:
        return InvalidRequest(f"input_file: {message}", param=param, code=CODE)

    try:
        with _configured(limits):
            reader = _open(data)
            if reader.is_encrypted and not reader.decrypt(""):
                raise FileNotDecryptedError("password")
            pages = len(reader.pages)
            if pages > limits["pages"]:
                raise refused(f"the PDF has {pages} pages; at most {limits['pages']} are read.")
            texts = _extract(reader, limits)
    except InvalidRequest:
        raise
    except (_Refused, pdf_cost.TooCostly) as exc:
        raise refused(exc.message) from None
    except FileNotDecryptedError:
        raise refused("the PDF is password-protected.") from None
    except LimitReachedError:
        raise refused(f"the PDF has a stream that inflates past {limits['stream']:,} bytes, or "
                      "too many objects; is it built to be costly?") from None
    except RecursionError:
        raise refused("the PDF is nested too deeply to read.") from None
    except MemoryError:
        raise
    except Exception as exc:  # pypdf raises many kinds (PdfReadError, ValueError, KeyError, ...)
        raise refused(f"the PDF cannot be read ({type(exc).__name__}); is it damaged?") from None
    text = "\n\n".join(t for t in texts if t)
    if not text.strip():
        raise refused("the PDF has no text layer (a scanned document? this gateway does not run OCR).")
    return {"text": text, "pages": pages}
