"""The operator console: ``/console``, a single page of plain ES modules and CSS shipped in the
package (no build step, no CDN: it works air-gapped) that drives the admin API.

Every answer carries a strict Content-Security-Policy (scripts, styles and requests from this
origin only; no inline script), ``frame-ancestors 'none'`` and ``X-Frame-Options: DENY``
(no clickjacking), ``nosniff`` and no referrer.  The page holds the admin key in
``sessionStorage`` and sends it as a bearer header: no cookie, so no CSRF.  The files are
public (they hold no data); everything they show comes from ``/admin``.
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter
from starlette.responses import Response

from app.core.errors import NotFound

router = APIRouter(tags=["admin"], include_in_schema=False)
FILES = {"console.js": "text/javascript", "console.css": "text/css", "index.html": "text/html"}
HEADERS = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; connect-src 'self'; base-uri 'none'; "
                               "form-action 'none'; frame-ancestors 'none'",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
}


def _asset(name: str) -> Response:
    if name not in FILES:
        raise NotFound(f"No console file {name!r}.")
    body = resources.files("app.api.admin").joinpath("console", name).read_bytes()
    return Response(body, media_type=FILES[name], headers=HEADERS)


@router.get("/console")
async def page() -> Response:
    return _asset("index.html")


@router.get("/console/{name}")
async def asset(name: str) -> Response:
    return _asset(name)
