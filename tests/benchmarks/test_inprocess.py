"""What the in-process benchmarks (benchmarks.request_cpu, benchmarks.bench_request_side) share
(benchmarks/inprocess.py): the ASGI call, a worker run in a source tree, the ratio table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from benchmarks.inprocess import asgi_post, ratio_table, run_worker, write_rounds
from benchmarks.overhead.trees import ROOT, Tree


async def _echo(request: Request) -> Response:
    body = await request.json()
    return JSONResponse({"got": body, "host": request.headers["host"]}, status_code=body.get("status", 200))


APP = Starlette(routes=[Route("/echo", _echo, methods=["POST"])])


async def test_asgi_post_sends_the_body_and_returns_status_and_body() -> None:
    status, body = await asgi_post(APP, "/echo", b'{"status": 201, "x": [1, 2]}')
    assert status == 201
    assert json.loads(body) == {"got": {"status": 201, "x": [1, 2]}, "host": "127.0.0.1:8000"}
    status, _ = await asgi_post(APP, "/nowhere", b"{}")
    assert status == 404


WORKER = r'''
import json, sys
sys.path.insert(0, sys.argv[1])
from benchmarks.inprocess import asgi_post
del sys.path[0]
print("noise")
print(json.dumps({"args": sys.argv[2:], "cwd_is_tree": __import__("os").getcwd()}))
'''


def test_run_worker_passes_root_and_args_and_reads_the_last_line(tmp_path: Path) -> None:
    tree = Tree("t", tmp_path, "app.cli.main:main")
    got = run_worker(tree, WORKER, "a", "b c")
    assert got == {"args": ["a", "b c"], "cwd_is_tree": str(tmp_path)}
    with pytest.raises(RuntimeError, match=r"tree t: exit 3"):
        run_worker(tree, "import sys; sys.exit(3)")


def test_ratio_table_medians_ranges_ratios_and_rounds_lower(tmp_path: Path) -> None:
    rounds: list[dict[str, dict[str, Any]]] = [
        {"a": {"chat": 10.0, "msg": 4.0}, "b": {"chat": 5.0, "msg": 8.0}},
        {"a": {"chat": 20.0, "msg": 4.0}, "b": {"chat": 30.0, "msg": 2.0}},
        {"a": {"chat": 30.0, "msg": 4.0}, "b": {"chat": 15.0, "msg": 4.0}}]
    assert ratio_table("body", ["a", "b"], rounds, float, 1) == [
        "| body | a | b | b / a |", "|---|---|---|---|",
        "| chat | 20.0 [10.0, 30.0] | 15.0 [5.0, 30.0] | 0.500 [0.500, 1.500] |",
        "| msg | 4.0 [4.0, 4.0] | 4.0 [2.0, 8.0] | 1.000 [0.500, 2.000] |"]
    nested = [{t: {k: {"cpu_us": v} for k, v in r[t].items()} for t in r} for r in rounds]
    lines = ratio_table("target", ["a", "b"], nested, lambda v: float(v["cpu_us"]), 0, lower=True)
    assert lines[:2] == ["| target | a | b | b / a | rounds lower |", "|---|---|---|---|---|"]
    assert lines[2] == "| chat | 20 [10, 30] | 15 [5, 30] | 0.500 [0.500, 1.500] | 2/3 |"
    assert lines[3].endswith("| 1/3 |")
    out = tmp_path / "rounds.json"
    write_rounds(out, [Tree("a", ROOT, "x:y")], rounds)
    assert json.loads(out.read_text()) == {"trees": {"a": str(ROOT)}, "rounds": rounds}
