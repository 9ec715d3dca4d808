"""A throwaway PostgreSQL server for a test: Debian's ``postgresql`` binaries (installed by
``.ci/run``), a fresh cluster in a temporary directory (``initdb``, trust auth on loopback,
fsync off), run as the ``postgres`` user when the tests run as root (PostgreSQL refuses root)."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support.process import free_port, stop, wait_for_port


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    path = found[-1] if found else shutil.which(name)
    if path is None:
        raise RuntimeError(f"PostgreSQL's {name} is not installed (apt install postgresql; .ci/run does)")
    return path


class Cluster:
    """One cluster in a temporary directory; :meth:`stop` and :meth:`start` it at will (a
    database that goes away and comes back, same port, same data)."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="ocm-pg-"))
        self.user = "postgres" if os.geteuid() == 0 else None
        if self.user is not None:
            shutil.chown(self.root, self.user)
        self.data, self.port = self.root / "data", free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"postgresql://ocm@127.0.0.1:{self.port}/postgres"
        subprocess.run([_bin("initdb"), "-D", str(self.data), "-U", "ocm", "--auth=trust", "-E", "UTF8"],
                       check=True, capture_output=True, user=self.user, cwd=self.root)

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [_bin("postgres"), "-D", str(self.data), "-k", str(self.root), "-p", str(self.port),
             "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "full_page_writes=off",
             "-c", "synchronous_commit=off"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, user=self.user, cwd=self.root)
        wait_for_port(self.proc, self.port, 30, "PostgreSQL")
        time.sleep(0.3)  # accepting connections a moment after the port opens

    def stop(self) -> None:
        """A fast shutdown (SIGINT: sessions are ended, not waited for), as a restart or a
        failover does; SIGKILL if it takes over 10 s."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                stop(self.proc)
            self.proc = None

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def postgres_cluster() -> Iterator[Cluster]:
    cluster = Cluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.remove()


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """Start one; yields its URL (``postgresql://ocm@127.0.0.1:PORT/postgres``)."""
    with postgres_cluster() as cluster:
        yield cluster.url


async def fresh_database(url: str) -> str:
    """The URL of a new, empty database on the server at ``url``."""
    import uuid

    import asyncpg

    name = f"t{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(url)
    try:
        await admin.execute(f"CREATE DATABASE {name}")
    finally:
        await admin.close()
    return url.rsplit("/", 1)[0] + f"/{name}"


async def fresh_pool(url: str, max_size: int = 4) -> Any:
    """An ``open_pool`` (migrated) on a new database of the server at ``url``: each test
    starts empty."""
    from app.stores.postgres import open_pool

    return await open_pool(await fresh_database(url), max_size=max_size)
