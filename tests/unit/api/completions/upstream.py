"""A fake backend answering each path with a real recording (tests/fixtures/wire) or a body."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.support.gateway import MODEL, config, gateway, sse_payloads
from tests.support.wire import load, recorded_response

Answer = str | tuple[int, Any]  # a recording ("vllm/08a_tokenize") or (status, JSON body)


class Upstream:
    """MockTransport handler: ``routes`` maps a POST path to its answer; GETs are 404
    (discovery); every POST body is kept in ``requests`` as (path, json)."""

    def __init__(self, routes: dict[str, Answer]) -> None:
        self.routes = routes
        self.requests: list[tuple[str, Any]] = []
        self.closed = 0

    def _closed(self) -> None:
        self.closed += 1

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method != "POST":
            return httpx.Response(404)
        path = request.url.path
        self.requests.append((path, json.loads(request.content)))
        answer = self.routes.get(path)
        if answer is None:
            return httpx.Response(404, json={"error": "not found"})
        if isinstance(answer, str):
            server, name = answer.split("/", 1)
            return recorded_response(load(name, server), self._closed)
        return httpx.Response(answer[0], json=answer[1])

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self)

    def bodies(self, path: str) -> list[Any]:
        return [body for p, body in self.requests if p == path]


def vllm_config(**model: Any) -> Any:
    return config(backend="vllm", base_urls=["http://vllm.test:8000"], upstream_model="tiny",
                  **model)


async def post(upstream: Upstream, path: str, body: dict[str, Any], cfg: Any = None,
               ) -> tuple[int, Any]:
    async with gateway(upstream.transport(), cfg) as client:
        r = await client.post(path, json={"model": MODEL, **body})
    if body.get("stream") and r.status_code == 200:
        assert r.headers["content-type"].startswith("text/event-stream")
        return r.status_code, sse_payloads(r.text)
    return r.status_code, r.json()
