"""The fake upstream's command line: ``python -m benchmarks.overhead.fake [--verify | --selfbench S]``.

Without ``--verify`` / ``--selfbench`` it serves both dialects and prints one JSON line with its
base URLs (and the answer) before serving forever; see the package docstring.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json

import benchmarks.overhead.fake as package
from benchmarks.overhead.fake.script import Settings
from benchmarks.overhead.fake.selfbench import selfbench
from benchmarks.overhead.fake.server import FakeUpstream
from benchmarks.overhead.fake.verify import verify


async def serve(args: argparse.Namespace) -> None:
    settings = Settings(tokens=args.tokens, ttft=args.ttft, gap=args.gap, n_ctx=args.n_ctx,
                        chat_model=args.chat_model, chat_script=args.chat_script,
                        keepalive_max=args.keepalive_max)
    upstream = FakeUpstream(settings)
    urls = await upstream.start(args.host, args.llamacpp_port, args.openai_port, args.control_port)
    print(json.dumps({**urls, "answer": upstream.script.answer,
                      "answer_tokens": len(upstream.script.answer_ids)}), flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await upstream.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.overhead.fake",
                                     description=package.__doc__.splitlines()[0] if package.__doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--llamacpp-port", type=int, default=0)
    parser.add_argument("--openai-port", type=int, default=0)
    parser.add_argument("--control-port", type=int, default=0)
    parser.add_argument("--tokens", type=int, default=7, help="answer tokens (7: the recorded model)")
    parser.add_argument("--ttft", type=float, default=0.0, help="seconds before the first token")
    parser.add_argument("--gap", type=float, default=0.0, help="seconds between tokens (0: one write)")
    parser.add_argument("--n-ctx", type=int, default=8192, help="context reported by /props, /v1/models")
    parser.add_argument("--chat-model", default="tiny", help="the chat dialect's model name")
    parser.add_argument("--chat-script", choices=["answer", "harmony"], default="answer")
    parser.add_argument("--keepalive-max", type=int, default=100,
                        help="llama.cpp requests per connection before Connection: close (0: no limit)")
    parser.add_argument("--verify", action="store_true", help="replay the recordings and diff")
    parser.add_argument("--selfbench", type=float, metavar="SECONDS",
                        help="measure this server's request rate (per case)")
    args = parser.parse_args(argv)
    if args.verify:
        return 1 if asyncio.run(verify()) else 0
    if args.selfbench:
        asyncio.run(selfbench(args.selfbench))
        return 0
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
