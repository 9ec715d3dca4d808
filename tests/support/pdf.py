"""A minimal valid PDF with a text layer, built by hand (no PDF writer needed in tests)."""

from __future__ import annotations


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
