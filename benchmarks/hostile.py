"""Hostile requests against a real ``ocm-gateway serve``: does ``GET /health`` stay responsive?

``python -m benchmarks.hostile [--out benchmarks/results/hostile]`` starts the overhead
benchmark's fake upstream (:mod:`benchmarks.overhead.fake`) and the gateway (this checkout),
then sends each request of issue 25's reproducers, one at a time (``--rounds`` times), while a
second process asks ``/health`` every 10 ms.  For each it records the answer (status, code), how long it took,
and the slowest ``/health`` answer meanwhile.  The target: every answer well under a second,
``/health`` under 50 ms throughout.  Results: a Markdown table and JSON beside ``--out``.

``--tree LABEL=PATH`` (repeatable) runs one gateway per source tree (each from its own code) and
measures them in interleaved rounds (case by case, round by round, tree after tree), so that a
before/after comparison on a shared, loaded machine is a ratio taken under the same load: each
further tree's row carries ``health_ratio``, its slowest ``/health`` over the first tree's.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from benchmarks.overhead.processes import Fake, harmony_model, start_fake, start_gateway
from benchmarks.overhead.targets import HARMONY_MODEL
from benchmarks.overhead.trees import Tree
from tests.support.mcp_server import running
from tests.support.pdf import make_bomb, make_font_bomb, make_form_bomb

ROOT = Path(__file__).resolve().parents[1]
Json = dict[str, Any]


def _config(port: int, fake: Fake, mcp_url: str = "") -> str:
    allowed = f'[tools.mcp]\nallowed_urls = ["{mcp_url}/mcp"]\n' if mcp_url else ""
    return f"""\
