"""Source trees' apps called in-process, as ASGI apps, each tree in a subprocess of its own, and
the table of their interleaved rounds: what :mod:`benchmarks.request_cpu` (the whole app) and
:mod:`benchmarks.bench_request_side` (the route class alone) share.

A worker is Python source run as ``python -c SOURCE ROOT ARGS...`` with the tree as ``cwd`` and
``PYTHONPATH`` (:func:`run_worker`); it imports the tree's ``app`` first, then this module from
``ROOT`` (this checkout, which may be another tree)::

    sys.path.insert(0, root)
    from benchmarks.inprocess import asgi_post
    del sys.path[0]

and prints its results as JSON, on its last line.  This module imports nothing of ``app``.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.overhead.trees import ROOT, Tree, tree_env


async def asgi_post(app: Any, path: str, raw: bytes) -> tuple[int, bytes]:
    """``POST path`` with the JSON body ``raw`` straight into ``app`` (no server, no socket): the
    answer's status and body.  The client never disconnects: the answer ends the request."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
             "query_string": b"", "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 5000),
             "headers": [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/json"),
                         (b"content-length", str(len(raw)).encode())], "state": {}}
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    status, parts = 0, []

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            parts.append(message.get("body", b""))

    await app(scope, receive, send)
    return status, b"".join(parts)


def run_worker(tree: Tree, source: str, *args: str) -> Any:
    """``python -c source ROOT ARGS...`` in ``tree``: the JSON of its last line of output."""
    proc = subprocess.run([sys.executable, "-c", source, str(ROOT), *args], cwd=tree.path,
                          env=tree_env(tree), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"tree {tree.label}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def ratio_table(first_column: str, labels: Sequence[str], rounds: Sequence[dict[str, dict[str, Any]]],
                value: Callable[[Any], float], digits: int, lower: bool = False) -> list[str]:
    """A Markdown table, a row per key of the rounds' results: each tree's ``value`` (median
    [min, max] over the rounds), then each later tree's ratio to the first, of the same round;
    ``lower``: and in how many rounds the last tree's ratio was below 1."""
    first = labels[0]
    lines = ["| " + " | ".join([first_column, *labels, *(f"{t} / {first}" for t in labels[1:])])
             + (" | rounds lower" if lower else "") + " |",
             "|---" * (2 * len(labels) + lower) + "|"]
    for key in rounds[0][first]:
        cells = []
        for label in labels:
            values = [value(r[label][key]) for r in rounds]
            cells.append(f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}, "
                         f"{max(values):.{digits}f}]")
        below = ""
        for label in labels[1:]:
            ratios = [value(r[label][key]) / value(r[first][key]) for r in rounds]
            cells.append(f"{statistics.median(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}]")
            below = f"{sum(x < 1 for x in ratios)}/{len(ratios)}"
        lines.append(f"| {key} | " + " | ".join(cells) + (f" | {below}" if lower else "") + " |")
    return lines


def write_rounds(path: Path, trees: Sequence[Tree], rounds: Sequence[dict[str, Any]]) -> None:
    """Every round's numbers, and where each tree was, as JSON."""
    path.write_text(json.dumps({"trees": {t.label: str(t.path) for t in trees}, "rounds": rounds}, indent=1))
