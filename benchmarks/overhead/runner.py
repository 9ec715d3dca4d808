"""Measuring: one phase (a target at a concurrency, with warm-up, CPU and fake counters, checked
answers), the rotated order of a round, and the warm-up plus all rounds (then ``--sweep``)."""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import orjson

from benchmarks.overhead.client import RawClient, percentile, sse_content
from benchmarks.overhead.processes import Fake, Gateway, cpu_seconds
from benchmarks.overhead.proxy import Proxy
from benchmarks.overhead.sweep import sweep
from benchmarks.overhead.targets import HARMONY_PROMPT, UPSTREAM_COUNTERS, Phase, Target

T = TypeVar("T")


@dataclass(frozen=True)
class _Events:
    """How an answer of an API of typed events is checked: what marks it ended (streamed, whole;
    ``unended`` names its absence), the type of a stream's last event, and the answer's text from
    a streamed event and from a whole body."""

    streamed_end: bytes
    whole_end: bytes
    unended: str
    last: str
    delta: Callable[[Any], str]
    text: Callable[[Any], str]


_EVENTS = {
    "responses": _Events(
        b"event: response.completed", b'"status":"completed"', "not completed", "response.completed",
        lambda e: e["delta"] if e["type"] == "response.output_text.delta" else "",
        lambda r: "".join(part["text"] for item in r["output"] if item["type"] == "message"
                          for part in item["content"])),
    "messages": _Events(
        b"event: message_stop", b'"stop_reason":"end_turn"', "not ended", "message_stop",
        lambda e: e["delta"].get("text", "") if e["type"] == "content_block_delta" else "",
        lambda m: "".join(block.get("text", "") for block in m["content"] if block["type"] == "text")),
}


