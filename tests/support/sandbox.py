"""The project's sandbox service (``ocm-gateway sandbox``) for a test: its own process, real
bubblewrap (Debian's ``bubblewrap``, installed by ``.ci/run``), a container root every
container uid can enter (pytest's temporary directories are mode 0700)."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests.support.process import Running, free_port, healthy_process

TOKEN = "sandbox-token"


@contextlib.contextmanager
def sandbox_service(*options: str, env: dict[str, str] | None = None) -> Iterator[Running]:
    root = Path(tempfile.mkdtemp(prefix="ocm-sandbox-test-"))
    port = free_port()
    cmd = [sys.executable, "-m", "app.cli.main", "sandbox", "--port", str(port), "--root", str(root),
           "--token", TOKEN, *options]
    try:
        url = f"http://127.0.0.1:{port}"
        with healthy_process(cmd, url, timeout=30, env=env or dict(os.environ)) as running:
            yield running
    finally:
        shutil.rmtree(root, ignore_errors=True)
