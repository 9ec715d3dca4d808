"""Errors change form in one place: exception → terminal event → exception keeps its meaning."""

from __future__ import annotations

import pytest

from app.core import errors
from app.core import events as ev
from app.http.disconnect import ClientDisconnected


def _all(cls: type[errors.GatewayError]) -> list[type[errors.GatewayError]]:
    return [cls] + [c for sub in cls.__subclasses__() for c in _all(sub)]


@pytest.mark.parametrize("cls", _all(errors.GatewayError), ids=lambda c: c.__name__)
def test_every_error_class_round_trips_through_the_event(cls: type[errors.GatewayError]) -> None:
    exc = cls.__new__(cls)
    errors.GatewayError.__init__(exc, "went wrong", param="p")
    event = errors.to_event(exc)
    assert not hasattr(event, "status")  # the semantic event carries no HTTP status
    back = errors.from_event(event)
    assert (back.status, back.type, back.code, back.param, back.message) == (
        exc.status, exc.type, exc.code, "p", "went wrong")
    assert back.body() == exc.body()


@pytest.mark.parametrize(("code", "type_", "status"), [
    ("invalid_model_output", "server_error", 502),   # parser / policy codes: the model failed
    ("invalid_tool_arguments", "server_error", 502),
    ("response_format_violation", "server_error", 502),
    ("something_new", "invalid_request_error", 400),
    ("something_new", "rate_limit_error", 429),
])
def test_codes_without_a_class_get_the_status_of_their_type(code: str, type_: str, status: int) -> None:
    assert errors.from_event(ev.Error("m", code=code, type=type_)).status == status


def test_a_bad_call_by_the_model_is_a_5xx_marked_not_retryable() -> None:
    exc = errors.from_event(errors.to_event(errors.ToolNotAllowed("no")))
    assert (exc.status, exc.type, exc.code) == (502, "server_error", "tool_not_allowed")
    assert exc.retryable is False  # x-should-retry: false (SDKs retry 5xx otherwise)
    assert errors.from_event(errors.to_event(errors.ModelOutputError("cut"))).retryable is True


def test_client_disconnected_is_known_to_the_mapping() -> None:
    assert errors.from_event(errors.to_event(ClientDisconnected("gone"))).status == 499
