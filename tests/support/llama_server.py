"""Start a real llama.cpp server (llama-server embedded in the ``xllamacpp`` wheel, CPU) on
loopback, as a process of its own (:mod:`tests.support.xllama_main`)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.process import free_port, healthy_process


@contextmanager
def llama_server(model: Path, *, n_ctx: int = 4096, mmproj: Path | None = None, n_parallel: int = 1,
                 threads: int = 2, metrics: bool = False) -> Iterator[str]:
    """Serve ``model`` (with a multimodal projector: ``--mmproj``) with ``n_parallel`` slots
    on ``threads`` CPU threads (``metrics``: with ``/metrics``); yields the base URL, stops the
    server on exit."""
    port = free_port()
    cmd = [sys.executable, "-m", "tests.support.xllama_main", str(model), str(port), str(n_ctx),
           *([str(mmproj)] if mmproj is not None else []), "--parallel", str(n_parallel),
           "--threads", str(threads), *(["--metrics"] if metrics else [])]
    with healthy_process(cmd, f"http://127.0.0.1:{port}") as running:
        yield running.url
