"""Typed gateway errors, each knowing its HTTP status and OpenAI error fields.

Every failure the gateway reports is one of these; ``app/http`` renders them as
``{"error": {"message", "type", "param", "code"}}`` and the stream encoders turn
them into terminal error events.
"""

from __future__ import annotations


class GatewayError(Exception):
    status: int = 500
    type: str = "server_error"
    code: str | None = "internal_error"

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

    def body(self) -> dict[str, dict[str, object]]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


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


class ModelOutputError(GatewayError):
    """The model produced output the gateway must not pass on (truncated, bad call)."""

    status = 502
    type = "server_error"
    code = "model_output_error"