host = "127.0.0.1"
port = {port}
[store]
path = ":memory:"
{harmony_model(fake, "2026-11-26")}""" + allowed


@contextlib.contextmanager
def _gateway(fake: Fake, workdir: Path, mcp_url: str = "", source: Path = ROOT) -> Iterator[str]:
    """``ocm-gateway serve`` of the source tree ``source`` (its code: ``cwd`` and ``PYTHONPATH``,
    checked), config and log in ``workdir``; yields its URL once ``/ready`` answers."""
    with start_gateway(fake, Tree.at(source.name, source), workdir, "warning",
                       lambda port: _config(port, fake, mcp_url)) as gateway:
        yield gateway.url


def _turns(n: int) -> list[Json]:
    out: list[Json] = []
    for i in range(n):
        out += [{"role": "user", "content": f"question {i} about the weather"},
                {"role": "assistant", "content": f"answer {i}"}]
    return [*out, {"role": "user", "content": "latest"}]


def _pdf_input(data: bytes, name: str) -> list[Json]:
    kind = "application/pdf" if name.endswith(".pdf") else "text/plain"
    return [{"role": "user", "content": [
        {"type": "input_text", "text": "Read it."},
        {"type": "input_file", "filename": name,
         "file_data": f"data:{kind};base64,{base64.b64encode(data).decode()}"}]}]


def _tokenizer_cases() -> list[tuple[str, str, Json]]:
    """Issue 35: whitespace runs (one o200k piece: quadratic, a panic near 1 MB), text that
    cannot fit the window, a long count; on every path that reaches the tokenizer."""
    spaces, big = " " * 1_100_000, "w " * 7_340_032

    def chat(text: str, **more: Any) -> Json:
        return {"model": HARMONY_MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": 8,
                **more}

    def create(given: Any = "hi", **more: Any) -> Json:
        return {"model": HARMONY_MODEL, "input": given, "max_output_tokens": 8, **more}

    output = [{"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
              {"type": "function_call_output", "call_id": "c1", "output": big}]
    return [
        ("131,072 spaces chat message", "/v1/chat/completions", chat(" " * 131_072)),
        ("65,536 no-break spaces chat message", "/v1/chat/completions", chat("\u00a0" * 65_536)),
        ("32,768 x '/\\n' chat message (one piece)", "/v1/chat/completions", chat("/\n" * 32_768)),
        ("14 MB ordinary chat message", "/v1/chat/completions", chat(big)),
        ("14 MB function_call_output", "/v1/responses", create(output)),
        *_big_body_cases(big),
        ("input_tokens, 100,000 short messages", "/v1/responses/input_tokens",
         {"model": HARMONY_MODEL, "input": [{"role": "user", "content": f"m{i}"} for i in range(100_000)]}),
        ("100,000 short messages: Responses create", "/v1/responses",
         {"model": HARMONY_MODEL, "input": [{"role": "user", "content": f"m{i}"} for i in range(100_000)],
          "max_output_tokens": 8}),
        ("100,000 short messages: Messages count_tokens", "/v1/messages/count_tokens",
         {"model": HARMONY_MODEL, "messages": [{"role": ("user", "assistant")[i % 2], "content": f"m{i}"}
                                               for i in range(99_999)]}),
        ("1.1 MB spaces: chat", "/v1/chat/completions", chat(spaces)),
        ("1.1 MB spaces: chat stream", "/v1/chat/completions", chat(spaces, stream=True)),
        ("1.1 MB spaces: Responses input", "/v1/responses", create(spaces)),
        ("1.1 MB spaces: instructions", "/v1/responses", create(instructions=spaces)),
        ("1.1 MB spaces: input_tokens", "/v1/responses/input_tokens",
         {"model": HARMONY_MODEL, "input": spaces}),
        ("1.1 MB spaces: a tool description", "/v1/responses",
         create(tools=[{"type": "function", "name": "f", "description": spaces}])),
        ("1.1 MB spaces: /tokenize", "/tokenize", {"model": HARMONY_MODEL, "prompt": spaces}),
    ]


def _big_body_cases(big: str) -> list[tuple[str, str, Json]]:
    """Issue 35: a 14 MB body whatever field holds it, on every API (each is parsed, validated,
    converted, checked and freed off the event loop)."""
    def create(**more: Any) -> Json:
        return {"model": HARMONY_MODEL, "input": "hi", "max_output_tokens": 8, **more}

    small = "w " * 50  # 110,000 messages of 100 characters: ~14.8 MB
    return [
        ("14 MB ordinary message: Messages", "/v1/messages",
         {"model": HARMONY_MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": big}]}),
        ("14 MB instructions", "/v1/responses", create(instructions=big)),
        ("14 MB tool description: Responses", "/v1/responses",
         create(tools=[{"type": "function", "name": "f", "description": big}])),
        ("14 MB tool description: chat", "/v1/chat/completions",
         {"model": HARMONY_MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8,
          "tools": [{"type": "function", "function": {"name": "f", "description": big}}]}),
        ("14 MB tool parameter description: chat", "/v1/chat/completions",
         {"model": HARMONY_MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8,
          "tools": [{"type": "function", "function": {"name": "f", "parameters": {
              "type": "object", "properties": {"a": {"type": "string", "description": big}}}}}]}),
        ("100,000 tool parameters: Responses", "/v1/responses",
         create(tools=[{"type": "function", "name": "f", "parameters": {
             "type": "object", "properties": {f"p{i}": {"type": "string", "description": small}
                                              for i in range(100_000)}}}])),
        ("9,990 tool parameters (260 KB, on the event loop): Responses", "/v1/responses",
         create(tools=[{"type": "function", "name": "f", "parameters": {
             "type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(9_990)}}}])),
        ("14 MB tool input_schema enum: Messages", "/v1/messages",
         {"model": HARMONY_MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}],
          "tools": [{"name": "f", "input_schema": {"type": "object", "properties": {
              "a": {"type": "string", "enum": [small] * 140_000}}}}]}),
        ("14 MB of 110,000 small chat messages", "/v1/chat/completions",
         {"model": HARMONY_MODEL, "messages": [{"role": "user", "content": small}] * 110_000,
          "max_tokens": 8}),
    ]


def _mcp(url: str, n: int, *, distinct: bool = False) -> list[Json]:
    """``n`` mcp tools naming the one allowed server (``distinct``: each with headers of its own)."""
    return [{"type": "mcp", "server_label": f"s{i}", "server_url": f"{url}/mcp", "require_approval": "never",
             **({"headers": {"x-n": str(i)}} if distinct else {})} for i in range(n)]


def cases(mcp_url: str = "http://127.0.0.1:9") -> list[tuple[str, str, Json]]:
    word = "a" * 256_000
    compacted = [{"type": "message", "role": "user", "content": f"old {i}"} for i in range(6000)]
    return [
        ("256 KB one-word chat message", "/v1/chat/completions",
         {"model": HARMONY_MODEL, "messages": [{"role": "user", "content": word}], "max_tokens": 8}),
        ("1.1 MB one-word /tokenize", "/tokenize", {"model": HARMONY_MODEL, "prompt": "a" * 1_100_000}),
        *_tokenizer_cases(),
        ("truncation auto, 2,000 turns", "/v1/responses",
         {"model": HARMONY_MODEL, "input": _turns(2000), "truncation": "auto", "max_output_tokens": 16}),
        ("compact 6,000 items", "/v1/responses/compact", {"model": HARMONY_MODEL, "input": compacted}),
        ("PDF CPU bomb (30 pages x 200,000 operators, 7 KB)", "/v1/responses",
         {"model": HARMONY_MODEL, "input": _pdf_input(make_bomb(30, 200_000), "bomb.pdf")}),
        ("PDF Form XObject bomb (a 20 MB form drawn 3 times, 30 KB)", "/v1/responses",
         {"model": HARMONY_MODEL, "input": _pdf_input(make_form_bomb(3, 20_000_000), "form.pdf")}),
        ("PDF nested forms (10 x 10 x 10 draws of a 1 MB form, 3 KB)", "/v1/responses",
         {"model": HARMONY_MODEL, "input": _pdf_input(make_form_bomb(10, 1_000_000, 3), "nested.pdf")}),
        ("PDF 200 fonts sharing a 65,536-code /ToUnicode map (27 KB)", "/v1/responses",
         {"model": HARMONY_MODEL, "input": _pdf_input(make_font_bomb(200), "fonts.pdf")}),
        ("200 mcp tools naming the one allowed URL", "/v1/responses",
         {"model": HARMONY_MODEL, "input": "hi", "max_output_tokens": 16, "tools": _mcp(mcp_url, 200)}),
        ("20 mcp tools naming the one allowed URL", "/v1/responses",
         {"model": HARMONY_MODEL, "input": "hi", "max_output_tokens": 16, "tools": _mcp(mcp_url, 20)}),
        ("20 mcp servers (one URL, headers of their own)", "/v1/responses",
         {"model": HARMONY_MODEL, "input": "hi", "max_output_tokens": 16,
          "tools": _mcp(mcp_url, 20, distinct=True)}),
    ]


def _probe(url: str, stop: Any, out: Any, ready: Any) -> None:
    """In its own process: the benchmark's own GIL (encoding a 160 KB body) must not delay it."""
    seen: list[float] = []
    with httpx.Client(timeout=30) as client:
        while not stop.is_set():
            t0 = time.perf_counter()
            client.get(f"{url}/health")
            seen.append(time.perf_counter() - t0)
            ready.set()
            time.sleep(0.01)
    out.put(seen)


