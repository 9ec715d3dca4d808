"""The Harmony parser that tracks messages by token id gives the same events as the previous
implementation on openai-harmony's ``StreamableParser`` (``tests/support/harmony_reference``),
on generated well-formed and malformed token streams cut into any chunks; and its bodies decode
invalid UTF-8 without losing text."""

from __future__ import annotations

import dataclasses
import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core import events as ev
from app.core.output import Chunk, Finish, TokenLogprob
from app.formats.harmony.header import HarmonyFormatError, parse_header
from app.formats.harmony.parse import HarmonyEventParser
from app.formats.harmony.vocab import CALL, CHANNEL, END, MESSAGE, RETURN, START, harmony_encoding
from tests.support.harmony_reference import ReferenceHarmonyParser

_ENC = harmony_encoding()
_FINISHES = ("eos", "length", "stop_string")

# header words: roles, channels, recipients, content types, odd whitespace and markers
_HEADER_BITS = st.sampled_from([
    "assistant", "user", "system", "developer", "tool", "functions.get_weather", "bogus",
    "<|channel|>analysis", "<|channel|>commentary", "<|channel|>final", "<|channel|>",
    "<|channel|>weird", "<|channel|>final<|constrain|>json", " to=functions.get_weather",
    " to=functions.a.b", " to=browser.search", " to=assistant", "to=", " <|constrain|>json",
    "<|constrain|>json", " json", " ", "\t", "\u3000", "\x1c", "\n", "<|start|>", "<|end|>",
    "x<y", "ünï",
])
_BODY_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=24)
_RAW_SPECIAL = st.sampled_from([START, END, RETURN, CALL, MESSAGE, CHANNEL, 200003, 200010])


def _encode(text: str) -> list[int]:
    return list(_ENC.encode(text, allowed_special="all"))


@st.composite
def _messages(draw: st.DrawFn) -> list[int]:
    """A token stream: messages with generated headers and bodies, sometimes malformed."""
    ids: list[int] = []
    for i in range(draw(st.integers(1, 4))):
        opened = i > 0 or (draw(st.booleans()) and draw(st.booleans()))
        if opened and draw(st.integers(0, 9)) > 0:  # sometimes the <|start|> is missing
            ids.append(START)
        ids += _encode("".join(draw(st.lists(_HEADER_BITS, max_size=4))))
        if draw(st.integers(0, 9)) == 0:  # a header cut by a terminator or a stray special
            ids.append(draw(_RAW_SPECIAL))
        ids.append(MESSAGE)
        for piece in draw(st.lists(st.one_of(_BODY_TEXT, _RAW_SPECIAL), max_size=4)):
            ids += _encode(piece) if isinstance(piece, str) else [piece]
        end = draw(st.sampled_from([END, END, RETURN, CALL, None]))
        if end is not None:
            ids.append(end)
    return ids


def _run(cls: type[HarmonyEventParser] | type[ReferenceHarmonyParser], ids: list[int],
         cuts: list[int], finish: str, prefill: tuple[int, ...],
         logprobs: bool) -> tuple[list[ev.Event], bool]:
    out: list[ev.Event] = []
    try:
        parser = cls(prompt_tokens=7, prefill=prefill)
        bounds = sorted({c % (len(ids) + 1) for c in cuts} | {0, len(ids)})
        for a, b in itertools.pairwise(bounds):
            piece = tuple(ids[a:b])
            lps = tuple(TokenLogprob(str(t), -0.5) for t in piece) if logprobs else None
            out += parser.feed(Chunk(token_ids=piece, logprobs=lps))
        out += parser.feed(Chunk(finish=Finish(finish)))  # type: ignore[arg-type]
        out += parser.close()
    except Exception:  # openai-harmony's HarmonyError, or ours
        return _same_ids(out), True
    return _same_ids(out), False


def _same_ids(events: list[ev.Event]) -> list[ev.Event]:
    """Call ids are random: compared as equal."""
    out: list[ev.Event] = []
    for e in events:
        if isinstance(e, ev.ToolCallStarted | ev.ToolCallDone):
            e = dataclasses.replace(e, call_id="call")
        out.append(e)
    return out


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ids=_messages(), cuts=st.lists(st.integers(0, 400), max_size=6),
       finish=st.sampled_from(_FINISHES), logprobs=st.booleans(),
       prefill=st.sampled_from([(), tuple(_encode("<|channel|>commentary to=functions.f"))]))
def test_same_events_as_openai_harmony(ids: list[int], cuts: list[int], finish: str,
                                       logprobs: bool, prefill: tuple[int, ...]) -> None:
    ours = _run(HarmonyEventParser, ids, cuts, finish, prefill, logprobs)
    reference = _run(ReferenceHarmonyParser, ids, cuts, finish, prefill, logprobs)
    assert ours == reference


@settings(max_examples=300, deadline=None)
@given(body=st.lists(st.integers(0, 199_997), max_size=30),
       cuts=st.lists(st.integers(0, 40), max_size=5))
def test_any_body_bytes_decode_without_loss(body: list[int], cuts: list[int]) -> None:
    """Tokens are bytes, not characters: whatever bytes a body holds, the text streamed is
    exactly their UTF-8 decoding with U+FFFD for what is invalid — nothing dropped."""
    ids = _encode("<|channel|>final<|message|>") + body + [RETURN]
    events, failed = _run(HarmonyEventParser, ids, cuts, "eos", (), False)
    assert not failed
    text = "".join(e.text for e in events if isinstance(e, ev.TextDelta))
    raw = b"".join(_ENC.decode([t], errors="surrogateescape").encode("utf-8", "surrogateescape")
                   for t in body)
    assert text == raw.decode("utf-8", errors="replace")
    assert isinstance(events[-1], ev.Finished) and events[-1].reason == "stop"


def test_header_rules_follow_openai_harmony() -> None:
    assert parse_header("<|channel|>commentary to=functions.f <|constrain|>json", "assistant") \
        == ("assistant", "commentary", "functions.f")
    assert parse_header("assistant to=functions.f<|channel|>commentary json", None) \
        == ("assistant", "commentary", "functions.f")
    assert parse_header("functions.lookup to=assistant<|channel|>commentary", None) \
        == ("tool", "commentary", "assistant")
    assert parse_header("user", None) == ("user", None, None)
    for bad in ("<|channel|> final", "", "nobody", "a b c d"):
        try:
            parse_header(bad, None)
        except HarmonyFormatError:
            continue
        raise AssertionError(f"{bad!r} parsed")


def test_token_outside_the_vocabulary_is_an_error_not_silence() -> None:
    ids = [*_encode("<|channel|>final<|message|>Hi"), 300_000, *_encode(" there"), RETURN]
    assert _run(HarmonyEventParser, ids, [], "eos", (), False)[1]


def test_a_header_cut_by_a_stop_token_is_still_checked() -> None:
    """openai-harmony reads a header a stop token ended for its channel: an empty channel fails
    there too (found by the differential test above)."""
    ids = [CHANNEL, RETURN, MESSAGE, END]
    assert _run(HarmonyEventParser, ids, [], "eos", (), False) == \
        _run(ReferenceHarmonyParser, ids, [], "eos", (), False) == ([], True)