class Runner:
    """Sends requests to the targets and checks the answers."""

    def __init__(self, client: httpx.AsyncClient, raw: RawClient | None, fake: Fake,
                 gateways: dict[str, Gateway], litellm: Proxy | None, targets: Sequence[Target],
                 prompt_ids: list[int]) -> None:
        self.client = client  # httpx: the fake's control port, and requests with --client httpx
        self.raw = raw
        self.fake = fake
        self.gateways = gateways  # by tree label
        self.answer = fake.answer
        self.answer_json = orjson.dumps(fake.answer)
        self.bodies = {t.name: t.body(prompt_ids) for t in targets}
        self.urls: dict[tuple[str, str | None], str] = {}
        for t in targets:
            if t.server == "gateway":
                for label, gateway in gateways.items():
                    self.urls[(t.name, label)] = gateway.url + t.path
            elif t.server == "litellm":
                assert litellm is not None, "a LiteLLM target without the LiteLLM proxy"
                self.urls[(t.name, None)] = litellm.url + t.path
            else:
                self.urls[(t.name, None)] = fake.urls[t.server] + t.path
        # the proxies whose CPU time is read: the gateways by tree label, and "litellm"
        self.proxies = {label: g.process.pid for label, g in gateways.items()}
        if litellm is not None:
            self.proxies["litellm"] = litellm.process.pid
        self.llamacpp_content = "<|channel|>final<|message|>" + fake.answer
        self._seq = 0

    async def request(self, target: Target, tree: str | None, tag: str, full_check: bool,
                      ) -> tuple[float, float, str | None]:
        """One request to ``target`` (of gateway ``tree``): (seconds to the last byte, seconds to
        the first body byte, error)."""
        self._seq += 1
        request_id = f"{tag}-{self._seq}"
        body = self.bodies[target.name]
        url = httpx.URL(self.urls[(target.name, tree)])
        t0 = time.perf_counter()
        try:
            if self.raw is not None:
                request = (b"POST %s HTTP/1.1\r\nhost: %s:%d\r\ncontent-type: application/json\r\n"
                           b"x-request-id: %s\r\ncontent-length: %d\r\n\r\n%s"
                           % (url.raw_path, url.raw_host, url.port or 80, request_id.encode(),
                              len(body), body))
                status, data, first = await self.raw.post(url.host, url.port or 80, request)
            else:
                status, data, first = await self._httpx(url, body, request_id)
        except (OSError, asyncio.IncompleteReadError, httpx.HTTPError) as exc:
            return 0.0, 0.0, f"{type(exc).__name__}: {exc}"
        end = time.perf_counter()
        return end - t0, (first or end) - t0, self.check(target, status, data, full_check)

    async def _httpx(self, url: httpx.URL, body: bytes, request_id: str) -> tuple[int, bytes, float]:
        headers = {"content-type": "application/json", "x-request-id": request_id}
        first = 0.0
        parts: list[bytes] = []
        async with self.client.stream("POST", url, content=body, headers=headers) as resp:
            async for chunk in resp.aiter_bytes():
                if not first:
                    first = time.perf_counter()
                parts.append(chunk)
            return resp.status_code, b"".join(parts), first

    def check(self, target: Target, status: int, body: bytes, full: bool) -> str | None:
        if status != 200:
            return f"HTTP {status}: {body[:300]!r}"
        if target.server == "llamacpp":
            return self.check_completion(body, full)
        if target.api in _EVENTS:
            return self.check_events(_EVENTS[target.api], target, body, full)
        if not full:  # cheap: enough to catch a wrong or truncated answer under load
            if target.stream:
                return None if body.endswith(b"data: [DONE]\n\n") else f"stream not ended: {body[-200:]!r}"
            return None if self.answer_json in body else f"answer missing: {body[:300]!r}"
        try:
            if target.stream:
                content, done = sse_content(body)
                if not done:
                    return f"stream without [DONE]: {body[-200:]!r}"
            else:
                content = orjson.loads(body)["choices"][0]["message"]["content"]
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError) as exc:
            return f"unparsable answer ({exc}): {body[:300]!r}"
        return self.same(content)

    def check_events(self, api: _Events, target: Target, body: bytes, full: bool) -> str | None:
        """``/v1/responses`` and ``/v1/messages``: the answer's text, and (streamed) the API's
        last event."""
        if not full:
            ended = api.streamed_end in body if target.stream else api.whole_end in body
            ok = ended and (target.stream or self.answer_json in body)
            return None if ok else f"{api.unended}: {body[-300:]!r}"
        try:
            if target.stream:
                events = [orjson.loads(line[6:]) for line in body.split(b"\n")
                          if line.startswith(b"data: ") and line != b"data: [DONE]"]
                content = "".join(api.delta(e) for e in events)
                if [e["type"] for e in events][-1:] != [api.last]:
                    return f"stream {api.unended}: {body[-200:]!r}"
            else:
                content = api.text(orjson.loads(body))
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError) as exc:
            return f"unparsable answer ({exc}): {body[:300]!r}"
        return self.same(content)

    def same(self, content: str) -> str | None:
        return None if content == self.answer else f"content {content[:100]!r} != {self.answer[:100]!r}"

    def check_completion(self, body: bytes, full: bool) -> str | None:
        """A llama.cpp ``/completion`` stream: the Harmony answer, then ``stop_type: eos``."""
        if not full:
            return None if b'"stop_type":"eos"' in body[-4096:] else f"no eos: {body[-200:]!r}"
        events = [orjson.loads(block[6:]) for block in body.split(b"\n\n") if block.startswith(b"data: ")]
        content = "".join(str(e.get("content", "")) for e in events)
        if not events or events[-1].get("stop_type") != "eos":
            return f"stream did not end with stop_type eos: {body[-200:]!r}"
        return None if content == self.llamacpp_content else f"content {content[:100]!r}"

    async def fake_stats(self) -> dict[str, Any]:
        resp = await self.client.get(self.fake.urls["control"] + "/stats")
        return dict(resp.json())

    def cpu(self, proxy: str | None) -> dict[str, float]:
        """CPU seconds so far: ``gateway`` is the proxy measured (a tree's gateway or LiteLLM,
        with its worker processes; for a direct target: all proxies, idle), ``idle_gateways``
        the other proxies (expected ~0)."""
        per = {label: cpu_seconds(pid) for label, pid in self.proxies.items()}
        mine = per.pop(proxy) if proxy is not None else sum(per.values())
        return {"gateway": mine, "idle_gateways": sum(per.values()) if proxy is not None else 0.0,
                "fake": cpu_seconds(self.fake.process.pid), "client": time.process_time()}

    async def phase(self, target: Target, tree: str | None, rnd: int, kind: str, concurrency: int,
                    requests: int, seconds: float, warmup: int) -> Phase:
        tag = f"bench-{target.name}-r{rnd}-{kind}"
        proxy = "litellm" if target.server == "litellm" else tree
        for _ in range(warmup):  # re-establish this target's connections, not measured
            await self.request(target, tree, f"{tag}-warm", True)
        result = Phase(target.name, rnd, kind, concurrency, tree)
        latencies: list[float] = []
        firsts: list[float] = []
        errors: list[str] = []
        stats0, cpu0 = await self.fake_stats(), self.cpu(proxy)
        t0 = time.perf_counter()
        deadline = t0 + seconds

        async def worker() -> None:
            while (len(latencies) + len(errors) < requests) if kind == "latency" \
                    else time.perf_counter() < deadline:
                total, first, error = await self.request(target, tree, tag, kind == "latency")
                if error is None:
                    latencies.append(total)
                    firsts.append(first)
                else:
                    errors.append(error)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        result.wall_s = time.perf_counter() - t0
        cpu1, stats1 = self.cpu(proxy), await self.fake_stats()
        done = len(latencies) + len(errors)
        result.ok, result.errors = len(latencies), len(errors)
        result.first_error = errors[0] if errors else None
        result.rps = result.ok / result.wall_s if result.wall_s else 0.0
        latencies.sort()
        firsts.sort()
        result.p50_ms = percentile(latencies, 0.50) * 1000
        result.p99_ms = percentile(latencies, 0.99) * 1000
        result.mean_ms = statistics.fmean(latencies) * 1000 if latencies else math.nan
        result.first_byte_p50_ms = percentile(firsts, 0.50) * 1000
        result.cpu_us_per_req = {k: (cpu1[k] - cpu0[k]) / max(done, 1) * 1e6 for k in cpu0}
        result.upstream = {d: {k: stats1[d][k] - stats0[d][k] for k in UPSTREAM_COUNTERS}
                           for d in ("llamacpp", "openai")}
        return result


