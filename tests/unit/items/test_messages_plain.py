""":func:`app.items.messages.items_to_messages` reads user / system / developer messages of text
without validating them into models (``_plain``): the same messages, the same errors, as
validating every item (the path every other item takes)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from app.core.errors import InvalidRequest
from app.items import messages

text = st.text(alphabet="ab <|>\n", max_size=6)
scalar = st.none() | st.integers(0, 2) | text | st.booleans()
part = st.one_of(
    st.fixed_dictionaries({"type": st.just("input_text"), "text": text}),
    st.fixed_dictionaries({"type": st.sampled_from(["input_text", "output_text", "input_image", "x"]),
                           "text": scalar}),
    st.fixed_dictionaries({"type": st.just("input_text"), "text": text, "extra": scalar}),
    st.fixed_dictionaries({"text": text}),
)
plain = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "system", "developer"]),
     "content": text | st.lists(st.fixed_dictionaries({"type": st.just("input_text"), "text": text}),
                                max_size=3)},
    optional={"type": st.just("message"), "id": st.none() | text, "status": st.none() | text})
FIELDS = ["role", "type", "id", "status", "content", "phase", "other"]
VALUES = (scalar | st.sampled_from(["user", "assistant", "tool", "message", "reasoning", "final_answer"])
          | st.lists(part, max_size=3))


@st.composite
def message(draw: st.DrawFn) -> dict[str, Any]:
    """A user / system / developer message of text, mostly with one field changed or added."""
    item: dict[str, Any] = dict(draw(plain))
    for _ in range(draw(st.integers(0, 2))):
        item[draw(st.sampled_from(FIELDS))] = draw(VALUES)
    if draw(st.booleans()) and isinstance(item.get("content"), list) and item["content"]:
        item["content"] = [*item["content"][:-1], draw(part)]
    return item


call = st.fixed_dictionaries({"type": st.just("function_call"), "call_id": st.just("c1"),
                              "name": st.just("f"), "arguments": st.just("{}")})
output = st.fixed_dictionaries({"type": st.just("function_call_output"), "call_id": st.just("c1"),
                                "output": text})
items = st.lists(message() | call | output, max_size=6)


def outcome(value: list[Any], first_input: int = 0) -> object:
    try:
        return messages.items_to_messages(value, first_input)
    except ValidationError as exc:
        return ("invalid", exc.errors(include_url=False))
    except InvalidRequest as exc:
        return ("refused", str(exc), exc.param)


def validated(value: list[Any], monkeypatch: pytest.MonkeyPatch, first_input: int = 0) -> object:
    """The outcome with every item validated into its model (no item read as plain)."""
    with monkeypatch.context() as patch:
        patch.setattr(messages, "_plain", lambda item: None)
        return outcome(value, first_input)


@settings(max_examples=400, deadline=None)
@given(items, st.integers(0, 3))
def test_plain_messages_read_as_validating_them_would(value: list[Any], first_input: int) -> None:
    with pytest.MonkeyPatch.context() as patch:
        assert outcome(value, first_input) == validated(value, patch, first_input)


def test_most_of_a_long_input_is_read_without_models(monkeypatch: pytest.MonkeyPatch) -> None:
    value: list[Any] = [{"type": "message", "id": f"msg_{i}", "role": "user",
                         "content": [{"type": "input_text", "text": f"m{i}"}]} for i in range(3000)]
    value[1500:1500] = [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                        {"type": "function_call_output", "call_id": "c", "output": "ok"}]
    seen: list[int] = []
    real = messages.validate_items

    def validate(rest: list[Any]) -> list[Any]:
        seen.append(len(rest))
        return real(rest)

    monkeypatch.setattr(messages, "validate_items", validate)
    got = messages.items_to_messages(value)
    assert seen == [2]  # only the call and its output were validated into models
    assert [m.text for m in got[1499:1503]] == ["m1499", "", "ok", "m1500"]
    assert got[-1].source == "input[3001]" and got[1501].role == "tool"


def test_an_invalid_item_among_plain_ones_is_the_error_of_the_whole_list(
        monkeypatch: pytest.MonkeyPatch) -> None:
    value: list[Any] = [{"role": "user", "content": f"m{i}"} for i in range(2500)]
    value[2100] = {"role": "user", "content": [{"type": "input_text", "text": 7}]}
    with pytest.raises(ValidationError) as plain:
        messages.items_to_messages(value)
    assert plain.value.errors()[0]["loc"][0] == 2100
    assert outcome(value) == validated(value, monkeypatch)
