"""The admin key: the only credential ``/admin`` accepts (ordinary API keys never are).

It is configured as a SHA-256 digest (``[admin] key_sha256``, or ``OCMGW_ADMIN_KEY`` in
plain) and compared in constant time.  Without one the admin API answers 404 (it is off).
It is sent as ``Authorization: Bearer`` and never as a cookie, so a page on another site
cannot make a browser send it (no CSRF); requests a browser marks as cross-site
(``Sec-Fetch-Site``) are refused anyway.
"""

from __future__ import annotations

import hmac

from fastapi import Request

from app.core.errors import GatewayError, NotFound
from app.http.auth import bearer_digest


class AdminDenied(GatewayError):
    status = 401
    type = "invalid_request_error"
    code = "invalid_admin_key"
    retryable = False


def require_admin(request: Request) -> None:
    """A FastAPI dependency for every admin route."""
    expected: str | None = request.app.state.config.admin.key_sha256
    if expected is None:
        raise NotFound("The admin API is off: set [admin] key_sha256 or OCMGW_ADMIN_KEY.")
    if request.headers.get("sec-fetch-site") == "cross-site":
        raise AdminDenied("Cross-site requests to the admin API are refused.")
    digest = bearer_digest(request.scope)
    if digest is None or not hmac.compare_digest(digest, expected):
        raise AdminDenied("Missing or invalid admin key. Send 'Authorization: Bearer <admin key>'.")
