"""MessagesEncoder: event sequences → Anthropic's exact stream events, and the stream's deltas
fold to the same message the non-streaming view gives."""

from __future__ import annotations

from typing import Any

import orjson

from app.api.messages.encode import MessagesEncoder
from app.core import events as ev
from app.core.output import Usage

USAGE = Usage(prompt_tokens=20, completion_tokens=7, cached_tokens=5)


def _seal(text: str) -> str:
    return "sealed:" + text


def _run(events: list[ev.Event], *, stream: bool = True) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    enc = MessagesEncoder("msg_1", "m", _seal, stream=stream)
    out = enc.start()
    for e in events:
        out.extend(enc.encode(e))
    return out, enc.result()


def _fold(stream: list[dict[str, Any]]) -> dict[str, Any]:
    """What a client accumulates from the events (the SDK's rules)."""
    message: dict[str, Any] = {}
    json_bufs: dict[int, str] = {}
    for e in stream:
        if e["type"] == "message_start":
            message = {**e["message"], "content": []}
        elif e["type"] == "content_block_start":
            assert e["index"] == len(message["content"])
            message["content"].append(dict(e["content_block"]))
        elif e["type"] == "content_block_delta":
            block, d = message["content"][e["index"]], e["delta"]
            if d["type"] == "text_delta":
                block["text"] += d["text"]
            elif d["type"] == "thinking_delta":
                block["thinking"] += d["thinking"]
            elif d["type"] == "signature_delta":
                block["signature"] = d["signature"]
            else:
                json_bufs[e["index"]] = json_bufs.get(e["index"], "") + d["partial_json"]
        elif e["type"] == "content_block_stop":
            if e["index"] in json_bufs:
                message["content"][e["index"]]["input"] = orjson.loads(json_bufs[e["index"]])
        elif e["type"] == "message_delta":
            message.update(e["delta"])
            message["usage"] = e["usage"]
    return message


def test_text_stream_is_exact() -> None:
    stream, result = _run([ev.TextDelta("Hel"), ev.TextDelta("lo"), ev.PartDone("text"),
                           ev.Finished("stop", USAGE)])
    assert [e["type"] for e in stream] == [
        "message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta",
        "content_block_stop", "message_delta", "message_stop"]
    assert stream[0]["message"]["content"] == [] and stream[0]["message"]["id"] == "msg_1"
    assert stream[1] == {"type": "ping"}  # one right after message_start, as Anthropic sends
    stream = [stream[0], *stream[2:]]
    assert stream[1] == {"type": "content_block_start", "index": 0,
                         "content_block": {"type": "text", "text": ""}}
    assert stream[2] == {"type": "content_block_delta", "index": 0,
                         "delta": {"type": "text_delta", "text": "Hel"}}
    assert stream[5] == {"type": "message_delta",
                         "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                         "usage": {"input_tokens": 15, "output_tokens": 7,
                                   "cache_read_input_tokens": 5, "cache_creation_input_tokens": 0}}
    assert result["content"] == [{"type": "text", "text": "Hello"}]
    assert result["stop_reason"] == "end_turn" and result["type"] == "message"
    assert result["role"] == "assistant"
    assert _fold(stream) == result


def test_thinking_text_and_tool_use_in_the_models_order() -> None:
    events: list[ev.Event] = [
        ev.ReasoningDelta("Think"), ev.ReasoningDelta("ing."), ev.PartDone("reasoning"),
        ev.PreambleDelta("Let me look."), ev.PartDone("preamble"),
        ev.ToolCallStarted(0, "toolu_1", "get_weather"),
        ev.ToolCallArgumentsDelta(0, '{"city":'), ev.ToolCallArgumentsDelta(0, '"Paris"}'),
        ev.ToolCallDone(0, "toolu_1", "get_weather", '{"city":"Paris"}'),
        ev.Finished("tool_calls", USAGE)]
    stream, result = _run(events)
    assert [b["type"] for b in result["content"]] == ["thinking", "text", "tool_use"]
    assert result["content"][0] == {"type": "thinking", "thinking": "Thinking.",
                                    "signature": "sealed:Thinking."}
    assert result["content"][2] == {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                    "input": {"city": "Paris"}}
    assert result["stop_reason"] == "tool_use"
    signature = [e for e in stream if e["type"] == "content_block_delta"
                 and e["delta"]["type"] == "signature_delta"]
    assert signature == [{"type": "content_block_delta", "index": 0,
                          "delta": {"type": "signature_delta", "signature": "sealed:Thinking."}}]
    start = next(e for e in stream if e["type"] == "content_block_start" and e["index"] == 2)
    assert start["content_block"] == {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                      "input": {}}
    assert _fold(stream) == result


