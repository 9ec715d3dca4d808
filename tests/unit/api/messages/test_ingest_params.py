"""A message's GenerationParams are built in one place (issue 37's cost): the sampling fields and
the prompt's controls land together, ``count_tokens`` gets the same controls without the
sampling, and a request without tools skips nothing that must be refused."""

from __future__ import annotations

from typing import Any

import pytest

from app.api.messages.ingest import conversation_of, ingest_messages
from app.core.conversation import GenerationParams, ToolChoice
from app.core.errors import InvalidRequest
from schemas.messages import CountTokensRequest, MessagesRequest

TOOL = {"name": "lookup", "input_schema": {"type": "object"}}


def _open(token: str, param: str) -> str:
    raise InvalidRequest(f"{param} is not ours.", param=param)


def _body(**extra: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 20000, "messages": [{"role": "user", "content": "hi"}], **extra}


def test_sampling_and_prompt_controls_are_one_params() -> None:
    body = _body(stop_sequences=["END", "STOP"], temperature=0.25, top_p=0.5, metadata={"user_id": "u7"},
                 tools=[TOOL],
                 tool_choice={"type": "tool", "name": "lookup", "disable_parallel_tool_use": True},
                 thinking={"type": "enabled", "budget_tokens": 5000})
    got = ingest_messages(MessagesRequest.model_validate(body), _open).params
    assert got == GenerationParams(max_tokens=20000, temperature=0.25, top_p=0.5, stop=("END", "STOP"),
                                   user="u7", reasoning_effort="medium", thinking=True,
                                   tool_choice=ToolChoice("required", ("lookup",)), parallel_tool_calls=False)


def test_count_tokens_has_the_same_controls_without_sampling() -> None:
    body = _body(tools=[TOOL], tool_choice={"type": "any"}, thinking={"type": "disabled"})
    message = ingest_messages(MessagesRequest.model_validate(body), _open)
    del body["max_tokens"]
    conversation, params = conversation_of(CountTokensRequest.model_validate(body), _open)
    assert conversation == message.conversation
    assert params == GenerationParams(reasoning_effort="low", thinking=False,
                                      tool_choice=ToolChoice("required"), parallel_tool_calls=True)


def test_no_tools_is_auto_and_parallel() -> None:
    got = ingest_messages(MessagesRequest.model_validate(_body()), _open)
    assert got.conversation.tools == ()
    assert got.params.tool_choice == ToolChoice("auto") and got.params.parallel_tool_calls
    assert got.params.stop == () and got.params.user is None and got.show_thinking


def test_a_tool_reference_without_tools_is_still_refused() -> None:
    messages = [{"role": "user", "content": "find"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "ToolSearch",
                                                   "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [
                    {"type": "tool_reference", "tool_name": "Write"}]}]}]
    with pytest.raises(InvalidRequest) as caught:
        ingest_messages(MessagesRequest.model_validate(_body(messages=messages)), _open)
    assert caught.value.param == "messages[2].content[0].content[0].tool_name"


def test_deferred_tools_only_are_not_offered_yet() -> None:
    tools = [{**TOOL, "defer_loading": True}]
    got = ingest_messages(MessagesRequest.model_validate(_body(tools=tools)), _open)
    assert got.conversation.tools == ()  # offered once a tool_reference names it


@pytest.mark.parametrize("stop", [["a", ""], ["1", "2", "3", "4", "5"]])
def test_bad_stop_sequences(stop: list[str]) -> None:
    with pytest.raises(InvalidRequest) as caught:
        ingest_messages(MessagesRequest.model_validate(_body(stop_sequences=stop)), _open)
    assert caught.value.param == "stop_sequences"


def test_budget_must_be_below_max_tokens() -> None:
    body = _body(max_tokens=2000, thinking={"type": "enabled", "budget_tokens": 2000})
    with pytest.raises(InvalidRequest) as caught:
        ingest_messages(MessagesRequest.model_validate(body), _open)
    assert caught.value.param == "max_tokens"


def test_omitted_display_hides_thinking() -> None:
    body = _body(thinking={"type": "adaptive", "display": "omitted"})
    assert not ingest_messages(MessagesRequest.model_validate(body), _open).show_thinking
