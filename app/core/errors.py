"""Typed gateway errors and the one place errors change form.

Every failure the gateway reports is a :class:`GatewayError` (HTTP status, OpenAI
``type`` / ``code`` / ``param``).  Before a stream starts it is raised and rendered as
``{"error": {"message", "type", "param", "code"}}`` (:func:`error_body`, the only
builder of that object); after, :func:`to_event` makes it the terminal
:class:`app.core.events.Error`, which carries no HTTP status.  A non-streaming answer whose
stream ended in an ``Error`` raises :func:`from_event`: the status comes back from the
error's ``code`` (the class that defines it), so an error means the same thing whether
it happened before or during a stream, on either API.
"""

from __future__ import annotations

from typing import Any

from app.core import events as ev


def error_fields(message: str, type_: str, code: str | None, param: str | None = None,
                 ) -> dict[str, Any]:
    """The OpenAI error object: ``{message, type, param, code}``."""
    return {"message": message, "type": type_, "param": param, "code": code}


def error_body(message: str, type_: str, code: str | None, param: str | None = None,
               ) -> dict[str, Any]:
    """The OpenAI error response body: ``{"error": {...}}``."""
    return {"error": error_fields(message, type_, code, param)}


class GatewayError(Exception):
    status: int = 500
    type: str = "server_error"
    code: str | None = "internal_error"
    # False: sending the same request again gives the same failure (the HTTP answer says
    # ``x-should-retry: false``, which OpenAI's SDKs obey even on a 5xx).
    retryable: bool = True

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.code, self.param)


class InvalidRequest(GatewayError):
    status = 400
    type = "invalid_request_error"
    code = "invalid_request"


class ContextLengthExceeded(InvalidRequest):
    code = "context_length_exceeded"


class ModelNotFound(GatewayError):
    status = 404
    type = "invalid_request_error"
    code = "model_not_found"


class NotFound(GatewayError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"


class InsufficientQuota(GatewayError):
    """A key over its budget (OpenAI's own 429 for an exhausted quota: the SDKs do not retry)."""

    status = 429
    type = "insufficient_quota"
    code = "insufficient_quota"
    retryable = False


class UpstreamError(GatewayError):
    """The backend failed (connection refused, 5xx, malformed stream, ...)."""

    status = 502
    type = "server_error"
    code = "upstream_error"


class UpstreamTimeout(UpstreamError):
    status = 504
    code = "upstream_timeout"


class UpstreamRateLimited(UpstreamError):
    status = 429
    type = "rate_limit_error"
    code = "rate_limit_exceeded"

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Overloaded(GatewayError):
    """The gateway is at capacity: its generation queue is full or the wait ran out."""

    status = 503
    type = "server_error"
    code = "server_overloaded"

    def __init__(self, message: str, *, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ToolNotAllowed(GatewayError):
    """The model called a function the request did not offer or allow (``tool_choice``). The
    model's output failed, not the client's request: a 502 ``server_error``, marked not
    retryable (SDKs would otherwise send three identical requests for one refusal)."""

    status = 502
    type = "server_error"
    code = "tool_not_allowed"
    retryable = False


class ModelOutputError(GatewayError):
    """The model produced output the gateway must not pass on (truncated, bad call)."""

    status = 502
    type = "server_error"
    code = "model_output_error"


class ServerShutdown(GatewayError):
    """The process is stopping and the grace period for in-flight answers is over."""

    status = 503
    type = "server_error"
    code = "server_shutdown"


def to_event(exc: GatewayError) -> ev.Error:
    """A failure after the stream started: the terminal event (no HTTP status in it)."""
    return ev.Error(exc.message, code=exc.code or "error", type=exc.type, param=exc.param)


def _classes(cls: type[GatewayError]) -> list[type[GatewayError]]:
    out = [cls]
    for sub in cls.__subclasses__():
        out.extend(_classes(sub))
    return out


_FALLBACK_STATUS = {"invalid_request_error": 400, "rate_limit_error": 429}


def from_event(error: ev.Error) -> GatewayError:
    """The exception a non-streaming answer raises for a stream that ended in ``error``:
    the class that defines ``error.code`` gives the status (502 for the model-output codes
    parsers and policies use, 400 / 429 by ``type`` otherwise)."""
    by_code = {cls.code: cls for cls in _classes(GatewayError) if "code" in cls.__dict__}
    cls = by_code.get(error.code)
    status = cls.status if cls is not None else _FALLBACK_STATUS.get(error.type, 502)
    exc = GatewayError(error.message, code=error.code, param=error.param, status=status)
    exc.type = error.type
    if cls is not None:
        exc.retryable = cls.retryable
    return exc


# Anthropic's error types by the gateway's status, and the status Anthropic gives each (its
# overloaded_error is a 529; every other 5xx is its api_error, a 500).
_ANTHROPIC = {400: ("invalid_request_error", 400), 401: ("authentication_error", 401),
              403: ("permission_error", 403), 404: ("not_found_error", 404),
              413: ("request_too_large", 413), 429: ("rate_limit_error", 429),
              503: ("overloaded_error", 529)}


def anthropic_error(status: int, message: str) -> tuple[int, dict[str, Any]]:
    """The one mapping to Anthropic's envelope: (its status, ``{"type": "error", "error":
    {"type", "message"}}``) for an error the gateway answers with ``status``."""
    type_, out = _ANTHROPIC.get(status, ("api_error", 500) if status >= 500 else
                                ("invalid_request_error", status))
    return out, {"type": "error", "error": {"type": type_, "message": message}}


def anthropic_event(error: ev.Error) -> dict[str, Any]:
    """A stream's terminal error as Anthropic's ``error`` event."""
    return anthropic_error(from_event(error).status, error.message)[1]
