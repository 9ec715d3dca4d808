"""DeltaParser: chat-mode chunks (content / reasoning / tool-call deltas) → events."""

from __future__ import annotations

from app.core import events as ev
from app.core.output import Chunk, Finish, ToolCallChunk, Usage
from app.formats.chat.parse import DeltaParser


def run(chunks: list[Chunk], close: bool = True) -> list[ev.Event]:
    p = DeltaParser(prompt_tokens=7)
    out = [e for c in chunks for e in p.feed(c)]
    return out + (p.close() if close else [])


def test_reasoning_then_text_then_stop_with_late_usage() -> None:
    events = run([Chunk(reasoning="think"), Chunk(reasoning="ing"), Chunk(text="Hi"),
                  Chunk(text="!", finish=Finish("eos")),
                  Chunk(usage=Usage(prompt_tokens=9, completion_tokens=4, reasoning_tokens=2))])
    assert events == [ev.ReasoningDelta("think"), ev.ReasoningDelta("ing"), ev.PartDone("reasoning"),
                      ev.TextDelta("Hi"), ev.TextDelta("!"), ev.PartDone("text"),
                      ev.Finished("stop", Usage(9, 4, 2, 0))]


def test_tool_calls_streamed_and_split_by_index() -> None:
    events = run([
        Chunk(text="Let me look."),
        Chunk(tool_calls=(ToolCallChunk(0, "call_a", "get_weather", '{"ci'),)),
        Chunk(tool_calls=(ToolCallChunk(0, None, None, 'ty":"Paris"}'),)),
        Chunk(tool_calls=(ToolCallChunk(1, "call_b", "get_time", "{}"),)),
        Chunk(finish=Finish("tool_calls")),
    ])
    assert events[:2] == [ev.TextDelta("Let me look."), ev.PartDone("text")]
    assert events[2:] == [
        ev.ToolCallStarted(0, "call_a", "get_weather"), ev.ToolCallArgumentsDelta(0, '{"ci'),
        ev.ToolCallArgumentsDelta(0, 'ty":"Paris"}'),
        ev.ToolCallDone(0, "call_a", "get_weather", '{"city":"Paris"}'),
        ev.ToolCallStarted(1, "call_b", "get_time"), ev.ToolCallArgumentsDelta(1, "{}"),
        ev.ToolCallDone(1, "call_b", "get_time", "{}"),
        ev.Finished("tool_calls", Usage(7, 4, 0, 0)),
    ]


def test_missing_call_id_is_generated_and_length_wins() -> None:
    events = run([Chunk(tool_calls=(ToolCallChunk(0, None, "f", "{"),)), Chunk(finish=Finish("length"))])
    started = events[0]
    assert isinstance(started, ev.ToolCallStarted) and started.call_id.startswith("call_")
    assert isinstance(events[-1], ev.Finished) and events[-1].reason == "length"


def test_stream_without_finish_is_truncated() -> None:
    events = run([Chunk(text="Hel")])
    assert events[-1] == ev.Error("The backend stream ended before the model finished its answer.",
                                  code="stream_truncated")
    assert sum(isinstance(e, ev.TERMINAL) for e in events) == 1
