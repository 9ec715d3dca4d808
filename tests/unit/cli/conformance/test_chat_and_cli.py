"""Chat chunk rules (each fails on a bad stream), schema validation, the table and exit status."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.cli.conformance import all_cases, api_root, select, spec
from app.cli.conformance.chat import check_chunks, typed
from app.cli.conformance.runner import Check, Result, exit_status, table

Json = dict[str, Any]


def chunk(delta: Json, finish: str | None = None, **kw: Any) -> Json:
    return {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **kw}


USAGE = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [],
         "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}
GOOD = [chunk({"role": "assistant", "content": ""}), chunk({"content": "Hi"}), chunk({}, "stop"), USAGE]
CALL = [chunk({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                                    "function": {"name": "f", "arguments": '{"a"'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]}), chunk({}, "tool_calls")]


def test_good_chunks_pass_and_parse() -> None:
    assert check_chunks(GOOD, True, True) == []
    assert check_chunks(CALL, True, False) == []
    check = Check()
    typed(check, "ChatCompletionChunk", [*GOOD, *CALL])
    assert check.schema_checked and check.schema_problems == []
    typed(check, "ChatCompletionChunk", [{"id": 1, "choices": "x"}])
    assert check.schema_problems


def _bad(fn: Any, base: list[Json] = GOOD) -> list[Json]:
    chunks = copy.deepcopy(base)
    fn(chunks)
    return chunks


@pytest.mark.parametrize(("rule", "chunks", "done", "usage"), [
    ("done", GOOD, False, True),
    ("chunk", _bad(lambda c: c[1].update(id="other")), True, True),
    ("role", _bad(lambda c: c[0]["choices"][0]["delta"].pop("role")), True, True),
    ("role", _bad(lambda c: c[1]["choices"][0]["delta"].update(role="user")), True, True),
    ("finish", _bad(lambda c: c[1]["choices"][0].update(finish_reason="stop")), True, True),
    ("finish", _bad(lambda c: c[2]["choices"][0].update(finish_reason=None)), True, True),
    ("finish", _bad(lambda c: c[2]["choices"][0].update(finish_reason="bogus")), True, True),
    ("usage", _bad(lambda c: c.pop()), True, True),
    ("usage", GOOD, True, False),
    ("usage", _bad(lambda c: c[-1]["usage"].update(total_tokens=9)), True, True),
    ("usage", _bad(lambda c: c.insert(0, c.pop())), True, True),
    ("tool", _bad(lambda c: c[0]["choices"][0]["delta"]["tool_calls"][0].pop("id"), CALL), True, False),
    ("tool", _bad(lambda c: c[1]["choices"][0]["delta"]["tool_calls"][0]["function"].update(arguments="}"),
                  CALL), True, False),
])
def test_each_chunk_rule_fails(rule: str, chunks: list[Json], done: bool, usage: bool) -> None:
    assert rule in {p.split(":", 1)[0] for p in check_chunks(chunks, done, usage)}


def test_spec_document_ships_and_validates() -> None:
    assert spec.document()["info"]["version"] == "2026-04-24"
    assert len(spec.event_schemas()) == 24
    assert spec.validate("CompactResource", {"id": "x"})
    assert spec.validate_event({"type": "response.nope", "sequence_number": 0})


def test_select_and_api_root() -> None:
    ids = [c.id for c in select(all_cases(), ["websocket-*,chat/chat-basic"])]
    assert "chat-basic" in ids and all(i.startswith("websocket-") for i in ids if i != "chat-basic")
    assert len({c.id for c in all_cases()}) == len(all_cases()) == 25
    assert api_root("http://h:1") == "http://h:1/v1" and api_root("http://h:1/v1/") == "http://h:1/v1"


def test_table_and_exit_status() -> None:
    ok = Result("a", "chat", "A", "passed", "pass", "pass", "pass", 0.1, 3)
    bad = Result("b", "responses", "B", "failed", "fail", "-", "-", 0.2, 0, ["HTTP 405: nope"])
    skipped = Result("c", "chat", "C", "skipped", "-", "-", "-", 0.0, 0, ["why"])
    assert exit_status([ok, skipped]) == 0 and exit_status([ok, bad]) == 1 and exit_status([skipped]) == 1
    text = table([ok, bad])
    assert "FAIL responses/b" in text and "HTTP 405: nope" in text


def test_unreachable_server_fails_every_test(capsys: pytest.CaptureFixture[str]) -> None:
    from app.cli.main import main

    code = main(["conformance", "--base-url", "http://127.0.0.1:9", "--model", "m", "--only",
                 "basic-response,websocket-response,chat-basic", "--timeout", "2"])
    out = capsys.readouterr().out
    assert code == 1 and out.count("FAIL") == 3 and "no WebSocket mode" in out
