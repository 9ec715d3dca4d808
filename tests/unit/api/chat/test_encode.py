"""Chat Completions encoding: the streamed chunks reassemble into the folded body.

Random well-formed event sequences (reasoning, preambles, text, tool calls, any finish)
go through a streaming :class:`ChatEncoder` and a non-streaming one (its ``result()``);
a client that accumulates the deltas the way the OpenAI SDK does must end up with the
non-streaming message, whose ``content`` is the visible deltas in stream order.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from app.api.chat.encode import ChatEncoder
from app.core import events as ev
from app.core.output import Usage

texts = st.text(alphabet="abc xyz{}\":,", min_size=1, max_size=6)


@st.composite
def event_streams(draw: st.DrawFn) -> list[ev.Event]:
    events: list[ev.Event] = []
    for kind in draw(st.lists(st.sampled_from(["reasoning", "preamble", "text"]), max_size=4)):
        for piece in draw(st.lists(texts, min_size=1, max_size=3)):
            events.append({"reasoning": ev.ReasoningDelta, "preamble": ev.PreambleDelta,
                           "text": ev.TextDelta}[kind](piece))
        events.append(ev.PartDone(kind))  # type: ignore[arg-type]
    n_calls = draw(st.integers(0, 2))
    for i in range(n_calls):
        name = draw(st.sampled_from(["get_weather", "lookup"]))
        events.append(ev.ToolCallStarted(i, f"call_{i}", name))
        args = draw(st.lists(texts, max_size=3))
        events += [ev.ToolCallArgumentsDelta(i, a) for a in args]
        events.append(ev.ToolCallDone(i, f"call_{i}", name, "".join(args)))
    reason = "tool_calls" if n_calls else draw(st.sampled_from(["stop", "length"]))
    events.append(ev.Finished(reason, Usage(3, draw(st.integers(1, 50)), 1)))
    return events


def reassemble(chunks: list[dict[str, Any]]) -> tuple[dict[str, Any], str | None, Any]:
    message: dict[str, Any] = {"role": None, "content": "", "reasoning_content": "", "tool_calls": {}}
    finish, usage = None, None
    for chunk in chunks:
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk["choices"]:
            delta = choice["delta"]
            message["role"] = delta.get("role", message["role"])
            message["content"] += delta.get("content") or ""
            message["reasoning_content"] += delta.get("reasoning_content") or ""
            for call in delta.get("tool_calls", []):
                slot = message["tool_calls"].setdefault(call["index"], {"arguments": ""})
                if "id" in call:
                    slot.update(id=call["id"], name=call["function"]["name"])
                slot["arguments"] += call["function"]["arguments"]
            finish = choice["finish_reason"] or finish
    return message, finish, usage


@settings(max_examples=300, deadline=None)
@given(event_streams())
def test_stream_reassembles_to_the_folded_body(events: list[ev.Event]) -> None:
    enc = ChatEncoder("chatcmpl-1", "m", 1, include_usage=True, logprobs=False)
    chunks = enc.start() + [c for e in events for c in enc.encode(e)]
    whole = ChatEncoder("chatcmpl-1", "m", 1, include_usage=True, logprobs=False, stream=False)
    assert [c for e in events for c in whole.encode(e)] == []  # non-streaming: nothing framed
    body = whole.result()
    assert body == enc.result()  # both views fold the same events
    streamed, finish, usage = reassemble(chunks)
    message = body["choices"][0]["message"]
    assert streamed["role"] == message["role"] == "assistant"
    assert (streamed["content"] or None) == message["content"]
    assert (streamed["reasoning_content"] or None) == message.get("reasoning_content")
    calls = [{"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
             for c in message.get("tool_calls", [])]
    assert [streamed["tool_calls"][i] for i in sorted(streamed["tool_calls"])] == calls
    assert finish == body["choices"][0]["finish_reason"]
    assert usage == body["usage"]
    # content is exactly the visible deltas, in stream order: reasoning never joins it
    visible = "".join(e.text for e in events if isinstance(e, (ev.TextDelta, ev.PreambleDelta)))
    assert (message["content"] or "") == visible
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == "chatcmpl-1" for c in chunks)


def test_error_event_is_an_openai_error_object() -> None:
    enc = ChatEncoder("chatcmpl-1", "m", 1, include_usage=False, logprobs=False)
    [payload] = enc.encode(ev.Error("backend died", code="upstream_error"))
    assert payload == {"error": {"message": "backend died", "type": "server_error", "param": None,
                                 "code": "upstream_error"}}
    assert enc.terminal and enc.encode(ev.Finished("stop", Usage())) == []  # one terminal only


def test_alternatives_are_cut_to_what_the_client_asked_for() -> None:
    from app.api.responses.encode import ResponsesEncoder
    from app.core.output import TokenLogprob, TopLogprob

    # vLLM sends one alternative for ``logprobs`` without ``top_logprobs``; OpenAI lists none.
    alternatives = (TopLogprob("Hi", -0.1), TopLogprob("Yo", -3.0))
    delta = ev.TextDelta("Hi", (TokenLogprob("Hi", -0.1, top=alternatives),))
    for top in (0, 1, 2):
        enc = ChatEncoder("c", "m", 1, include_usage=False, logprobs=True, top_logprobs=top)
        [chunk] = enc.encode(delta)
        assert len(chunk["choices"][0]["logprobs"]["content"][0]["top_logprobs"]) == top
        body = enc.result()
        assert len(body["choices"][0]["logprobs"]["content"][0]["top_logprobs"]) == top
        responses = ResponsesEncoder({"id": "r", "output": [], "status": "in_progress", "top_logprobs": top})
        events = responses.encode(delta)
        assert len(events[-1]["logprobs"][0]["top_logprobs"]) == top
