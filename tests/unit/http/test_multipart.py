"""The streaming multipart reader (app/http/multipart.py): any body is a result or a 400 / 413
(hypothesis), never another exception; bounds on parts, fields and the file; and through the
app, a generator body four times the limit is refused after about the limit is read, with the
process's memory not growing by the body's size."""

from __future__ import annotations

import asyncio
import resource
from collections.abc import AsyncIterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.errors import InvalidRequest
from app.http.multipart import MAX_FIELD, MAX_PARTS, Upload
from tests.support.fake_llamacpp import FakeLlamaCpp
from tests.support.gateway import gateway
from tests.unit.api.files.test_routes import two_keys

B = b"XyZb0undary"
TYPE = f"multipart/form-data; boundary={B.decode()}"


def form(*parts: tuple[bytes, bytes], end: bool = True) -> bytes:
    out = b"".join(b"--" + B + b"\r\n" + head + b"\r\n\r\n" + body + b"\r\n" for head, body in parts)
    return out + (b"--" + B + b"--\r\n" if end else b"")


FIELD = b'Content-Disposition: form-data; name="purpose"'
FILE = b'Content-Disposition: form-data; name="file"; filename="../../etc/a.txt"\r\nContent-Type: text/plain'


async def pieces(data: bytes, size: int) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i:i + size]


async def parse(data: bytes, size: int = 7, max_file: int = 1000) -> tuple[dict[str, str], bytes, str | None]:
    up = Upload(pieces(data, size), TYPE, max_file=max_file)
    await up.until_file()
    got = b"".join([c async for c in up.file_chunks()]) if up.filename is not None else b""
    await up.rest()
    return up.fields, got, up.filename


@pytest.mark.parametrize("size", [1, 3, 64, 10_000])
async def test_a_form_in_any_chunking(size: int) -> None:
    fields, data, name = await parse(form((FIELD, b"batch"), (FILE, b"hello\r\n--not-the-boundary")), size)
    assert fields == {"purpose": "batch"} and data == b"hello\r\n--not-the-boundary" and name == "a.txt"
    fields, data, _ = await parse(form((FILE, b"x" * 500), (FIELD, b"user_data")), size)  # file first
    assert fields == {"purpose": "user_data"} and data == b"x" * 500


@pytest.mark.parametrize(("body", "param"), [
    (form((FIELD, b"a"), end=False), "file"),  # ends before the closing boundary
    (form(*[(FIELD, b"a")] * (MAX_PARTS + 1)), "file"),
    (form((FIELD, b"a" * (MAX_FIELD + 1))), "purpose"),
    (form((FIELD, b"\xff\xfe")), "purpose"),
    (form((FILE, b"a"), (FILE, b"b")), "file"),
    (form((b"Content-Disposition: attachment", b"a")), "file"),
    (b"garbage" * 10, "file"),
])
async def test_bad_forms_are_400s_naming_the_parameter(body: bytes, param: str) -> None:
    with pytest.raises(InvalidRequest) as bad:
        await parse(body)
    assert bad.value.status == 400 and bad.value.param == param


async def test_the_file_and_the_whole_body_are_bounded() -> None:
    with pytest.raises(InvalidRequest) as big:
        await parse(form((FILE, b"x" * 1001)))
    assert big.value.status == 413
    with pytest.raises(InvalidRequest):
        Upload(pieces(b"", 1), "application/json", max_file=10)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from([b"--" + B, b"--" + B + b"--", b"\r\n", b"\r\n\r\n", FIELD, FILE, b"x",
                                 b"Content-Type: a/b", b'name="file"', b"\xff", b":", b";"]), max_size=30)
       | st.binary(max_size=300), st.integers(1, 50))
def test_any_body_is_a_result_or_a_4xx(body: bytes | list[bytes], size: int) -> None:
    data = body if isinstance(body, bytes) else b"".join(body)
    try:
        asyncio.run(parse(data, size, max_file=100))
    except InvalidRequest as exc:
        assert exc.status in (400, 413) and exc.param is not None


async def test_a_generator_over_the_limit_is_refused_without_buffering_it() -> None:
    limit, sent = 8 * 1024 * 1024, 0
    block = b"z" * 65536

    async def body() -> AsyncIterator[bytes]:
        nonlocal sent
        yield b"--" + B + b"\r\n" + FILE + b"\r\n\r\n"
        while sent < 32 * limit:
            sent += len(block)
            yield block

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    async with gateway(FakeLlamaCpp("").transport(), two_keys(max_bytes=limit)) as c:
        r = await c.post("/v1/files", content=body(), headers={
            "authorization": "Bearer alice", "content-type": TYPE})
        assert r.status_code == 413 and r.json()["error"]["code"] == "file_too_large"
        assert r.headers["connection"] == "close"
        assert (await c.get("/v1/files", headers={"authorization": "Bearer alice"})).json()["data"] == []
    assert sent <= limit + 2 * len(block)  # stopped reading at the limit
    grew_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak
    assert grew_kib < 64 * 1024  # far below the 256 MiB the body would have been


async def test_a_stalled_upload_is_a_408() -> None:
    async def stalls() -> AsyncIterator[bytes]:
        yield form((FIELD, b"batch"), end=False)
        await asyncio.sleep(10)
        yield b""

    up = Upload(stalls(), TYPE, max_file=100, idle_timeout=0.05)
    with pytest.raises(InvalidRequest) as stalled:
        await up.until_file()
    assert stalled.value.status == 408 and stalled.value.code == "request_timeout"
