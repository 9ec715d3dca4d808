"""A throwaway Redis for a test: Debian's ``redis-server`` (installed by ``.ci/run``) on a
free loopback port, nothing persisted; :meth:`RedisServer.stop` / :meth:`start` take it away
and bring it back on the same port."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator

from tests.support.process import free_port, stop, wait_for_port


class RedisServer:
    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt install redis-server; .ci/run does)")
        self.binary, self.port = binary, free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen([self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
                                      "--save", "", "--appendonly", "no", "--protected-mode", "yes"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(self.proc, self.port, 20, "redis-server")

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc)
            self.proc = None


@contextlib.contextmanager
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()
