"""The file worker: a process that reads files, so that the gateway can kill it.

A format reader (:data:`READERS`) runs here, never in the
gateway's process: whatever the reader's library does with a hostile file (inflate it, parse
its fonts, recurse through its forms), the gateway stops it by killing the process when the
request's budget runs out or its client leaves (:mod:`app.items.file_jobs`), and its memory
is capped (:data:`MEMORY`, the address space).  It runs at a lower CPU priority than the
gateway.  A file format added later (the Files API's) is a reader here, under the same bounds.

``python -m app.items.file_worker`` serves one request at a time over stdin / stdout:
request = 4-byte length + JSON header (``reader``, ``param``, ``limits``, ``size``) + ``size``
bytes of file; answer = 4-byte length + JSON (``{"ok": value}``, ``{"refused": [message,
param, code]}``, ``{"failed": name}``, ``{"memory": true}``).  JSON both ways: the gateway
never unpickles what a process that read a hostile file says.  A value's ``text`` (up to 20
million characters for ingestion) travels after the JSON as raw UTF-8 (``"text": size`` in the
JSON), which the gateway decodes a megabyte at a time, so that neither parsing the answer nor
decoding it holds the GIL for long.  :class:`Worker` is the gateway's end.

Readers: ``pdf`` (:mod:`app.items.pdf`) and, for ingestion, ``text``, ``json`` and ``html``
(:func:`app.knowledge.extract.read_here`: decoding, JSON validation, the HTML parser).
"""

from __future__ import annotations

import codecs
import contextlib
import json
import os
import select
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

MEMORY = 1024 * 1024 * 1024  # address space of the worker process
NICE = 10  # well below the gateway's priority: /health first


def _pdf(data: bytes, param: str, limits: dict[str, int]) -> Any:
    from app.items import pdf

    return pdf.read(data, param, limits)


def _knowledge(kind: str) -> Callable[[bytes, str, dict[str, int]], Any]:
    def read(data: bytes, param: str, limits: dict[str, int]) -> Any:
        from app.knowledge import extract

        return extract.read_here(kind, data, param, limits)

    return read


READERS: dict[str, Callable[[bytes, str, dict[str, int]], Any]] = {
    "pdf": _pdf, **{kind: _knowledge(kind) for kind in ("text", "json", "html")}}
TEXT_STEP = 1 << 20  # bytes of UTF-8 the gateway decodes at a time (the GIL is free between)


def _read_exact(stream: IO[bytes], size: int) -> bytes:
    chunks: list[bytes] = []
    while size:
        chunk = stream.read(size)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def _answer(header: dict[str, Any], data: bytes) -> dict[str, Any]:
    from app.core.errors import InvalidRequest

    try:
        return {"ok": READERS[header["reader"]](data, header["param"], header["limits"])}
    except InvalidRequest as exc:
        return {"refused": [exc.message, exc.param, exc.code]}
    except MemoryError:
        return {"memory": True}
    except BaseException as exc:  # every failure is an answer; the gateway decides
        return {"failed": type(exc).__name__}


def main() -> None:
    """The worker's loop (in its own process): one file at a time until stdin closes."""
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = MEMORY if hard == resource.RLIM_INFINITY else min(MEMORY, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    with contextlib.suppress(OSError):
        os.nice(NICE)
    out = os.fdopen(os.dup(1), "wb")  # the answers' channel; a stray print goes to stderr
    os.dup2(2, 1)
    source = sys.stdin.buffer
    with contextlib.suppress(ImportError):
        import pypdf  # noqa: F401 (warm: the first file pays nothing)
    while True:
        try:
            (length,) = struct.unpack(">I", _read_exact(source, 4))
            header = json.loads(_read_exact(source, length))
            data = _read_exact(source, header["size"])
        except EOFError:
            return
        answer = _answer(header, data)
        del data
        text = b""
        try:
            value = answer.get("ok")
            if isinstance(value, dict) and isinstance(value.get("text"), str):
                text = value.pop("text").encode("utf-8", "surrogatepass")
                answer["text"] = len(text)
            body = json.dumps(answer).encode()
        except MemoryError:
            body, text = b'{"memory": true}', b""
        out.write(_frame(body))
        out.write(text)
        out.flush()
        if "memory" in answer:
            return  # a worker that ran out of memory is not trusted with the next file


def _decoded(raw: bytes) -> str:
    """``raw`` UTF-8 as text, :data:`TEXT_STEP` bytes at a time: one ``bytes.decode`` of 20 MB
    holds the GIL (and so the gateway's event loop) for tens of milliseconds."""
    decoder = codecs.getincrementaldecoder("utf-8")("surrogatepass")
    view = memoryview(raw)
    parts = [decoder.decode(view[i:i + TEXT_STEP]) for i in range(0, len(raw), TEXT_STEP)]
    parts.append(decoder.decode(b"", final=True))
    return "".join(parts)


class WorkerGone(Exception):
    """The worker process died (killed by the kernel, crashed) before it answered."""


class Worker:
    """The gateway's end of one worker process (used by one thread at a time)."""

    def __init__(self) -> None:
        root = str(Path(__file__).resolve().parents[2])  # the directory holding ``app``
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}
        self.proc = subprocess.Popen([sys.executable, "-m", "app.items.file_worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                     close_fds=True)

    def send(self, reader: str, data: bytes, param: str, limits: dict[str, int]) -> None:
        assert self.proc.stdin is not None
        header = json.dumps({"reader": reader, "param": param, "limits": limits,
                             "size": len(data)}).encode()
        try:
            self.proc.stdin.write(_frame(header))
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            raise WorkerGone from None

    def ready(self, timeout: float) -> bool:
        """Whether the answer has started to arrive (or the process is gone), within ``timeout``."""
        assert self.proc.stdout is not None
        readable, _, _ = select.select([self.proc.stdout], [], [], max(0.0, timeout))
        return bool(readable)

    def answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        try:
            (length,) = struct.unpack(">I", _read_exact(self.proc.stdout, 4))
            found = json.loads(_read_exact(self.proc.stdout, length))
        except (EOFError, OSError, ValueError):
            raise WorkerGone from None
        if not isinstance(found, dict):
            raise WorkerGone
        size = found.pop("text", None)
        if isinstance(size, int) and isinstance(found.get("ok"), dict):
            try:
                found["ok"]["text"] = _decoded(_read_exact(self.proc.stdout, size))
            except (EOFError, OSError):
                raise WorkerGone from None
        return found

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """Stop it now (SIGKILL: whatever it was doing ends here)."""
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)
        for pipe in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                if pipe is not None:
                    pipe.close()


if __name__ == "__main__":
    main()
