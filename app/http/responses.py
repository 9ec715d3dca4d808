"""Response helpers: orjson JSON responses and error responses (with Retry-After)."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

from app.core.errors import GatewayError, Overloaded, UpstreamRateLimited


class JSONResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def error_response(exc: GatewayError) -> JSONResponse:
    headers: dict[str, str] = {}
    retry_after = getattr(exc, "retry_after", None) if isinstance(exc, UpstreamRateLimited | Overloaded) \
        else None
    if retry_after is not None:
        headers["retry-after"] = str(max(1, round(retry_after)))
        headers["retry-after-ms"] = str(max(1, round(retry_after * 1000)))
    if not exc.retryable:
        headers["x-should-retry"] = "false"
    return JSONResponse(exc.body(), status_code=exc.status, headers=headers)

