"""A throwaway PostgreSQL server for a test: Debian's ``postgresql`` binaries (installed by
``.ci/run``), a fresh cluster in a temporary directory (``initdb``, trust auth on loopback,
fsync off), run as the ``postgres`` user when the tests run as root (PostgreSQL refuses root)."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tests.support.process import free_port, stop


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    path = found[-1] if found else shutil.which(name)
    if path is None:
        raise RuntimeError(f"PostgreSQL's {name} is not installed (apt install postgresql; .ci/run does)")
    return path


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """Start one; yields its URL (``postgresql://ocm@127.0.0.1:PORT/postgres``)."""
    root = Path(tempfile.mkdtemp(prefix="ocm-pg-"))
    user = "postgres" if os.geteuid() == 0 else None
    if user is not None:
        shutil.chown(root, user)
    data, port = root / "data", free_port()
    proc: subprocess.Popen[bytes] | None = None
    try:
        subprocess.run([_bin("initdb"), "-D", str(data), "-U", "ocm", "--auth=trust", "-E", "UTF8"],
                       check=True, capture_output=True, user=user, cwd=root)
        proc = subprocess.Popen([_bin("postgres"), "-D", str(data), "-k", str(root), "-p", str(port),
                                 "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
                                 "-c", "full_page_writes=off", "-c", "synchronous_commit=off"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, user=user, cwd=root)
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL did not start ({proc.returncode})")
            time.sleep(0.05)
        time.sleep(0.3)  # accepting connections a moment after the port opens
        yield f"postgresql://ocm@127.0.0.1:{port}/postgres"
    finally:
        if proc is not None:
            stop(proc)
        shutil.rmtree(root, ignore_errors=True)
