"""``ocm-gateway sandbox``: the code interpreter's executor, a small HTTP service of its own.

The gateway (``[tools.code_interpreter] url``) calls it; nothing else should.  Endpoints:

* ``POST /v1/containers/{id}/run`` ``{"code": str, "timeout": float?}`` → ``{"output",
  "error", "truncated", "restarted", "files", "written"}``
  (:class:`~app.sandbox.containers.RunResult`; ``written``: the files the run created or
  changed, ``{"path", "bytes", "data"?}`` with base64 contents within ``--files-kb``, see
  :mod:`app.sandbox.files`);
  the container is created by its first run; 503 when ``max_containers`` exist.
* ``DELETE /v1/containers/{id}`` → 204 (404 when there is none); a run in flight is stopped.
* ``GET /health``.

With ``--token`` (or ``OCM_SANDBOX_TOKEN``) every call but ``/health`` needs ``Authorization:
Bearer TOKEN``.  A client that disconnects cancels its run (the interpreter is killed).
Refuses to start without bubblewrap (``apt install bubblewrap``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import json
import os
import re
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from app.sandbox.containers import Containers, Full
from app.sandbox.isolate import Limits, find_bwrap, find_python

_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_MAX_CODE = 1 << 20


def _error(status: int, message: str, code: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "param": None,
                                   "code": code}}, status_code=status)


async def _disconnected(request: Request) -> None:
    """Returns when the client disconnects (the body has been read: the next message is that)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def create_app(containers: Containers, token: str | None = None) -> Starlette:
    def authorized(request: Request) -> bool:
        if not token:
            return True
        given = request.headers.get("authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {token}".encode())

    async def run(request: Request) -> Response:
        if not authorized(request):
            return _error(401, "A valid bearer token is required.", "invalid_api_key")
        cid = request.path_params["cid"]
        if not _ID.match(cid):
            return _error(400, "A container id is 1-64 letters, digits, '_' or '-'.", "invalid_container_id")
        body = await request.body()
        if len(body) > _MAX_CODE:
            return _error(413, "The code is larger than 1 MiB.", "request_too_large")
        try:
            payload: Any = json.loads(body)
        except ValueError:
            payload = None
        if not isinstance(payload, dict) or not isinstance(payload.get("code"), str):
            return _error(400, 'The body must be {"code": "..."}.', "invalid_request")
        timeout = payload.get("timeout")
        wall = float(timeout) if isinstance(timeout, int | float) and not isinstance(timeout, bool) else None
        wall = wall if wall and wall > 0 else None
        task = asyncio.ensure_future(containers.run(cid, payload["code"], wall))
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if not task.done():  # the caller left (its response was cancelled): stop the run
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            return Response(status_code=499)
        try:
            result = task.result()
        except Full as exc:
            return _error(503, f"The sandbox is full ({exc}); try again later.", "sandbox_full")
        return JSONResponse(result.as_json())

    async def delete(request: Request) -> Response:
        if not authorized(request):
            return _error(401, "A valid bearer token is required.", "invalid_api_key")
        found = await containers.delete(request.path_params["cid"])
        return Response(status_code=204) if found else _error(404, "No such container.", "not_found")

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async def expire() -> None:
            while True:
                await asyncio.sleep(30)
                await containers.expire()

        task = asyncio.get_running_loop().create_task(expire())
        try:
            yield
        finally:
            task.cancel()
            await containers.close()

    return Starlette(routes=[Route("/v1/containers/{cid}/run", run, methods=["POST"]),
                             Route("/v1/containers/{cid}", delete, methods=["DELETE"]),
                             Route("/health", health)], lifespan=lifespan)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``ocm-gateway sandbox`` (the CLI's parser tree adds them too)."""
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8090)
    parser.add_argument("--root", default=None, help="where containers live (default: a temp dir)")
    parser.add_argument("--token", default=os.environ.get("OCM_SANDBOX_TOKEN"))
    parser.add_argument("--python", default=None, help="the interpreter inside (default: /usr/bin/python3)")
    parser.add_argument("--max-containers", type=int, default=32)
    parser.add_argument("--idle-seconds", type=float, default=1200.0)
    parser.add_argument("--cpu-seconds", type=int, default=Limits.cpu_seconds)
    parser.add_argument("--memory-mb", type=int, default=Limits.memory_mb)
    parser.add_argument("--processes", type=int, default=Limits.processes)
    parser.add_argument("--wall-seconds", type=float, default=Limits.wall_seconds)
    parser.add_argument("--output-chars", type=int, default=Limits.output_chars)
    parser.add_argument("--disk-mb", type=int, default=Limits.disk_mb)
    parser.add_argument("--files-kb", type=int, default=Limits.files_kb,
                        help="contents of the files one run wrote that come back with its result")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    bwrap = find_bwrap()
    if bwrap is None:
        parser.error("bubblewrap (bwrap) is not installed: apt install bubblewrap")
    limits = Limits(cpu_seconds=args.cpu_seconds, memory_mb=args.memory_mb, processes=args.processes,
                    wall_seconds=args.wall_seconds, output_chars=args.output_chars, disk_mb=args.disk_mb,
                    files_kb=args.files_kb)
    root = Path(args.root) if args.root else Path(tempfile.mkdtemp(prefix="ocm-sandbox-"))
    containers = Containers(root, bwrap, args.python or find_python(), limits,
                            max_containers=args.max_containers, idle_seconds=args.idle_seconds)
    import uvicorn

    uvicorn.run(create_app(containers, args.token), host=args.host, port=args.port, log_level="warning")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ocm-gateway sandbox", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return run(parser.parse_args(argv), parser)
