"""app/items/resolve.py: sealed items opened, compactions expanded, files read; labels."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.errors import InvalidRequest
from app.items import compact
from app.items.resolve import has_files, resolve, seal_reasoning
from app.items.sealing import Sealer

SEALER = Sealer.from_config(base64.b64encode(b"r" * 32).decode())
USER = {"type": "message", "id": "msg_1", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}


def test_labels_follow_the_request_through_a_compaction() -> None:
    kept = [USER, {"type": "message", "id": "msg_2", "role": "assistant",
                   "content": [{"type": "output_text", "text": "hello"}]}]
    item = compact.compaction_item(kept, SEALER, "t")
    new = [dict(USER), item, {"type": "reasoning", "summary": [],
                              "encrypted_content": seal_reasoning(SEALER, "t", "because")},
           {"role": "user", "content": [{"type": "input_file", "filename": "a.md",
                                         "file_data": base64.b64encode(b"# A").decode()}]}]
    prev = [{"type": "message", "id": "msg_0", "role": "user", "content": "earlier"}]
    out = resolve(prev, new, SEALER, "t")
    assert out.labels == ["previous_response_id", "input[1]", "input[1]", "input[2]", "input[3]"]
    assert out.items[1:3] == kept  # the visible user copy is not repeated
    assert out.items[3]["content"] == [{"type": "reasoning_text", "text": "because"}]
    assert out.items[4]["content"][0] == {"type": "input_text",
                                          "text": "<file name='a.md' type='text/markdown'>\n# A\n</file>"}
    assert has_files(new) and not has_files(out.items)


def test_previous_items_are_not_opened_again() -> None:
    stale = {"type": "reasoning", "summary": [], "encrypted_content": "ocm1.gone",
             "content": [{"type": "reasoning_text", "text": "kept"}]}
    assert resolve([stale], [], SEALER, "t").items == [stale]


@pytest.mark.parametrize("kind", ["reasoning", "compaction"])
def test_the_tenant_must_match(kind: str) -> None:
    token = (seal_reasoning(SEALER, "a", "x") if kind == "reasoning"
             else compact.compaction_item([USER], SEALER, "a")["encrypted_content"])
    with pytest.raises(InvalidRequest) as err:
        resolve([], [{"type": kind, "summary": [], "encrypted_content": token}], SEALER, "b")
    assert err.value.param == "input[0].encrypted_content"


@given(st.sampled_from(["reasoning", "compaction"]), st.one_of(st.text(max_size=120), st.none(),
                                                               st.integers(), st.just("ocm1.")))
def test_any_encrypted_content_opens_or_is_a_400(kind: str, token: Any) -> None:
    item: dict[str, Any] = {"type": kind, "summary": [], "encrypted_content": token}
    try:
        resolve([], [item], SEALER, "t")
    except InvalidRequest as exc:
        assert exc.status == 400 and exc.param == "input[0].encrypted_content"
    else:
        assert kind == "reasoning" and token is None  # nothing sealed to open
