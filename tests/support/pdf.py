"""PDFs built by hand (no PDF writer needed in tests): a minimal valid one with a text layer,
and the bombs the file reader must refuse in bounded time (a page-operators bomb, a Form
XObject drawn N times, nested forms, annotation appearance streams, Type3 glyph procedures,
a Flate bomb)."""

from __future__ import annotations

import functools


def make_pdf(*pages: str) -> bytes:
    """A minimal valid PDF: one page per string, Helvetica text (no pypdf writer needed)."""
    objects: list[bytes] = []
    n = len(pages)
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(n))
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {n} >>".encode())
    font = 3 + 2 * n
    for i, text in enumerate(pages):
        escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        stream = f"BT /F1 12 Tf 72 720 Td ({escaped}) Tj ET".encode()
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * i} 0 R "
                       f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode())
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    return _written(objects)


def make_bomb(pages: int, operators: int) -> bytes:
    """A small PDF that is costly to read: ``pages`` pages sharing one Flate-compressed content
    stream of ``operators`` tiny text-showing operators (a CPU bomb: 15 KB for 30 x 200,000)."""
    import zlib

    stream = b"BT /F1 1 Tf " + b"(a) Tj " * operators + b"ET"
    packed = zlib.compress(stream, 9)
    content = 3 + pages
    font = content + 1
    kids = " ".join(f"{3 + i} 0 R" for i in range(pages))
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               f"<< /Type /Pages /Kids [{kids}] /Count {pages} >>".encode()]
    objects += [f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {content} 0 R "
                f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode() for _ in range(pages)]
    objects.append(b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(packed) + packed
                   + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    return _written(objects)


def _written(objects: list[bytes]) -> bytes:
    """The objects (numbered from 1, the catalog first) as a PDF with a cross-reference table."""
    out = bytearray(b"%PDF-1.4\n")
    offsets: list[int] = []
    for i, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def _flate(data: bytes) -> bytes:
    import zlib

    return zlib.compress(data, 9)


def _stream(data: bytes, extra: str = "") -> bytes:
    """A Flate-compressed stream object (``extra``: more dictionary entries)."""
    packed = _flate(data)
    return b"<< /Length %d /Filter /FlateDecode %s >>\nstream\n" % (len(packed), extra.encode()) \
        + packed + b"\nendstream"


def _text_ops(size: int) -> bytes:
    """About ``size`` bytes of tiny text-showing operators (the costly kind to parse)."""
    return b"BT /F1 1 Tf " + b"(a) Tj " * max(1, size // 7) + b"ET"


_FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"
_PAGE = ("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
         "/Resources << {resources} >> {extra} >>")


def _one_page(content: bytes, objects: list[bytes], *, resources: str = "/Font << /F1 5 0 R >>",
              extra: str = "", packed: bytes | None = None) -> bytes:
    """A one-page PDF: objects 1-5 are the catalog, pages, page, its content (``packed``: already
    Flate-compressed) and Helvetica; ``objects`` follow from number 6."""
    content_object = _stream(content) if packed is None else \
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(packed) + packed + b"\nendstream"
    head = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            _PAGE.format(resources=resources, extra=extra).encode(), content_object, _FONT]
    return _written(head + objects)


def make_form_bomb(uses: int = 3, size: int = 20_000_000, depth: int = 1) -> bytes:
    """One page that draws a Form XObject ``uses`` times; the form inflates to ``size`` bytes of
    text operators (issue 35: 30 KB, 20 MB, 3 uses: 16-20 CPU-s).  With ``depth`` > 1 the
    forms nest: each draws the next one ``uses`` times (``uses ** depth`` draws in all)."""
    forms: list[bytes] = []
    for level in range(depth):  # object 6 + level; the last one holds the text
        if level == depth - 1:
            content = _text_ops(size)
            res = "/Resources << /Font << /F1 5 0 R >> >>"
        else:
            content = b"q /Fm Do Q " * uses
            res = f"/Resources << /XObject << /Fm {7 + level} 0 R >> >>"
        forms.append(_stream(content, f"/Type /XObject /Subtype /Form /BBox [0 0 612 792] {res}"))
    page = b"BT /F1 12 Tf 72 720 Td (Cover) Tj ET " + b"q /Fm Do Q " * uses
    return _one_page(page, forms, resources="/Font << /F1 5 0 R >> /XObject << /Fm 6 0 R >>")


def make_annotation_bomb(size: int = 20_000_000, annotations: int = 3) -> bytes:
    """One page with ``annotations`` widgets sharing one appearance stream (a form) that
    inflates to ``size`` bytes of text operators."""
    form = _stream(_text_ops(size), "/Type /XObject /Subtype /Form /BBox [0 0 10 10] "
                                    "/Resources << /Font << /F1 5 0 R >> >>")
    annots = " ".join("<< /Type /Annot /Subtype /Widget /Rect [0 0 10 10] /AP << /N 6 0 R >> >>"
                      for _ in range(annotations))
    return _one_page(b"BT /F1 12 Tf 72 720 Td (Cover) Tj ET", [form], extra=f"/Annots [{annots}]")


def make_type3_bomb(size: int = 20_000_000) -> bytes:
    """One page in a Type3 font whose glyph procedure inflates to ``size`` bytes of operators."""
    glyph = _stream(b"0 0 d0 " + b"0 0 m 1 1 l S " * max(1, size // 14))
    font = (b"<< /Type /Font /Subtype /Type3 /FontBBox [0 0 1 1] /FontMatrix [1 0 0 1 0 0] "
            b"/CharProcs << /a 7 0 R >> /Encoding << /Differences [97 /a] >> /FirstChar 97 "
            b"/LastChar 97 /Widths [1] >>")
    content = b"BT /F1 12 Tf 72 720 Td (Cover) Tj /T3 1 Tf " + b"(aaaa) Tj " * 100 + b"ET"
    return _one_page(content, [font, glyph], resources="/Font << /F1 5 0 R /T3 6 0 R >>")


@functools.cache
def make_flate_bomb(size: int = 200_000_000) -> bytes:
    """One page whose content stream inflates to ``size`` bytes (blanks, then a line of text):
    ~1,000 times its size on the wire (200 KB for 200 MB)."""
    import zlib

    packer = zlib.compressobj(9)
    block = b" " * (1 << 20)
    packed = [packer.compress(block) for _ in range(size >> 20)]
    packed += [packer.compress(b" " * (size & ((1 << 20) - 1)) + b"BT /F1 12 Tf 72 720 Td (Cover) Tj ET"),
               packer.flush()]
    return _one_page(b"", [], packed=b"".join(packed))


def make_font_bomb(fonts: int = 200, entries: int = 65_536) -> bytes:
    """One page whose ``fonts`` font dictionaries share one /ToUnicode map of ``entries`` codes
    (every font is read, and its map parsed, before the page's first operator)."""
    cmap = (b"begincmap\n1 begincodespacerange\n<0000> <FFFF>\nendcodespacerange\n"
            b"1 beginbfrange\n<0000> <%04X> <0020>\nendbfrange\nendcmap" % (entries - 1))
    font = (b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /ToUnicode 6 0 R "
            b"/Name /F%d >>")
    names = " ".join(f"/F{i + 2} {7 + i} 0 R" for i in range(fonts))
    objects = [_stream(cmap)] + [font % i for i in range(fonts)]
    return _one_page(b"BT /F1 12 Tf 72 720 Td (Cover) Tj ET", objects,
                     resources=f"/Font << /F1 5 0 R {names} >>")
