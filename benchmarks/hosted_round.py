"""The gateway's own cost of one hosted-tool round of the agentic loop.

``python -m benchmarks.hosted_round [--rounds 4] [--repeat 60]``

In process (the ASGI app over httpx, no sockets): a response whose model answers at once
(0 rounds) and one whose model calls ``browser.search`` ``--rounds`` times before answering,
each a non-streamed ``/v1/responses`` with ``web_search`` over the offline index of
``tests/fixtures/web_corpus``.  The fake llama.cpp (a MockTransport) picks its answer from the
number of ``<|call|>`` tokens in the prompt ids, with every answer's SSE bytes built in
advance; the time spent inside it (the model's) and inside the search provider (the tool's
own) is measured and taken out.  What is left per round is the gateway's: classifying the
step, running the call through the toolbox, the items and events, and rendering, tokenizing
and budgeting the longer prompt of the next step.

Interleaved: each repeat runs both kinds back to back; medians are reported.
"""

from __future__ import annotations

import argparse
import asyncio
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

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "web_corpus"
MODEL = "bench"
CALL_ID = 200012  # <|call|>


def _sse(script: str) -> bytes:
    enc = harmony_encoding()
    ids = list(enc.encode(script, allowed_special="all"))
    out = []
    for n, tok in enumerate(ids, 1):
        piece = "" if tok in (200002, 200012) else enc.decode([tok])
        out.append(b"data: " + json.dumps({"content": piece, "tokens": [tok], "stop": False,
                                             "tokens_predicted": n, "tokens_evaluated": 100}).encode())
    out.append(b"data: " + json.dumps({"content": "", "tokens": [], "stop": True, "stop_type": "eos",
                                         "tokens_predicted": len(ids), "tokens_evaluated": 100}).encode())
    return b"\n\n".join(out) + b"\n\n"


class Model:
    """Calls the search tool until the prompt holds ``rounds`` calls, then answers."""

    def __init__(self) -> None:
        self.call = _sse('<|channel|>commentary to=browser.search <|constrain|>json'
                         '<|message|>{"query":"agentic loop"}<|call|>')
        self.answer = _sse("<|channel|>final<|message|>The loop samples, runs tools, repeats.<|return|>")
        self.rounds = 0
        self.seconds = 0.0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        t0 = time.perf_counter()
        prompt = json.loads(request.content)["prompt"]
        body = self.call if prompt.count(CALL_ID) < self.rounds else self.answer
        response = httpx.Response(200, headers={"content-type": "text/event-stream"},
                                  stream=httpx.ByteStream(body))
        self.seconds += time.perf_counter() - t0
        return response


class TimedIndex:
    """The offline index, with the time spent in it (the tool's own) counted."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.external, self.seconds = inner, False, 0.0

    async def search(self, query: str, *, limit: int, domains: Any = ()) -> Any:
        t0 = time.perf_counter()
        try:
            return await self.inner.search(query, limit=limit, domains=domains)
        finally:
            self.seconds += time.perf_counter() - t0

    async def page(self, url: str) -> Any:
        return await self.inner.page(url)


async def run(rounds: int, repeat: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp())
    cfg = GatewayConfig.model_validate({
        "store": {"path": ":memory:"},
        "tools": {"web_search": {"documents": str(CORPUS), "index": str(tmp / "web.sqlite3")}},
        "models": {MODEL: {"backend": "llamacpp", "base_urls": ["http://llama.test:8080"],
                           "context_window": 16384, "harmony": {"current_date": "2026-11-26"}}}})
    model = Model()
    app = create_app(cfg, transport=httpx.MockTransport(model))
    body = {"model": MODEL, "input": "What is the agentic loop?", "tools": [{"type": "web_search"}],
            "store": False}
    samples: dict[int, list[float]] = {0: [], rounds: []}
    async with app.router.lifespan_context(app):
        timed = TimedIndex(app.state.responses.search)
        app.state.responses.search = timed
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
            for n in range(repeat + 5):
                for k in (0, rounds):
                    model.rounds, model.seconds, timed.seconds = k, 0.0, 0.0
                    t0 = time.perf_counter()
                    r = await c.post("/v1/responses", json=body)
                    elapsed = time.perf_counter() - t0
                    assert r.status_code == 200, r.text
                    calls = sum(1 for i in r.json()["output"] if i["type"] == "web_search_call")
                    assert calls == k, (k, calls)
                    if n >= 5:  # warm-up
                        samples[k].append(elapsed - model.seconds - timed.seconds)
    base, looped = statistics.median(samples[0]), statistics.median(samples[rounds])
    return {"rounds": rounds, "repeat": repeat, "no_tool_ms": round(base * 1000, 3),
            "with_tools_ms": round(looped * 1000, 3),
            "per_round_ms": round((looped - base) / rounds * 1000, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=60)
    args = parser.parse_args()
    result = asyncio.run(run(args.rounds, args.repeat))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
