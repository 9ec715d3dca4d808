"""The official ``anthropic`` SDK as a client of the in-process gateway (its own httpx
package, ``httpx2``, over ASGI), beside a plain httpx client of the same app."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anthropic
import httpx
import httpx2

from app.config import GatewayConfig
from app.main import create_app
from tests.support.gateway import config


@dataclass(frozen=True)
class Clients:
    sdk: anthropic.AsyncAnthropic
    http: httpx.AsyncClient


@asynccontextmanager
async def clients(upstream: httpx.AsyncBaseTransport, cfg: GatewayConfig | None = None, *,
                  api_key: str = "test-key") -> AsyncIterator[Clients]:
    app = create_app(cfg or config(), transport=upstream)
    async with (app.router.lifespan_context(app),
                httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://gateway") as raw,
                httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as http):
        sdk = anthropic.AsyncAnthropic(base_url="http://gateway", api_key=api_key, http_client=raw,
                                       max_retries=0)
        yield Clients(sdk, http)
