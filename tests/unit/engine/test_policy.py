"""Stop strings on the answer text: split anywhere, and logprobs stay with their tokens."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from app.core import events as ev
from app.core.output import TokenLogprob, Usage
from app.engine.policy import StopSequences


def _delta(text: str) -> ev.TextDelta:
    return ev.TextDelta(text, (TokenLogprob(text, -float(len(text))),))


def _run(pieces: list[str], stops: tuple[str, ...]) -> tuple[list[ev.TextDelta], bool]:
    policy = StopSequences(stops)
    out: list[ev.Event] = []
    for p in pieces:
        out += policy.feed(_delta(p))
        if policy.matched:
            break
    else:
        out += policy.flush()
    return [e for e in out if isinstance(e, ev.TextDelta)], policy.matched


def test_logprobs_stay_with_their_tokens() -> None:
    out, matched = _run(["a", "b", "c", "d"], ("c",))
    assert matched and [d.text for d in out] == ["a", "b"]
    assert [[lp.token for lp in d.logprobs or ()] for d in out] == [["a"], ["b"]]


def test_flush_keeps_logprobs() -> None:
    out, matched = _run(["x", "y"], ("zzz",))
    assert not matched and [d.text for d in out] == ["x", "y"]
    assert all(d.logprobs and d.logprobs[0].token == d.text for d in out)


def test_a_cut_delta_keeps_only_the_tokens_before_the_cut() -> None:
    policy = StopSequences(("STOP",))
    two = ev.TextDelta("okSTOP", (TokenLogprob("ok", -1.0), TokenLogprob("STOP", -2.0)))
    out = policy.feed(two)
    assert policy.matched and out == [ev.TextDelta("ok", (TokenLogprob("ok", -1.0),))]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet="abcS", min_size=1, max_size=4), max_size=12),
       st.lists(st.text(alphabet="abcS", min_size=1, max_size=3), min_size=1, max_size=3))
def test_output_is_the_text_before_the_first_completed_stop(pieces: list[str], stops: list[str]) -> None:
    text = "".join(pieces)
    # the stop string completed first wins (ties: the one starting first), however it is chunked
    ends = [(i + len(s), i) for s in stops if (i := text.find(s)) >= 0]
    out, matched = _run(pieces, tuple(stops))
    emitted = "".join(d.text for d in out)
    assert matched == bool(ends)
    # Each piece is one token with a logprob: the text ends with the last whole token before
    # the stop string (a token the stop begins inside goes, with its leading characters).
    whole, size = [], 0
    for piece in pieces:
        if ends and size + len(piece) > min(ends)[1]:
            break
        whole.append(piece)
        size += len(piece)
    assert emitted == "".join(whole)
    assert emitted == "".join(lp.token for d in out for lp in d.logprobs or ())
    for d in out:  # every token's logprob is on the delta that carries its text
        assert all(lp.token in d.text or d.text in lp.token for lp in d.logprobs or ())


def test_one_call_drops_every_call_event_after_the_first_call() -> None:
    from app.engine.policy import OneCall

    events: list[ev.Event] = []
    for i, call_id in enumerate("ab"):
        events += [ev.ToolCallStarted(i, call_id, "f"), ev.ToolCallArgumentsDelta(i, "{}"),
                   ev.ToolCallDone(i, call_id, "f", "{}")]
    events.append(ev.Finished("tool_calls", Usage()))
    one, many = OneCall(parallel=False), OneCall(parallel=True)
    assert [e for e in events if one.keep(e)] == events[:3] + events[-1:]
    assert [e for e in events if many.keep(e)] == events


def test_with_logprobs_the_cut_text_is_exactly_its_tokens() -> None:
    """Stop "STOP" inside the token " STOP": the text was "Hello world " while the logprobs
    ended at " world" (the trailing space had no token)."""
    from app.core.output import TokenLogprob

    tokens = ("Hello", " world", " STOP", " more")
    lps = tuple(TokenLogprob(t, -0.1) for t in tokens)
    stops = StopSequences(("STOP",))
    out = stops.feed(ev.TextDelta("".join(tokens), lps))
    text = "".join(e.text for e in out if isinstance(e, ev.TextDelta))
    got = [lp.token for e in out if isinstance(e, ev.TextDelta) for lp in e.logprobs or ()]
    assert stops.matched and text == "Hello world" == "".join(got)


def test_without_logprobs_the_cut_is_exact() -> None:
    stops = StopSequences(("STOP",))
    out = stops.feed(ev.TextDelta("Hello world STOP more"))
    assert "".join(e.text for e in out if isinstance(e, ev.TextDelta)) == "Hello world "
