"""Clients that give up while queued, in front of a real llama.cpp server with few slots.

``python -m benchmarks.slots_giveup --tree before=PATH --tree now=PATH [--slots 2] [--clients 16]
[--leave 0.5] [--patience 1.0] [--prompt-words 1500] [--max-tokens 64] [--rounds 3] [--json P]``
starts llama.cpp's ``llama-server`` (``xllamacpp``, CPU, ``--slots`` parallel slots, metrics on)
on the scripted tiny model of the tests, then per round, per tree (interleaved), its gateway
(``ocm-gateway serve`` from that tree, defaults) and one burst: ``--clients`` streamed chat
completions at once, each with its own prompt of ``--prompt-words`` words (no prompt-cache
reuse, so each costs a full prompt evaluation) asking for ``--max-tokens`` tokens
(``ignore_eos``).  Every ``1/leave``-th client (a ``--leave`` share, spread over the queue) gives
up when it has no first token after ``--patience`` seconds and closes its connection.

Reported per tree: for the clients that stay, time to first token (connect → first SSE event)
p50 / p90 / max and the time until the last of them finished; how many of those that gave up
were served before they would have; and what the server did in the burst (``/metrics``: prompt
tokens evaluated, tokens generated), so work spent on clients that had gone shows.  Before each
burst the server must be idle.  Exit status 0 unless the run breaks.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx

from benchmarks.loadstats import pct
from benchmarks.overhead.processes import start_gateway
from benchmarks.overhead.trees import Tree, git_commit, parse_tree
from tests.support.fixtures import SCRIPT_FINAL
from tests.support.llama_slots import llama_server_slots
from tests.support.scripted_gguf import scripted_model

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
         "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango",
         "uniform", "victor", "whiskey", "xray", "yankee", "zulu"]


@dataclass
class Client:
    leaves: bool
    first: float | None = None
    end: float | None = None
    left: bool = False
    error: str = ""


def _prompt(i: int, words: int, salt: int) -> str:
    """A prompt of its own (a different first words per client and round: no shared prefix)."""
    head = f"Request {salt}-{i}: "
    return head + " ".join(WORDS[(i * 7 + salt + k) % len(WORDS)] for k in range(words))


async def _client(http: httpx.AsyncClient, body: dict[str, Any], c: Client, patience: float,
                  t0: float) -> None:
    try:
        async with contextlib.AsyncExitStack() as stack:
            try:  # the gateway answers its headers with the first token: the wait covers both
                async with asyncio.timeout(patience if c.leaves else None):
                    response = await stack.enter_async_context(
                        http.stream("POST", "/v1/chat/completions", json=body))
                    if response.status_code != 200:
                        c.error = f"status {response.status_code}: {(await response.aread())[:200]!r}"
                        return
                    lines = response.aiter_lines()
                    async for line in lines:
                        if line.startswith("data:"):
                            c.first = time.perf_counter() - t0
                            break
            except TimeoutError:
                c.left = True  # leaving the stack closes the connection: the gateway sees it
                return
            async for _ in lines:
                pass
            c.end = time.perf_counter() - t0
    except httpx.HTTPError as exc:
        c.error = f"{type(exc).__name__}: {exc}"[:200]


async def _metrics(http: httpx.AsyncClient, llama: str) -> dict[str, float]:
    text = (await http.get(f"{llama}/metrics")).text
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.partition(" ")
            out[name.removeprefix("llamacpp:")] = float(value)
    return out


async def _idle(http: httpx.AsyncClient, llama: str) -> None:
    for _ in range(600):
        m = await _metrics(http, llama)
        if m.get("requests_processing", 0) == 0 and m.get("requests_deferred", 0) == 0:
            return
        await asyncio.sleep(0.1)
    raise RuntimeError("llama.cpp did not go idle in 60 s")


async def burst(gateway: str, llama: str, args: argparse.Namespace, salt: int) -> dict[str, Any]:
    every = round(1 / args.leave) if args.leave > 0 else 0
    clients = [Client(leaves=bool(every) and i % every == every - 1) for i in range(args.clients)]
    limits = httpx.Limits(max_connections=args.clients + 8, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=gateway, timeout=300, limits=limits) as http, \
            httpx.AsyncClient(timeout=10) as probe:
        await _idle(probe, llama)
        before = await _metrics(probe, llama)
        t0 = time.perf_counter()
        await asyncio.gather(*(
            _client(http, {"model": "final", "stream": True, "max_tokens": args.max_tokens,
                           "ignore_eos": True,
                           "messages": [{"role": "user", "content": _prompt(i, args.prompt_words, salt)}]},
                    c, args.patience, t0)
            for i, c in enumerate(clients)))
        await _idle(probe, llama)
        after = await _metrics(probe, llama)
    stay = [c for c in clients if not c.leaves]
    ttft = [c.first for c in stay if c.first is not None]

    def ms(v: float | None) -> float | None:
        return None if v is None else round(v * 1000, 1)

    return {
        "stay": len(stay), "stay_ok": sum(c.end is not None for c in stay),
        "errors": sum(bool(c.error) for c in clients),
        "first_error": next((c.error for c in clients if c.error), None),
        "left": sum(c.left for c in clients), "leavers_served": sum(c.leaves and not c.left for c in clients),
        "ttft_ms": {"p50": ms(pct(ttft, 0.5)), "p90": ms(pct(ttft, 0.9)), "max": ms(pct(ttft, 1.0))},
        "stay_done_ms": ms(max((c.end for c in stay if c.end is not None), default=None)),
        "prompt_tokens": after.get("prompt_tokens_total", 0) - before.get("prompt_tokens_total", 0),
        "generated_tokens": (after.get("tokens_predicted_total", 0)
                             - before.get("tokens_predicted_total", 0)),
        "load_average": os.getloadavg(),
    }


def _config(llama: str, port: int, n_ctx: int) -> str:
    return "\n".join([
        'host = "127.0.0.1"', f"port = {port}", "", "[store]", 'path = ":memory:"', "",
        '[models."final"]', 'backend = "llamacpp"', f'base_urls = ["{llama}"]',
        f"context_window = {n_ctx}", '[models."final".harmony]', 'current_date = "2026-11-28"', ""])


async def _warm(gateway: str) -> None:
    async with httpx.AsyncClient(base_url=gateway, timeout=60) as http:
        r = await http.post("/v1/chat/completions", json={
            "model": "final", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
        r.raise_for_status()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tree", type=parse_tree, action="append", metavar="LABEL=PATH",
                        help="a gateway source tree (repeatable); default: this checkout")
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--leave", type=float, default=0.5, help="share of clients that give up")
    parser.add_argument("--patience", type=float, default=1.0, help="seconds before they give up")
    parser.add_argument("--prompt-words", type=int, default=1500)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/slots_giveup"))
    args = parser.parse_args(argv)
    trees: list[Tree] = args.tree or [Tree.at("this", Path(__file__).resolve().parents[1])]
    per_slot = 8192
    model = scripted_model("final", SCRIPT_FINAL)
    runs: list[dict[str, Any]] = []
    with llama_server_slots(model, args.slots, n_ctx=per_slot * args.slots) as llama:
        for round_ in range(args.rounds):
            for tree in trees:
                workdir = args.workdir / f"{tree.label}-{round_}"
                workdir.mkdir(parents=True, exist_ok=True)
                with start_gateway(cast(Any, None), tree, workdir, "warning",
                                   lambda port: _config(llama, port, per_slot)) as gw:
                    asyncio.run(_warm(gw.url))
                    result = {"tree": tree.label, "commit": git_commit(tree.path), "round": round_ + 1,
                              **asyncio.run(burst(gw.url, llama, args, salt=round_ * 100 + len(runs)))}
                runs.append(result)
                print(json.dumps(result), file=sys.stderr, flush=True)
    print("| tree | round | stay ok | TTFT p50 ms | p90 | max | last stayer done ms | gave up | "
          "served before giving up | prompt tokens evaluated | tokens generated | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in runs:
        t = r["ttft_ms"]
        print(f"| {r['tree']} | {r['round']} | {r['stay_ok']}/{r['stay']} | {t['p50']} | {t['p90']} | "
              f"{t['max']} | {r['stay_done_ms']} | {r['left']} | {r['leavers_served']} | "
              f"{r['prompt_tokens']:.0f} | {r['generated_tokens']:.0f} | "
              f"{r['load_average'][0]:.1f} |")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                         "runs": runs}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