def test_blocks_close_without_part_done() -> None:
    stream, result = _run([ev.ReasoningDelta("a"), ev.TextDelta("b"), ev.Finished("length", USAGE)])
    kinds = [(e["type"], e.get("index")) for e in stream]
    assert kinds.index(("content_block_stop", 0)) < kinds.index(("content_block_start", 1))
    assert result["stop_reason"] == "max_tokens"
    assert _fold(stream) == result


def test_error_mid_stream_is_the_last_event() -> None:
    stream, _ = _run([ev.TextDelta("partial"),
                      ev.Error("the model broke off", code="model_output_error"),
                      ev.TextDelta("never"), ev.Finished("stop", USAGE)])
    assert stream[-1] == {"type": "error", "error": {"type": "api_error",
                                                    "message": "the model broke off"}}
    assert sum(e["type"] == "error" for e in stream) == 1
    assert not any(e["type"] in ("message_delta", "message_stop") for e in stream)


def test_overload_and_rate_limit_map_to_anthropic_types() -> None:
    for code, expected in (("server_overloaded", "overloaded_error"),
                           ("rate_limit_exceeded", "rate_limit_error"),
                           ("context_length_exceeded", "invalid_request_error")):
        stream, _ = _run([ev.Error("x", code=code)])
        assert stream[-1]["error"]["type"] == expected


def test_non_streaming_sends_nothing_but_folds() -> None:
    stream, result = _run([ev.TextDelta("Hi"), ev.Finished("stop", USAGE)], stream=False)
    assert [e["type"] for e in stream] == ["message_start", "ping"]  # start() is the run's to drop
    assert result["content"] == [{"type": "text", "text": "Hi"}]


def test_repaired_arguments_win_and_bad_json_is_an_empty_input() -> None:
    _, result = _run([ev.ToolCallStarted(0, "toolu_1", "f"), ev.ToolCallArgumentsDelta(0, "{"),
                      ev.ToolCallDone(0, "toolu_1", "f", '{"a": 1}'), ev.Finished("tool_calls", USAGE)])
    assert result["content"][0]["input"] == {"a": 1}
    _, result = _run([ev.ToolCallStarted(0, "toolu_1", "f"), ev.ToolCallArgumentsDelta(0, "[1]"),
                      ev.Finished("tool_calls", USAGE)])
    assert result["content"][0]["input"] == {}


def test_cancel_ends_silently() -> None:
    enc = MessagesEncoder("msg_1", "m", _seal)
    assert enc.cancel() == [] and enc.encode(ev.TextDelta("x")) == []


def test_a_stop_sequence_is_the_stop_reason_and_named() -> None:
    stream, result = _run([ev.TextDelta("one two"), ev.PartDone("text"),
                           ev.Finished("stop", USAGE, stop_sequence="THREE")])
    assert result["stop_reason"] == "stop_sequence" and result["stop_sequence"] == "THREE"
    assert stream[-2]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "THREE"}
    assert _fold(stream) == result
    _, plain = _run([ev.TextDelta("one"), ev.Finished("stop", USAGE)])
    assert plain["stop_reason"] == "end_turn" and plain["stop_sequence"] is None


def test_omitted_thinking_streams_no_text_but_seals_it() -> None:
    def seal(text: str) -> str:  # an opaque token, as the real sealer's
        return f"sig-{len(text)}"

    enc = MessagesEncoder("msg_1", "m", seal, show_thinking=False)
    stream = enc.start()
    for e in (ev.ReasoningDelta("secret "), ev.ReasoningDelta("plan"), ev.PartDone("reasoning"),
              ev.TextDelta("Hi"), ev.Finished("stop", USAGE)):
        stream.extend(enc.encode(e))
    result = enc.result()
    assert not [e for e in stream if e.get("delta", {}).get("type") == "thinking_delta"]
    assert "secret" not in orjson.dumps(stream).decode() + orjson.dumps(result).decode()
    assert result["content"][0] == {"type": "thinking", "thinking": "", "signature": seal("secret plan")}
    assert result["content"][1] == {"type": "text", "text": "Hi"}
    assert _fold(stream) == result
