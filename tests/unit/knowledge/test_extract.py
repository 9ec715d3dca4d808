"""Text extraction for ingestion (app/knowledge/extract.py): each supported kind read as its
reader sees it, everything else ``unsupported_file``, undecodable files ``invalid_file``, and
PDFs (real ones, a damaged one, a bomb) through the hardened reader in the worker process."""

from __future__ import annotations

import time

import pytest

from app.items.file_jobs import Budget
from app.knowledge.extract import Unreadable, extract, html_text, kind_of
from tests.support.pdf import make_bomb, make_pdf


@pytest.mark.parametrize(("name", "ctype", "head", "kind"), [
    ("a.md", "", b"", "text"), ("a.py", "application/octet-stream", b"", "text"),
    ("a.txt", "", b"", "text"), ("Main.java", "", b"", "text"), ("a.csv", "", b"", "text"),
    ("a.html", "", b"", "html"), ("page", "text/html; charset=utf-8", b"", "html"),
    ("a.json", "", b"", "json"), ("data", "application/json", b"", "json"),
    ("a.pdf", "", b"", "pdf"), ("scan", "application/octet-stream", b"%PDF-1.7", "pdf"),
    ("notes", "text/plain", b"", "text"),
    ("a.docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document", b"PK", None),
    ("a.png", "image/png", b"\x89PNG", None), ("blob", "application/octet-stream", b"\x00\x01", None),
])
def test_kinds(name: str, ctype: str, head: bytes, kind: str | None) -> None:
    assert kind_of(name, ctype, head) == kind


def failure(data: bytes, name: str, ctype: str = "") -> Unreadable:
    with pytest.raises(Unreadable) as bad:
        extract(data, name, ctype)
    return bad.value


def test_text_kinds() -> None:
    assert extract("# Title\n\nBody ünïcode".encode(), "a.md", "") == "# Title\n\nBody ünïcode"
    assert extract(b"\xef\xbb\xbfwith a BOM", "a.txt", "") == "with a BOM"
    assert extract("utf-16 text".encode("utf-16"), "a.txt", "") == "utf-16 text"
    assert extract(b'{"a": [1, 2]}', "a.json", "") == '{"a": [1, 2]}'
    assert extract(b"def f():\n    return 1\n", "a.py", "") == "def f():\n    return 1\n"


def test_html_is_its_visible_text() -> None:
    page = (b"<html><head><title>T</title><style>p{color:red}</style></head><body>"
            b"<script>alert('x')</script><h1>Refund&nbsp;policy</h1><p>Within <b>14</b> days.</p>"
            b"<noscript>enable js</noscript><ul><li>one</li><li>two &amp; three</li></ul></body></html>")
    assert extract(page, "a.html", "") == "Refund policy\nWithin 14 days.\none\ntwo & three"
    assert html_text("<p>a<br>b</p><template><p>hidden</p></template>") == "a\nb"


def test_undecodable_and_unsupported_files() -> None:
    assert failure(b"\xc3\x28 not utf8" + bytes(range(128, 140)), "a.txt").code == "invalid_file"
    bad = failure(b"caf\xe9", "a.md")
    assert (bad.code, bad.message) == ("invalid_file", "The file is not UTF-8 text.")
    assert failure(b"a\x00b", "a.txt").code == "invalid_file"
    assert failure(b'{"a": ', "a.json").code == "invalid_file"
    assert failure(b"", "a.txt").message == "The file is empty."
    assert failure(b"  \n\t ", "a.txt").message == "The file has no text."
    bad = failure(b"PK\x03\x04", "report.docx")
    assert bad.code == "unsupported_file" and "'docx'" in bad.message


def test_pdfs_through_the_hardened_reader() -> None:
    text = extract(make_pdf("Refunds take 14 days.", "Page two: code ZX-42."), "policy.pdf", "")
    assert "Refunds take 14 days." in text and "ZX-42" in text
    assert failure(b"%PDF-1.4\n garbage that is no pdf", "broken.pdf").code == "invalid_file"
    started = time.monotonic()
    bomb = failure(make_bomb(pages=1, operators=2_000_000), "bomb.pdf")
    assert bomb.code == "invalid_file" and "at most 2,097,152 are read" in bomb.message
    assert time.monotonic() - started < 30


def test_a_pdf_past_its_budget_is_stopped() -> None:
    budget = Budget(0.0)
    with pytest.raises(Unreadable) as bad:
        extract(make_pdf("hello"), "a.pdf", "application/pdf", budget)
    assert bad.value.code == "invalid_file" and "too long" in bad.value.message


def test_every_kind_is_read_in_the_worker_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Decoding, JSON validation and the HTML parser run in the file worker, not in the
    gateway's process (where they would hold its GIL for a 64 MB file): broken here, they
    still work there, and their refusals keep their codes."""
    from app.knowledge import extract as module

    def here(*_: object) -> str:
        raise AssertionError("read in the gateway's process")

    monkeypatch.setattr(module, "html_text", here)
    monkeypatch.setattr(module, "decode", here)
    assert extract(b"<p>Refunds</p><p>in 14 days</p>", "a.html", "") == "Refunds\nin 14 days"
    assert extract(b'{"a": 1}', "a.json", "") == '{"a": 1}'
    assert failure(b'{"a": ', "a.json").code == "invalid_file"
    assert failure(b"caf\xe9", "a.md").message == "The file is not UTF-8 text."


def test_the_text_comes_back_whole_across_decoding_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker sends the text as raw UTF-8 that the gateway decodes in steps: a character
    cut by a step's edge is joined, not replaced."""
    from app.items import file_worker

    monkeypatch.setattr(file_worker, "TEXT_STEP", 5)
    text = "naïve café — 😀 " * 500
    assert extract(text.encode(), "a.txt", "") == text
    assert "Refunds take 14 days." in extract(make_pdf("Refunds take 14 days."), "a.pdf", "")
