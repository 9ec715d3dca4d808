"""The interpreter inside a sandbox container: a stateful Python REPL (like gpt-oss's ``python``
tool and a Jupyter kernel: globals live across cells).

Runs under :mod:`app.sandbox.isolate` (its own namespaces, limits and uid), started as
``python3 -I worker.py 3``.  It uses only the standard library.  Protocol with the
supervisor (:mod:`app.sandbox.containers`), one request at a time: on fd 0 a frame (4-byte
big-endian length, then UTF-8 JSON ``{"code": str, "max_output": int}``); on the private fd
named by ``argv[1]`` the reply frame ``{"output": str, "truncated": int, "error": str|null}``.

At start the worker moves its protocol channel to a private fd and points fds 1 and 2 at
/dev/null, so what a cell writes straight to a file descriptor (``os.write(1, ...)``, a child
process) cannot corrupt the protocol; ``print`` and tracebacks are captured per cell, cut at
``max_output`` characters (the rest is counted, not kept).  The value of a final expression is
shown the way an interactive interpreter shows it.  Processes a cell starts end with its run.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import struct
import sys
import traceback
from typing import Any


class _Capped(io.TextIOBase):
    def __init__(self, limit: int) -> None:
        self.limit, self.size, self.dropped = limit, 0, 0
        self.parts: list[str] = []

    def write(self, s: str) -> int:
        room = self.limit - self.size
        if room > 0:
            self.parts.append(s[:room])
            self.size += min(len(s), room)
        self.dropped += max(0, len(s) - max(room, 0))
        return len(s)

    def text(self) -> str:
        return "".join(self.parts)


def _read_exact(fd: int, n: int) -> bytes:
    chunks = []
    while n:
        chunk = os.read(fd, n)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _run(code: str, namespace: dict[str, Any], out: _Capped) -> str | None:
    try:
        tree = ast.parse(code, "<cell>", "exec")
        last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        if last is not None:
            tree.body.pop()
        exec(compile(tree, "<cell>", "exec"), namespace)
        if last is not None:
            value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), namespace)
            if value is not None:
                print(repr(value), file=out)
        return None
    except BaseException as exc:  # the cell's failure is its output
        if isinstance(exc, SystemExit | KeyboardInterrupt):
            return f"{type(exc).__name__}: {exc}"
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == "<cell>"]
        head = ("Traceback (most recent call last):\n" + "".join(traceback.format_list(frames))
                if frames else "")
        print((head + "".join(traceback.format_exception_only(type(exc), exc))).rstrip(), file=out)
        return f"{type(exc).__name__}: {exc}"


def _reap_others(me: int) -> None:
    """Processes a run started do not outlive it: every process of the container's PID
    namespace but its init (1), the worker and the worker's parent is killed."""
    keep = {1, me, os.getppid()}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in keep:
            with contextlib.suppress(OSError):
                os.kill(int(entry), 9)
    for _ in range(4096):  # every child was killed: each wait returns at once
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def main() -> None:
    reply_fd = int(sys.argv[1])
    me = os.getpid()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    namespace: dict[str, Any] = {"__name__": "__main__"}
    while True:
        try:
            size = struct.unpack(">I", _read_exact(0, 4))[0]
            request = json.loads(_read_exact(0, size))
        except EOFError:
            return
        out = _Capped(int(request.get("max_output", 20_000)))
        sys.stdout = sys.stderr = out
        try:
            error = _run(str(request["code"]), namespace, out)
        finally:
            if os.getpid() != me:  # a process the cell forked came back here: it ends now
                os._exit(0)
            sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
        _reap_others(me)
        reply = json.dumps({"output": out.text(), "truncated": out.dropped, "error": error}).encode()
        os.write(reply_fd, struct.pack(">I", len(reply)) + reply)


if __name__ == "__main__":
    main()
