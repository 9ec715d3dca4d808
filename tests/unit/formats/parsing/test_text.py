"""TextEventParser: chunk bookkeeping around a pure text decoder."""

from __future__ import annotations

from app.core import events as ev
from app.core.output import Chunk, Finish, Usage
from app.formats.parsing.text import TextEventParser
from tests.support.plain_decoder import PlainTextDecoder


def run(chunks: list[Chunk]) -> list[ev.Event]:
    p = TextEventParser(PlainTextDecoder(), prompt_tokens=5)
    return [e for c in chunks for e in p.feed(c)] + p.close()


def test_eos_is_stop_with_backend_usage() -> None:
    events = run([Chunk("Hel", (1,)), Chunk("lo", (2,)),
                  Chunk("", (), finish=Finish("eos"), usage=Usage(12, 2, 0, 3))])
    assert events == [ev.TextDelta("Hel"), ev.TextDelta("lo"), ev.PartDone("text"),
                      ev.Finished("stop", Usage(12, 2, 0, 3))]


def test_length_and_counted_usage_when_backend_sends_none() -> None:
    events = run([Chunk("a", (1,)), Chunk("b", (2, 3), finish=Finish("length"))])
    assert events[-1] == ev.Finished("length", Usage(5, 3, 0, 0))


def test_usage_after_finish_is_waited_for() -> None:
    p = TextEventParser(PlainTextDecoder(), prompt_tokens=5)
    assert p.feed(Chunk("x", (1,), finish=Finish("eos"))) == [ev.TextDelta("x"), ev.PartDone("text")]
    assert p.feed(Chunk(usage=Usage(8, 1))) == [ev.Finished("stop", Usage(8, 1, 0, 0))]
    assert p.close() == [] and p.feed(Chunk("late")) == []


def test_end_without_finish_is_truncation() -> None:
    events = run([Chunk("partial", (1,))])
    assert isinstance(events[-1], ev.Error) and events[-1].code == "stream_truncated"


def _logprob_parser(name: str, prompt: str) -> TextEventParser:
    from app.formats.template.parse import template_decoder
    from tests.unit.formats.template.analysis.roundtrip import TEMPLATES

    source = (TEMPLATES / f"{name}.jinja").read_text()
    return TextEventParser(template_decoder(source, ((prompt, True),)), 5)


def test_answer_tokens_keep_their_logprobs_and_reasoning_and_markers_do_not() -> None:
    """Template and OpenChatML models: the answer's tokens come back with their logprobs (they
    used to come back empty); reasoning tokens and the markers around them are not answer
    tokens."""
    from app.core.output import TokenLogprob
    from app.formats.openchatml.parse import OpenChatMLDecoder

    pieces = ["<think>", "Let", " me", " think", "</think>", "\n\n", "Hello", " <", "b>", " world",
              "."]
    for parser in (_logprob_parser("deepseek-ai-DeepSeek-V3.1", "<｜Assistant｜>"),
                   TextEventParser(OpenChatMLDecoder(), 5)):
        if isinstance(parser._decoder, OpenChatMLDecoder):
            pieces = ["<|channel|>", "analysis", "<|message|>", "Let", " me", " think", "<|end|>",
                      "<|start|>", "assistant", "<|channel|>", "final", "<|message|>", "Hello",
                      " <", "b>", " world", ".", "<|return|>"]
        events: list[ev.Event] = []
        for i, piece in enumerate(pieces):
            events += parser.feed(Chunk(piece, (i,), logprobs=(TokenLogprob(piece, -0.1 * i),)))
        events += parser.feed(Chunk(finish=Finish("eos"))) + parser.close()
        text = "".join(e.text for e in events if isinstance(e, ev.TextDelta))
        tokens = [lp.token for e in events if isinstance(e, ev.TextDelta) for lp in e.logprobs or ()]
        assert text == "Hello <b> world."
        assert tokens == ["Hello", " <", "b>", " world", "."], tokens
