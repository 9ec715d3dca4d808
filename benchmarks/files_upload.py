"""Upload throughput and the server's memory for ``POST /v1/files`` on a served gateway.

``python -m benchmarks.files_upload [--mb 100] [--over-mb 600] [--store-url postgresql://...]``
starts ``ocm-gateway serve`` (SQLite store in a temporary directory, or the PostgreSQL given),
uploads ``--mb`` MB through a streamed multipart body (never held by the client either), reads
it back, and then sends ``--over-mb`` MB against the default 512 MiB limit; it prints MB/s,
the server's resident memory before and its peak (``VmHWM``) after each step, and how much of
the oversized body was sent before the 413.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from tests.support.process import free_port, healthy_process

MB = 1024 * 1024
BLOCK = b"\x5a" * (256 * 1024)


def _status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) // 1024
    return -1


def _body(size: int, counter: list[int]) -> Iterator[bytes]:
    yield (b"--bnd\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nuser_data\r\n--bnd\r\n"
           b"Content-Disposition: form-data; name=\"file\"; filename=\"big.bin\"\r\n\r\n")
    while counter[0] < size:
        counter[0] += len(BLOCK)
        yield BLOCK
    yield b"\r\n--bnd--\r\n"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--over-mb", type=int, default=600)
    parser.add_argument("--store-url", default=None)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ocm-bench-files-"))
    config = tmp / "gateway.toml"
    store = [f'url = "{args.store_url}"'] if args.store_url else []
    config.write_text("\n".join(["[store]", f'path = "{tmp / "responses.sqlite3"}"', *store, "",
                                 '[models."m"]', 'backend = "llamacpp"',
                                 'base_urls = ["http://127.0.0.1:9"]', ""]))
    port = free_port()
    exe = Path(sys.executable).with_name("ocm-gateway")
    cmd = [str(exe), "serve", "--config", str(config), "--host", "127.0.0.1", "--port", str(port),
           "--log-level", "warning"]
    headers = {"content-type": "multipart/form-data; boundary=bnd"}
    with healthy_process(cmd, f"http://127.0.0.1:{port}") as running:
        pid, url = running.process.pid, running.url
        print(f"server RSS at rest: {_status(pid, 'VmRSS')} MiB")
        sent = [0]
        start = time.perf_counter()
        r = httpx.post(f"{url}/v1/files", content=_body(args.mb * MB, sent), headers=headers, timeout=600)
        took = time.perf_counter() - start
        assert r.status_code == 200, r.text
        fid = r.json()["id"]
        print(f"upload {args.mb} MiB: {took:.2f} s, {args.mb / took:.0f} MiB/s; server peak RSS "
              f"{_status(pid, 'VmHWM')} MiB")
        start = time.perf_counter()
        got = 0
        with httpx.stream("GET", f"{url}/v1/files/{fid}/content", timeout=600) as down:
            for chunk in down.iter_bytes():
                got += len(chunk)
        took = time.perf_counter() - start
        print(f"download {got // MB} MiB: {took:.2f} s, {got / MB / took:.0f} MiB/s; server peak RSS "
              f"{_status(pid, 'VmHWM')} MiB")
        httpx.delete(f"{url}/v1/files/{fid}")
        sent = [0]
        start = time.perf_counter()
        try:
            r = httpx.post(f"{url}/v1/files", content=_body(args.over_mb * MB, sent), headers=headers,
                           timeout=600)
            outcome = f"{r.status_code} {r.json()['error']['code']}"
        except httpx.HTTPError as exc:
            outcome = f"connection closed by the server ({type(exc).__name__})"
        print(f"upload {args.over_mb} MiB over the 512 MiB limit: {outcome} after "
              f"{sent[0] // MB} MiB sent, {time.perf_counter() - start:.2f} s; server peak RSS "
              f"{_status(pid, 'VmHWM')} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
