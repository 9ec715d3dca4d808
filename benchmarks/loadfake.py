"""The paced fake llama.cpp ``/completion`` of ``benchmarks.load``, run in its own process.

``python -m benchmarks.loadfake --ttft S --gap S --tokens N`` prints its port, then answers
one request per connection: response headers at once, the first SSE event after ``ttft``
seconds, then a Harmony answer (3 header tokens, ``N`` × "Hello", ``<|return|>``) with ``gap``
seconds between events, and llama.cpp's final ``"stop":true`` event. A request whose body
carries ``"seed": WARM_UP`` is answered unpaced (the load test's warm-up); a GET gets ``{}``.
"""

from __future__ import annotations

import argparse
import asyncio
import resource

HEADER = [200005, 17196, 200008]  # <|channel|>final<|message|>
WORD = 13225  # "Hello"
RETURN = 200002
WARM_UP = 987654321  # a seed the fake answers at once (the gateway passes it through)


async def _upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    args: argparse.Namespace) -> None:
    """One llama.cpp-like request per connection: headers, ``ttft``, then paced token events."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        body = await reader.readexactly(length)
        if head.startswith(b"GET"):
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
            await writer.drain()
            return
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"transfer-encoding: chunked\r\n\r\n")
        await writer.drain()
        paced = b'"seed":%d' % WARM_UP not in body
        await asyncio.sleep(args.ttft if paced else 0)
        ids = [*HEADER, *[WORD] * args.tokens, RETURN]
        for n, tok in enumerate(ids):
            event = b'data: {"content":"x","tokens":[%d],"stop":false}\n\n' % tok
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            await writer.drain()
            if paced and args.gap and n < len(ids) - 1:
                await asyncio.sleep(args.gap)
        end = (b'data: {"content":"","tokens":[],"stop":true,"stop_type":"eos",'
               b'"tokens_evaluated":50,"tokens_predicted":%d,"timings":{}}\n\n' % len(ids))
        writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(end), end))
        await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def _serve_fake(args: argparse.Namespace) -> None:
    server = await asyncio.start_server(lambda r, w: _upstream(r, w, args), "127.0.0.1", 0,
                                        backlog=8192)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tokens", type=int, default=20)
    parser.add_argument("--ttft", type=float, default=0.5)
    parser.add_argument("--gap", type=float, default=0.25)
    args = parser.parse_args(argv)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    asyncio.run(_serve_fake(args))


if __name__ == "__main__":
    main()
