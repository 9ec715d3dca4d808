"""A long list in a body (``input``, ``messages``) and a long list of stored items are
validated in pieces (app/http/body.py ``validate_body``, app/items/messages.py
``validate_items``): never more than a piece per pydantic call, and exactly the model, or the
errors, one call gives."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from app.api.chat.routes import router as chat_router
from app.api.responses.routes import router as responses_router
from app.http import body as body_module
from app.http.body import validate_body
from app.items import messages as items_module
from app.items.messages import validate_items

PIECE = 3


def _field(router: Any, path: str) -> Any:
    return next(r for r in router.routes if getattr(r, "path", "") == path).body_field


FIELDS = {"create": _field(responses_router, "/v1/responses"),
          "input_tokens": _field(responses_router, "/v1/responses/input_tokens"),
          "chat": _field(chat_router, "/v1/chat/completions")}

RESPONSES_ITEMS = [
    {"role": "user", "content": "hi"},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]},
    {"role": "assistant", "content": "a"},
    {"role": "developer", "content": "d"},
    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "out"},
    {"type": "reasoning", "summary": []},
    {"type": "item_reference", "id": "msg_1"},
    {"role": "user", "content": "n", "id": None},
    # refused, each its own way
    {"role": "user", "content": 5},
    {"role": "user"},
    {"type": "nonsense"},
    {"type": "function_call", "call_id": "c1", "name": "f"},
    "a string",
    None,
    [],
]
CHAT_MESSAGES = [
    {"role": "user", "content": "hi"},
    {"role": "system", "content": "s"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c", "content": "r"},
    {"role": "user", "content": [{"type": "text", "text": "t"}]},
    {"role": "user", "content": 1},
    {"role": "wizard", "content": "x"},
    {},
]


@pytest.fixture(autouse=True)
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(body_module, "CHUNK", PIECE)
    monkeypatch.setattr(items_module, "CHUNK", PIECE)


def _same(field: Any, value: Any) -> None:
    whole, whole_errors = field.validate(value, {}, loc=("body",))
    pieces, errors = validate_body(field, value)
    assert errors == whole_errors
    assert pieces == whole
    if whole is not None:
        assert pieces.model_fields_set == whole.model_fields_set


@settings(max_examples=150, deadline=None)
@given(kind=st.sampled_from(["create", "input_tokens"]),
       items=st.lists(st.sampled_from(RESPONSES_ITEMS), max_size=12),
       extra=st.sampled_from([{}, {"temperature": 9}, {"instructions": None}, {"bogus": 1},
                              {"tools": [{"type": "function", "name": "f"}]}, {"model": 3}]))
def test_a_responses_body_in_pieces_is_the_body_in_one_call(kind: str, items: list[Any],
                                                            extra: dict[str, Any]) -> None:
    _same(FIELDS[kind], {"model": "m", "input": items, **extra})


@settings(max_examples=100, deadline=None)
@given(messages=st.lists(st.sampled_from(CHAT_MESSAGES), max_size=12),
       extra=st.sampled_from([{}, {"max_tokens": 0}, {"seed": None}, {"stream": "yes"}]))
def test_a_chat_body_in_pieces_is_the_body_in_one_call(messages: list[Any], extra: dict[str, Any]) -> None:
    _same(FIELDS["chat"], {"model": "m", "messages": messages, **extra})


@settings(max_examples=100, deadline=None)
@given(items=st.lists(st.sampled_from(RESPONSES_ITEMS), max_size=12))
def test_stored_items_in_pieces_are_the_items_in_one_call(items: list[Any]) -> None:
    try:
        whole = items_module._ITEMS.validate_python(items)
    except ValidationError as exc:
        with pytest.raises(ValidationError) as caught:
            validate_items(items)
        assert caught.value.errors() == exc.errors()
    else:
        assert validate_items(items) == whole


class Spy:
    """Records how many items each validation call was given."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.sizes: list[int] = []

    def validate_python(self, value: Any, **kw: Any) -> Any:
        self.sizes.append(len(value))
        return self.inner.validate_python(value, **kw)


def test_no_call_validates_more_than_a_piece(monkeypatch: pytest.MonkeyPatch) -> None:
    field = FIELDS["input_tokens"]
    items = [{"role": "user", "content": f"m{i}"} for i in range(20)]
    calls: list[int] = []
    validate = field.validate

    class Field:
        field_info = field.field_info

        def validate(self, value: Any, values: Any, *, loc: Any) -> Any:
            calls.append(len(value["input"]))
            return validate(value, values, loc=loc)

    spy = Spy(body_module._item_list(field.field_info.annotation, "input"))
    monkeypatch.setattr(body_module, "_item_list", lambda model, name: spy)
    model, errors = validate_body(Field(), {"model": "m", "input": items})
    assert not errors and len(model.input) == 20
    assert calls == [PIECE] and max(spy.sizes) == PIECE and sum(spy.sizes) == 20 - PIECE

    stored = Spy(items_module._ITEMS)
    monkeypatch.setattr(items_module, "_ITEMS", stored)
    validate_items([{"type": "message", "role": "user", "content": "x"}] * 20)
    assert max(stored.sizes) == PIECE and sum(stored.sizes) == 20
