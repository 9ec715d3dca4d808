"""What storing costs a request: ``store: false`` vs SQLite vs PostgreSQL.

``python -m benchmarks.store_cost [--n 300]``: in process (the ASGI app over httpx, a fake
llama.cpp answering a short Harmony text at once), non-streamed ``/v1/responses``; the three
configurations interleaved over 3 rounds, median milliseconds per request.  PostgreSQL is a
throwaway local server (tests/support/postgres.py, fsync off: the database's own durability
cost is not measured, only the gateway's round trips and encoding).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from app.config import GatewayConfig
from app.formats.harmony.vocab import harmony_encoding
from app.main import create_app
from tests.support.postgres import postgres_server

MODEL = "bench"


def _answer() -> bytes:
    enc = harmony_encoding()
    ids = list(enc.encode("<|channel|>final<|message|>Stored or not, here it is.<|return|>",
                          allowed_special="all"))
    events = [json.dumps({"content": "" if t == 200002 else enc.decode([t]), "tokens": [t],
                          "stop": False}) for t in ids]
    events.append(json.dumps({"content": "", "tokens": [], "stop": True, "stop_type": "eos",
                              "tokens_predicted": len(ids), "tokens_evaluated": 50}))
    return b"".join(b"data: " + e.encode() + b"\n\n" for e in events)


async def run(n: int) -> dict[str, Any]:
    body = _answer()
    transport = httpx.MockTransport(lambda r: httpx.Response(
        200, headers={"content-type": "text/event-stream"}, stream=httpx.ByteStream(body)))
    tmp = Path(tempfile.mkdtemp())
    with postgres_server() as pg:
        configs = {
            "store false": ({"path": str(tmp / "a.sqlite3")}, False),
            "SQLite": ({"path": str(tmp / "b.sqlite3")}, True),
            "PostgreSQL": ({"path": str(tmp / "c.sqlite3"), "url": pg}, True),
        }
        apps = {}
        for name, (store, _) in configs.items():
            cfg = GatewayConfig.model_validate({"store": store, "models": {MODEL: {
                "backend": "llamacpp", "base_urls": ["http://llama.test:8080"], "context_window": 4096,
                "harmony": {"current_date": "2026-11-26"}}}})
            apps[name] = create_app(cfg, transport=transport)
        samples: dict[str, list[float]] = {name: [] for name in configs}
        async with contextlib.AsyncExitStack() as stack:
            clients = {}
            for name, app in apps.items():
                await stack.enter_async_context(app.router.lifespan_context(app))
                clients[name] = await stack.enter_async_context(
                    httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw"))
            for _ in range(3):
                for name, c in clients.items():
                    times = []
                    for i in range(n):
                        t0 = time.perf_counter()
                        r = await c.post("/v1/responses", json={"model": MODEL, "input": f"hi {i}",
                                                                 "store": configs[name][1]})
                        times.append(time.perf_counter() - t0)
                        assert r.status_code == 200, r.text
                    samples[name].append(statistics.median(times))
    return {name: round(statistics.median(v) * 1000, 3) for name, v in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=300)
    print(json.dumps(asyncio.run(run(parser.parse_args().n))))


if __name__ == "__main__":
    main()
