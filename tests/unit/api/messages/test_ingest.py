"""Messages ingest: Anthropic bodies → the internal Conversation + GenerationParams; any block
shape is a conversation or a 400, never another exception."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from app.api.messages.ingest import conversation_of, ingest_messages
from app.cli.conformance.responses import HEART_PNG
from app.core.conversation import ImagePart, TextPart, ToolCall, ToolChoice
from app.core.errors import InvalidRequest
from schemas.messages import CountTokensRequest, MessagesRequest

TOOL = {"name": "get_weather", "description": "Weather.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}


def _open(token: str, param: str) -> str:
    if not token.startswith("good:"):
        raise InvalidRequest(f"{param} is not ours.", param=param)
    return token[5:]


def _ingest(**body: Any) -> Any:
    return ingest_messages(MessagesRequest.model_validate(
        {"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}], **body}), _open)


def test_system_messages_and_params() -> None:
    got = _ingest(system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
                  stop_sequences=["END"], temperature=0.5, top_p=0.9, metadata={"user_id": "u1"},
                  anthropic_unknown_field={"x": 1}, service_tier="auto")
    system, user = got.conversation.messages
    assert system.role == "system" and system.text == "Be brief."
    assert user.role == "user" and user.content == (TextPart("hi"),)
    p = got.params
    assert (p.max_tokens, p.temperature, p.top_p, p.stop, p.user) == (100, 0.5, 0.9, ("END",), "u1")
    assert got.stream is False


def test_tool_round_trip_blocks() -> None:
    png = HEART_PNG
    got = _ingest(tools=[TOOL], messages=[
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "ignored", "signature": "good:real thoughts"},
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01", "content": "18C",
             "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "And this image?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "is_error": True,
                                      "content": [{"type": "text", "text": "boom"}]}]}])
    _, assistant, tool, follow, failed = got.conversation.messages
    assert assistant.reasoning == "real thoughts"  # the sealed reasoning, not the client's text
    assert assistant.tool_calls == (ToolCall("toolu_01", "get_weather", '{"city":"Paris"}'),)
    assert assistant.text == "Checking."
    assert tool.role == "tool" and tool.tool_call_id == "toolu_01" and tool.text == "18C"
    assert follow.role == "user" and isinstance(follow.content[1], ImagePart)
    assert failed.role == "tool" and failed.text == "Error: boom"
    assert got.conversation.tools[0].parameters == TOOL["input_schema"]


@pytest.mark.parametrize(("choice", "expected", "parallel"), [
    ({"type": "auto"}, ToolChoice("auto"), True),
    ({"type": "any", "disable_parallel_tool_use": True}, ToolChoice("required"), False),
    ({"type": "tool", "name": "get_weather"}, ToolChoice("required", ("get_weather",)), True),
    ({"type": "none"}, ToolChoice("none"), True)])
def test_tool_choice(choice: dict[str, Any], expected: ToolChoice, parallel: bool) -> None:
    got = _ingest(tools=[TOOL], tool_choice=choice)
    assert got.params.tool_choice == expected and got.params.parallel_tool_calls is parallel


@pytest.mark.parametrize(("thinking", "effort", "switch"), [
    ({"type": "enabled", "budget_tokens": 1024}, "low", True),
    ({"type": "enabled", "budget_tokens": 8000}, "medium", True),
    ({"type": "enabled", "budget_tokens": 20000}, "high", True),
    ({"type": "disabled"}, "low", False),
    ({"type": "adaptive"}, None, True)])
def test_thinking_maps_to_reasoning_controls(thinking: dict[str, Any], effort: str | None,
                                             switch: bool) -> None:
    got = _ingest(thinking=thinking, max_tokens=32000)
    assert (got.params.reasoning_effort, got.params.thinking) == (effort, switch)


@pytest.mark.parametrize("body", [
    {"messages": [{"role": "assistant", "content": [
        {"type": "thinking", "thinking": "x", "signature": "forged"}]}]},
    {"messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_x", "content": "?"}]}]},
    {"messages": [{"role": "user", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]}]},
    {"messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": "http://169.254.169.254/x.png"}}]}]},
    {"messages": []},
    {"top_k": 5},
    {"stop_sequences": [""]},
    {"tool_choice": {"type": "any"}},
    {"tools": [TOOL], "tool_choice": {"type": "tool", "name": "other"}},
    {"tools": [TOOL, TOOL]},
    {"thinking": {"type": "enabled", "budget_tokens": 2000}, "max_tokens": 1500}])
def test_refusals_are_400s(body: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequest):
        _ingest(**body)


def test_count_tokens_body_needs_no_max_tokens() -> None:
    conv, params = conversation_of(CountTokensRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [TOOL]}), _open)
    assert conv.messages[0].text == "hi" and params.tool_choice == ToolChoice("auto")


_text = st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=20)})
_junk = st.dictionaries(st.sampled_from(["type", "text", "id", "name", "input", "tool_use_id",
                                         "content", "is_error", "signature", "thinking", "data",
                                         "source", "cache_control"]),
                        st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8),
                                  st.sampled_from(["text", "image", "tool_use", "tool_result",
                                                   "thinking", "redacted_thinking", "document",
                                                   "toolu_1", "good:x", "f"]),
                                  st.just({"type": "base64", "media_type": "image/png", "data": "AAAA"}),
                                  st.just({}), st.lists(_text, max_size=2)),
                        max_size=6)
_message = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system"]),
                                  "content": st.one_of(st.text(max_size=10),
                                                       st.lists(st.one_of(_text, _junk), max_size=4))})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_message, max_size=4), st.one_of(st.none(), st.just([TOOL])))
def test_any_block_shape_is_a_conversation_or_a_400(messages: list[dict[str, Any]],
                                                    tools: list[dict[str, Any]] | None) -> None:
    body: dict[str, Any] = {"model": "m", "max_tokens": 10, "messages": messages}
    if tools:
        body["tools"] = tools
    try:
        req = MessagesRequest.model_validate(body)
    except ValidationError:
        return  # the route's 400 (tests/unit/api/messages/test_routes.py)
    with contextlib.suppress(InvalidRequest):
        ingest_messages(req, _open)
