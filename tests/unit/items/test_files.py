"""app/items/files.py: input_file text / Markdown / PDF → text; everything else a 400."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.cli.conformance.responses import _one_page_pdf
from app.core.errors import InvalidRequest
from app.formats.harmony.vocab import harmony_encoding
from app.items import files
from app.items.files import extract
from tests.support.fake_llamacpp import FakeLlamaCpp
from tests.support.gateway import MODEL, gateway
from tests.support.pdf import make_pdf

P = "input[0].content[1]"
ANSWER = "<|channel|>final<|message|>Read it.<|return|>"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _fails(part: dict[str, Any], param: str = P) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as err:
        extract({"type": "input_file", **part}, P)
    assert err.value.status == 400 and err.value.param == param
    return err.value


def test_markdown_by_extension_and_text_by_data_url() -> None:
    md = extract({"filename": "notes.md", "file_data": _b64(b"# Plan\n\n* ship Tuesday")}, P)
    assert md == "<file name='notes.md' type='text/markdown'>\n# Plan\n\n* ship Tuesday\n</file>"
    url = "data:text/plain;charset=utf-8;base64," + _b64("\ufeffhéllo".encode())
    assert extract({"file_data": url}, P) == "<file name='file' type='text/plain'>\nhéllo\n</file>"


def test_pdf_pages_by_media_type_extension_or_magic() -> None:
    pdf = make_pdf("Launch on Tuesday.", "Notify support first.")
    want = "Launch on Tuesday.\n\nNotify support first."
    for part in ({"file_data": "data:application/pdf;base64," + _b64(pdf)},
                 {"filename": "plan.PDF", "file_data": _b64(pdf)},
                 {"file_data": _b64(pdf)}):
        text = extract(part, P)
        assert want in text and "2 pages" in text


def _bare_pdf(text: str, *, trailer: bool) -> bytes:
    """A one-page PDF with no cross-reference table and no ``startxref`` (the conformance
    runner's, as small generators and the Open Responses compliance suite's fixture write
    them), without its trailer if asked."""
    pdf = _one_page_pdf(text)
    assert b"xref" not in pdf and b"startxref" not in pdf
    if not trailer:
        pdf = pdf.replace(b"trailer\n<</Root 1 0 R>>\n", b"")
        assert b"trailer" not in pdf
    return pdf


@pytest.mark.parametrize("trailer", [True, False])
def test_a_pdf_without_cross_reference_table_is_read_as_viewers_read_it(trailer: bool) -> None:
    text = extract({"filename": "notes.pdf", "file_data": _b64(_bare_pdf("Launch on Tuesday.",
                                                                         trailer=trailer))}, P)
    assert "Launch on Tuesday." in text and "1 page" in text


@pytest.mark.parametrize(("part", "param", "message"), [
    ({"file_id": "file-123"}, P + ".file_id", "was not read"),  # app/items/file_ids.py reads it first
    ({"file_url": "http://169.254.169.254/latest/meta-data/"}, P + ".file_url", "does not fetch"),
    ({}, P + ".file_data", "needs file_data"),
    ({"file_data": "data:text/plain,hello"}, P + ".file_data", "must be base64"),
    ({"file_data": "not base64!"}, P + ".file_data", "not base64"),
    ({"filename": "a.docx", "file_data": _b64(b"PK\x03\x04")}, P, "is not supported"),
    ({"file_data": "data:image/png;base64," + _b64(b"\x89PNG")}, P, "image/png is not supported"),
    ({"file_data": _b64(b"no type")}, P, "without a media type"),
    ({"filename": "a.txt", "file_data": _b64(b"\xff\xfe\x00")}, P, "UTF-8"),
    ({"filename": "a.txt", "file_data": _b64(b"a\x00b")}, P, "NUL"),
    ({"filename": "a.pdf", "file_data": _b64(b"%PDF-1.4 garbage")}, P, "cannot be read"),
    ({"filename": "a.pdf", "file_data": _b64(make_pdf(""))}, P, "no text layer"),
])
def test_refusals_name_the_part(part: dict[str, Any], param: str, message: str) -> None:
    assert message in _fails(part, param).message


def test_size_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "MAX_FILE_BYTES", 1024)
    big = {"filename": "a.txt", "file_data": _b64(b"a" * 2000)}
    assert "larger than" in _fails(big, P + ".file_data").message
    monkeypatch.setattr(files, "MAX_TEXT_CHARS", 10)
    assert "more than 10" in _fails({"filename": "a.txt", "file_data": _b64(b"a" * 11)}).message
    monkeypatch.setattr(files, "MAX_PDF_PAGES", 1)
    assert "2 pages" in _fails({"filename": "a.pdf", "file_data": _b64(make_pdf("a", "b"))}).message


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=400), st.sampled_from(["a.pdf", "a.md", "a.txt", None, "x.bin"]))
def test_any_bytes_give_text_or_a_400(data: bytes, filename: str | None) -> None:
    try:
        text = extract({"type": "input_file", "filename": filename, "file_data": _b64(data)}, P)
    except InvalidRequest as exc:
        assert exc.status == 400 and exc.param is not None and exc.param.startswith(P)
    else:
        assert text.startswith("<file name=")


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_damaged_pdfs_give_text_or_a_400(data: st.DataObject) -> None:
    pdf = bytearray(make_pdf("Some text on a page."))
    for _ in range(data.draw(st.integers(1, 8))):
        pdf[data.draw(st.integers(0, len(pdf) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(pdf)))
    try:
        extract({"filename": "a.pdf", "file_data": _b64(bytes(pdf[:cut]))}, P)
    except InvalidRequest as exc:
        assert exc.status == 400


@given(st.text(max_size=200))
def test_any_file_data_string_gives_text_or_a_400(file_data: str) -> None:
    try:
        extract({"filename": "a.txt", "file_data": file_data}, P)
    except InvalidRequest as exc:
        assert exc.status == 400


async def test_the_model_reads_the_file_text_and_the_store_keeps_it() -> None:
    up = FakeLlamaCpp(ANSWER)
    pdf = "data:application/pdf;base64," + _b64(make_pdf("The launch is on Tuesday."))
    content = [{"type": "input_text", "text": "When is the launch?"},
               {"type": "input_file", "filename": "plan.pdf", "file_data": pdf}]
    async with gateway(up.transport()) as c:
        r = await c.post("/v1/responses",
                         json={"model": MODEL, "input": [{"role": "user", "content": content}]})
        assert r.status_code == 200, r.text
        prompt = harmony_encoding().decode(up.requests[-1]["prompt"])
        assert "When is the launch?<file name='plan.pdf' type='application/pdf, 1 page'>\n" \
               "The launch is on Tuesday.\n</file>" in prompt
        items = (await c.get(f"/v1/responses/{r.json()['id']}/input_items")).json()["data"]
        assert items[0]["content"][1]["type"] == "input_text"  # read once, stored as text
        again = await c.post("/v1/responses", json={"model": MODEL, "input": "And?",
                                                     "previous_response_id": r.json()["id"]})
        assert again.status_code == 200
        assert "The launch is on Tuesday." in harmony_encoding().decode(up.requests[-1]["prompt"])


async def test_file_url_is_a_400_before_any_upstream_call() -> None:
    up = FakeLlamaCpp(ANSWER)
    part = {"type": "input_file", "file_url": "http://10.0.0.1/secret.pdf"}
    async with gateway(up.transport()) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": [
            {"role": "user", "content": "hi"}, {"role": "user", "content": [part]}]})
    assert r.status_code == 400 and not up.requests
    assert r.json()["error"]["param"] == "input[1].content[0].file_url"
    assert r.json()["error"]["code"] == "unsupported_file"


def test_a_pdf_cpu_bomb_is_refused_before_it_is_parsed() -> None:
    """30 pages sharing one 1.4 MB content stream (7 KB on the wire) took 146 s of CPU."""
    import time

    from tests.support.pdf import make_bomb

    bomb = make_bomb(30, 200_000)
    assert len(bomb) < 16_000
    t0 = time.monotonic()
    err = _fails({"filename": "a.pdf", "file_data": _b64(bomb)})
    assert "drawing commands" in err.message and time.monotonic() - t0 < 5


def test_drawing_operators_and_time_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.items import file_jobs
    from tests.support.pdf import make_bomb

    monkeypatch.setattr(files, "MAX_OPERATORS", 10_000)
    err = _fails({"filename": "a.pdf", "file_data": _b64(make_bomb(1, 20_000))})
    assert "drawing operators" in err.message
    monkeypatch.setattr(files, "MAX_OPERATORS", 10_000_000)
    monkeypatch.setattr(file_jobs, "SECONDS", 0.0)  # a job past its deadline stops at a check
    err = _fails({"filename": "a.pdf", "file_data": _b64(make_bomb(2, 5_000))})
    assert "too long to read" in err.message


async def test_files_have_a_bounded_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.items import file_jobs

    monkeypatch.setattr(file_jobs, "QUEUE", 0)
    content = [{"type": "input_text", "text": "Read it."},
               {"type": "input_file", "filename": "a.txt", "file_data": _b64(b"hello")}]
    async with gateway(FakeLlamaCpp(ANSWER).transport()) as c:
        r = await c.post("/v1/responses", json={"model": MODEL,
                                                "input": [{"role": "user", "content": content}]})
    assert r.status_code == 503 and r.json()["error"]["code"] == "server_overloaded"
    assert int(r.headers["retry-after"]) >= 1


async def test_a_client_that_leaves_stops_its_file_job() -> None:
    import asyncio
    import time

    from app.items import file_jobs

    started = asyncio.Event()
    loop = asyncio.get_running_loop()
    stopped: list[float] = []

    def work() -> None:
        job = file_jobs.budget()
        loop.call_soon_threadsafe(started.set)
        try:
            while True:
                job.check("input[0]")
                time.sleep(0.01)
        except file_jobs.Cancelled:
            stopped.append(time.monotonic())

    task = asyncio.ensure_future(file_jobs.run(work))
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    t0 = time.monotonic()
    for _ in range(100):
        if stopped:
            break
        await asyncio.sleep(0.01)
    assert stopped and stopped[0] - t0 < 0.5  # the job saw the flag at its next check