def measure(url: str, send: Callable[[], httpx.Response]) -> Json:
    ctx = multiprocessing.get_context("spawn")
    stop, out, ready = ctx.Event(), ctx.Queue(), ctx.Event()
    probe = ctx.Process(target=_probe, args=(url, stop, out, ready))
    probe.start()
    ready.wait(60)  # the probe is up and answering (a fast answer must still be probed)
    time.sleep(0.3)
    t0 = time.perf_counter()
    r = send()
    took = time.perf_counter() - t0
    time.sleep(0.05)
    stop.set()
    seen: list[float] = out.get(timeout=30)
    probe.join()
    code = None
    with contextlib.suppress(ValueError, KeyError, TypeError):
        code = r.json()["error"]["code"]
    return {"status": r.status_code, "code": code, "seconds": round(took, 3),
            "health_max_ms": round(max(seen) * 1000, 1), "health_probes": len(seen)}


def _tree(text: str) -> tuple[str, Path]:
    label, sep, path = text.partition("=")
    if not sep or not label or not Path(path, "app").is_dir():
        raise argparse.ArgumentTypeError(f"--tree takes LABEL=PATH of a source tree, not {text!r}")
    return label, Path(path).resolve()


def _row(name: str, label: str | None, rounds: list[Json], first: Json | None) -> Json:
    row = {"case": name, **({"tree": label} if label is not None else {}), **rounds[-1],
           "seconds": max(r["seconds"] for r in rounds),
           "health_max_ms": max(r["health_max_ms"] for r in rounds),
           "health_median_of_max_ms": statistics.median(r["health_max_ms"] for r in rounds),
           "rounds": len(rounds)}
    if first is not None:
        row["health_ratio"] = round(row["health_max_ms"] / max(first["health_max_ms"], 0.1), 2)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.hostile", description=__doc__)
    parser.add_argument("--out", default="", help="write OUT.md and OUT.json")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per request (worst reported)")
    parser.add_argument("--only", action="append", default=[],
                        help="run only the cases whose name contains this (repeatable)")
    parser.add_argument("--tree", action="append", default=[], type=_tree, metavar="LABEL=PATH",
                        help="a gateway from this source tree (repeat to compare trees in "
                             "interleaved rounds: each further tree against the first)")
    args = parser.parse_args(argv)
    trees: list[tuple[str | None, Path]] = list(args.tree) or [(None, ROOT)]
    rows: list[Json] = []
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack, \
            httpx.Client(timeout=300) as client:
        fake = stack.enter_context(start_fake(64, 0.0, 0.0, Tree("here", ROOT, "app.cli.main:main")))
        mcp_url = stack.enter_context(running("streamable"))
        urls = []
        for i, (_, source) in enumerate(trees):
            (Path(tmp) / str(i)).mkdir()
            urls.append(stack.enter_context(_gateway(fake, Path(tmp) / str(i), mcp_url, source)))
        for name, path, body in cases(mcp_url):
            if args.only and not any(part.lower() in name.lower() for part in args.only):
                continue
            def sender(url: str, p: str = path, b: Json = body) -> Callable[[], httpx.Response]:
                return lambda: client.post(url + p, json=b)

            seen: list[list[Json]] = [[] for _ in trees]
            for _ in range(args.rounds):  # interleaved: every tree once a round
                for i, url in enumerate(urls):
                    seen[i].append(measure(url, sender(url)))
            first: Json | None = None
            for (label, _), rounds in zip(trees, seen, strict=True):
                row = _row(name, label, rounds, first)
                first = first or row
                rows.append(row)
                print(json.dumps(row), flush=True)
    many = len(trees) > 1
    head = ["request", *(["tree"] if many else []), "answer", "slowest answer (s)", "slowest /health (ms)",
            "median round's slowest /health (ms)", *(["ratio to the first tree"] if many else [])]
    table = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["case"], *([r["tree"]] if many else []), f"{r['status']} {r['code'] or ''}",
                 r["seconds"], r["health_max_ms"], r["health_median_of_max_ms"],
                 *([r.get("health_ratio", "")] if many else [])]
        table.append("| " + " | ".join(str(c) for c in cells) + " |")
    print("\n".join(table))
    if args.out:
        Path(args.out + ".json").write_text(json.dumps(rows, indent=1) + "\n")
        Path(args.out + ".md").write_text("\n".join(table) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
