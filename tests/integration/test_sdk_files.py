"""The official OpenAI SDK's Files client against the gateway served as its console script
(``ocm-gateway serve``, SQLite store): create / list / retrieve / content / delete, the bytes
in a directory beside the SQLite file, and an upload over ``[files] max_bytes`` refused while
it streams: the server stops reading near the limit, its memory does not grow by the upload's
size, and nothing of it is left on disk."""

from __future__ import annotations

import io
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from tests.integration.conftest import run_gateway
from tests.support.process import Running

LIMIT = 64 * 1024 * 1024


def _rss_kib(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(field)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Running, Path]]:
    tmp = tmp_path_factory.mktemp("files")
    config = tmp / "gateway.toml"
    config.write_text("\n".join([
        "[store]", f'path = "{tmp / "responses.sqlite3"}"', "", "[files]", f"max_bytes = {LIMIT}", "",
        '[models."m"]', 'backend = "llamacpp"', 'base_urls = ["http://127.0.0.1:9"]', ""]))
    with run_gateway(config) as running:
        yield running, tmp / "files"


def test_the_sdk_round_trip(served: tuple[Running, Path]) -> None:
    running, root = served
    client = OpenAI(base_url=f"{running.url}/v1", api_key="not-needed", max_retries=0, timeout=60)
    data = b'{"custom_id": "1", "method": "POST", "url": "/v1/responses", "body": {}}\n' * 1000
    made = client.files.create(file=("requests.jsonl", io.BytesIO(data)), purpose="batch")
    assert (made.object, made.bytes, made.filename, made.purpose, made.status) == \
           ("file", len(data), "requests.jsonl", "batch", "processed")
    assert (root / made.id).read_bytes() == data  # beside the SQLite file
    assert client.files.retrieve(made.id).model_dump() == made.model_dump()
    assert made.id in [f.id for f in client.files.list(purpose="batch")]
    assert client.files.content(made.id).content == data
    deleted = client.files.delete(made.id)
    assert deleted.deleted and deleted.id == made.id and not (root / made.id).exists()


def test_an_upload_over_the_limit_is_refused_while_it_streams(served: tuple[Running, Path]) -> None:
    running, root = served
    pid = running.process.pid
    sent = 0
    block = b"z" * (256 * 1024)

    def body() -> Iterator[bytes]:  # multipart by hand: 4x the limit, never held in memory
        nonlocal sent
        yield (b"--b0undary\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"
               b"--b0undary\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big.bin\"\r\n"
               b"Content-Type: application/octet-stream\r\n\r\n")
        while sent < 4 * LIMIT:
            sent += len(block)
            yield block
        yield b"\r\n--b0undary--\r\n"

    before = _rss_kib(pid)
    started = time.monotonic()
    try:
        r = httpx.post(f"{running.url}/v1/files", content=body(), timeout=60,
                       headers={"content-type": "multipart/form-data; boundary=b0undary"})
        status, error = r.status_code, r.json()["error"]
    except httpx.HTTPError:  # the server answered and closed while the client was still sending
        status, error = 413, {"code": "file_too_large"}
    grew = _rss_kib(pid) - before
    assert status == 413 and error["code"] == "file_too_large", error
    assert sent < 4 * LIMIT  # it stopped reading long before the end
    assert grew < 32 * 1024, f"the server grew by {grew} KiB"
    assert time.monotonic() - started < 30
    assert list((root / "tmp").iterdir()) == []
    assert not any(p.name.startswith("file-") for p in root.iterdir())
    # a declared content-length over the cap is refused before any of the body is read
    host, port = running.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"POST /v1/files HTTP/1.1\r\nhost: x\r\ncontent-type: multipart/form-data; "
                     b"boundary=b\r\ncontent-length: %d\r\n\r\n" % (2 * LIMIT))
        assert sock.recv(65536).startswith(b"HTTP/1.1 413 ")
