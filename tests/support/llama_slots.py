"""A real llama.cpp server (``xllamacpp``, CPU) with ``n_parallel`` slots, on loopback.

``python -m tests.support.llama_slots MODEL PORT N_CTX N_PARALLEL`` serves MODEL with that many
slots (``llama-server -np``; :mod:`tests.support.xllama_main` always runs one) and ``/metrics``
until killed;
:func:`llama_server_slots` starts it and yields its base URL.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.process import free_port, healthy_process


@contextmanager
def llama_server_slots(model: Path, n_parallel: int, *, n_ctx: int = 4096) -> Iterator[str]:
    port = free_port()
    cmd = [sys.executable, "-m", "tests.support.llama_slots", str(model), str(port), str(n_ctx),
           str(n_parallel)]
    with healthy_process(cmd, f"http://127.0.0.1:{port}") as running:
        yield running.url


def main(argv: list[str]) -> int:
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = argv[0]
    params.port = int(argv[1])
    params.n_ctx = int(argv[2])
    params.n_parallel = int(argv[3])
    params.endpoint_metrics = True  # /metrics: prompt tokens evaluated, requests deferred
    params.cpuparams.n_threads = 1
    params.cpuparams_batch.n_threads = 1
    params.hostnames = ["127.0.0.1"]
    server = xllamacpp.Server(params)
    print(f"listening {server.listening_address}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