def rotated(items: Sequence[T], by: int) -> list[T]:
    return [items[(i + by) % len(items)] for i in range(len(items))]


def round_order(rnd: int, trees: Sequence[str], targets: Sequence[Target],
                ) -> list[tuple[Target, str | None]]:
    """What round ``rnd`` measures, in order: the targets rotated by the round, each gateway
    target once per tree, the trees back to back and rotated by the round as well."""
    order: list[tuple[Target, str | None]] = []
    for target in rotated(targets, rnd):
        if target.server == "gateway":
            order += [(target, tree) for tree in rotated(trees, rnd)]
        else:
            order.append((target, None))
    return order


async def tokenize(client: httpx.AsyncClient, fake: Fake, text: str) -> list[int]:
    """Token ids of ``text`` (special tokens parsed) from the fake's llama.cpp ``/tokenize``,
    which uses the gateway's own encoding."""
    resp = await client.post(fake.urls["llamacpp"] + "/tokenize", json={"content": text})
    resp.raise_for_status()
    return [int(t) for t in resp.json()["tokens"]]


async def measure(fake: Fake, gateways: dict[str, Gateway], litellm: Proxy | None,
                  targets: Sequence[Target], args: argparse.Namespace) -> list[Phase]:
    limits = httpx.Limits(max_connections=args.concurrency * 2,
                          max_keepalive_connections=args.concurrency * 2)
    phases: list[Phase] = []
    raw = RawClient() if args.client == "raw" else None
    trees = list(gateways)
    async with httpx.AsyncClient(limits=limits, timeout=60.0) as client:
        runner = Runner(client, raw, fake, gateways, litellm, targets,
                        await tokenize(client, fake, HARMONY_PROMPT))
        for target, tree in round_order(0, trees, targets):  # warm-up: imports, caches, pools (not reported)
            await runner.phase(target, tree, -1, "latency", 1, args.warmup, 0, 0)
            await runner.phase(target, tree, -1, "throughput", args.concurrency, 0,
                               args.seconds / 4, 0)
        for rnd in range(args.rounds):
            order = round_order(rnd, trees, targets)
            for target, tree in order:
                phase = await runner.phase(target, tree, rnd, "latency", 1, args.requests, 0, 10)
                phases.append(phase)
                progress(phase)
            for target, tree in order:
                phase = await runner.phase(target, tree, rnd, "throughput", args.concurrency, 0,
                                           args.seconds, 0)
                phases.append(phase)
                progress(phase)
        if args.sweep:
            phases += await sweep(runner.phase, progress, trees, targets, args)
    if raw is not None:
        raw.close()
    return phases


def progress(p: Phase) -> None:
    where = f" [{p.tree}]" if p.tree else ""
    kind = p.kind if p.kind != "sweep" else f"c={p.concurrency}"
    print(f"  round {p.round} {kind:<10} {p.target + where:<24} ok {p.ok:>5} err {p.errors:>3} "
          f"p50 {p.p50_ms:7.3f} ms  p99 {p.p99_ms:7.3f} ms  {p.rps:8.1f} req/s", file=sys.stderr,
          flush=True)
