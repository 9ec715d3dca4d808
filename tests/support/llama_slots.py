"""A real llama.cpp server (``xllamacpp``, CPU) with ``n_parallel`` slots, on loopback:
:func:`llama_server_slots` is :func:`~tests.support.llama_server.llama_server` with that many
slots (``llama-server -np``), one CPU thread and ``/metrics`` (prompt tokens evaluated,
requests deferred)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path

from tests.support.llama_server import llama_server


def llama_server_slots(model: Path, n_parallel: int, *, n_ctx: int = 4096) -> AbstractContextManager[str]:
    """Serve ``model`` with ``n_parallel`` slots; yields the base URL, stops the server on exit."""
    return llama_server(model, n_ctx=n_ctx, n_parallel=n_parallel, threads=1, metrics=True)
