"""Run the gateway in-process (lifespan included) over an httpx ASGI client; the test configs."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import orjson

from app.config import GatewayConfig
from app.main import create_app

MODEL = "gpt-oss-test"


def config(context_window: int = 4096, store_path: str = ":memory:", **model: Any) -> GatewayConfig:
    return GatewayConfig.model_validate({"store": {"path": store_path}, "models": {MODEL: {
        "backend": "llamacpp", "base_urls": ["http://llama.test:8080"],
        "context_window": context_window,
        "harmony": {"current_date": "2026-11-22"}, **model}}})


@asynccontextmanager
async def gateway(upstream: httpx.AsyncBaseTransport, cfg: GatewayConfig | None = None,
                  ) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(cfg or config(), transport=upstream)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            yield client


def sse_payloads(body: str) -> list[Any]:
    """Parse an SSE body into JSON payloads ('[DONE]' kept as the string)."""
    out: list[Any] = []
    for block in body.split("\n\n"):
        data = [line[6:] for line in block.split("\n") if line.startswith("data: ")]
        if data:
            text = "\n".join(data)
            out.append(text if text == "[DONE]" else orjson.loads(text))
    return out


def alice_and_bob(base: GatewayConfig | None = None, **sections: Any) -> GatewayConfig:
    """``base`` (the test config by default) with two API keys, ``alice`` and ``bob`` (each its
    own name as the secret), and ``sections`` in place of its top-level tables of those names."""
    keys = [{"name": n, "sha256": hashlib.sha256(n.encode()).hexdigest()} for n in ("alice", "bob")]
    return GatewayConfig.model_validate({**(base or config()).model_dump(), "auth": {"keys": keys},
                                         **sections})


def with_tool(name: str, **settings: Any) -> GatewayConfig:
    """The test config (16,384 tokens) with ``[tools.NAME]`` made of ``settings`` (none: its
    defaults, the tool unconfigured)."""
    c = config(context_window=16384)
    section = getattr(c.tools, name).model_validate(settings)
    return c.model_copy(update={"tools": c.tools.model_copy(update={name: section})})


def allowing_mcp(*allowed: str, **tools: Any) -> GatewayConfig:
    """The test config with ``[tools.mcp] allowed_urls`` (and other ``[tools]`` settings)."""
    c = config(context_window=16384)
    return c.model_copy(update={"tools": c.tools.model_copy(update={
        "mcp": c.tools.mcp.model_copy(update={"allowed_urls": list(allowed)}), **tools})})
