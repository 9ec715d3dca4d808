"""Client text to o200k token ids in bounded time, and without a crash.

o200k's byte-pair merge is quadratic in the length of one pre-tokenizer *piece* (a word, a
run of punctuation, a run of whitespace): 32,768 letters take 0.8 s, 32,768 spaces 0.8 s,
32,768 no-break spaces 3 s, 32,768 CJK characters 6 s, and near 1 MB the pre-tokenizer's
backtracking overflows its stack and panics (``pyo3_runtime.PanicException``, a
``BaseException``).  Any character class can make a long piece: letters, punctuation (a
piece may end in ``[\\r\\n/]*``, so ``"/\\n" * n`` is one piece), whitespace of any kind.
openai-harmony holds the GIL throughout one call, so a thread keeps the event loop free only
if each call is short.

:func:`encode_text` therefore cuts the text into calls of at most :data:`CHUNK` characters,
at *safe* points only: positions where the pre-tokenizer always ends a piece and whose
right-hand side it reads the same whether or not the text goes on (a letter or digit
followed by whitespace or ASCII punctuation other than ``'``, a digit followed by a letter,
``a`` before ``B``, a letter before a digit).  Cut only there, the ids are exactly those of
one ``enc.encode`` call (``tests/unit/formats/harmony/test_text.py`` checks it on random
text).  Where a run that could hold a long piece (:data:`RUN` characters of non-whitespace or
of whitespace) has no safe point for :data:`RUN` characters, it is also cut every :data:`RUN`
characters: the ids differ from one call only inside such a run, and no call meets a piece
longer than :data:`RUN`.

Text openai-harmony encodes itself (the developer message's tools, and instructions up to
4,096 characters; longer ones are encoded here: ``render._fill_slot``) is checked instead
(:func:`check_runs`, :func:`check_tool_text`): such a run longer than :data:`MAX_RUN` there
is a 400 naming the field.  :func:`min_tokens_of` is a bound no encoding can go below (no o200k token is
longer than :data:`MAX_TOKEN_CHARS` characters), for refusing what cannot fit a window
before encoding it.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Collection, Iterator
from typing import Any, Literal

from openai_harmony import HarmonyEncoding

from app.core.conversation import FunctionTool
from app.core.errors import InvalidRequest

RUN = 256  # the longest stretch without a safe point encoded in one call
CHUNK = 16_384  # characters of text per call (~5 ms); cut at a safe point in its second half
MAX_RUN = 2048  # the longest such stretch openai-harmony is given to encode itself (~30 ms)
MAX_TOKEN_CHARS = 128  # the longest o200k token is 128 bytes, so at most 128 characters
# function tools' text (descriptions, schema keys and strings) openai-harmony encodes in one
# call: ~6x Claude Code's (45 KB) and ~17x Codex's; encoding it holds the GIL ~80 ms (once:
# the rendered prefix is cached)
MAX_TOOL_TEXT = 262_144

Specials = Literal["all"] | Collection[str]

_PUNCT = "\t\n\r !\"#$%&()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~\u3001\u3002\uff01\uff0c\uff1a\uff1b\uff1f"
_PUNCT_SPECIAL = _PUNCT.replace("_", "").replace("|", "")  # never inside "<|reserved_200013|>"


def _safe(punct: str) -> str:
    """A character that always ends its piece, followed (lookahead) by one that starts the
    next: the match's end is a safe cut point."""
    return (rf"(?:[^\W\d_]|[0-9])(?=[{punct}])|[0-9](?=[A-Za-z])|[a-z](?=[A-Z0-9])"
            r"|[A-Z](?=[0-9])")


# The last safe point of a window: greedy ``.*`` backtracks from the window's end.
_LAST = re.compile(r"(?s:.*)(?:" + _safe(_PUNCT) + ")")
_LAST_SPECIAL = re.compile(r"(?s:.*)(?:" + _safe(_PUNCT_SPECIAL) + ")")


def _runs(longer_than: int) -> tuple[re.Pattern[str], ...]:
    """Maximal runs of each class that may hold a piece longer than ``longer_than`` (a piece
    is one class plus at most one character), anchored at their start: linear."""
    return (re.compile(r"(?<![\S\r\n])[\S\r\n]{" + str(longer_than + 1) + ",}"),
            re.compile(r"(?<!\s)\s{" + str(longer_than + 1) + ",}"))


_RUNS = {RUN: _runs(RUN), MAX_RUN: _runs(MAX_RUN)}


def _last_safe(pattern: re.Pattern[str], text: str, lo: int, hi: int) -> int | None:
    """The last safe point ``p`` with ``lo < p <= hi``, or None."""
    found = pattern.match(text, lo, min(hi + 1, len(text)))
    return found.end() if found is not None else None


def _forced(pattern: re.Pattern[str], text: str, start: int, end: int, run: int) -> Iterator[int]:
    """Cuts inside ``text[start:end]`` wherever it has no safe point for ``run`` characters."""
    cur = start
    while end - cur > run:
        safe = _last_safe(pattern, text, cur, cur + run)
        if safe is None:
            cur += run
            yield cur
        else:
            cur = safe


def _cuts(pattern: re.Pattern[str], text: str, run: int, runs: tuple[re.Pattern[str], ...],
          ) -> list[int]:
    """The forced cuts of ``text`` (sorted): inside its long runs only."""
    cuts: set[int] = set()
    for finder in runs:
        for found in finder.finditer(text):
            cuts.update(_forced(pattern, text, found.start(), found.end(), run))
    return sorted(cuts)


def spans(text: str, *, specials: bool = False, chunk: int = CHUNK, run: int = RUN,
          ) -> Iterator[tuple[int, int, bool]]:
    """``text`` as ``(start, end, forced)`` calls: ``forced`` when the call starts at a forced
    cut (the only place the ids may differ from one call's).  Every regular expression runs on
    one call's text at most: a thread doing this gives the GIL back between calls."""
    pattern = _LAST_SPECIAL if specials else _LAST
    pos, n = 0, len(text)
    forced = False
    while pos < n:
        end = n
        cut_forced = False
        if n - pos > chunk:
            safe = _last_safe(pattern, text, pos + chunk // 2, pos + chunk)
            end, cut_forced = (safe, False) if safe is not None else (pos + chunk, True)
        part = text[pos:end]
        last = 0
        for cut in _cuts(pattern, part, run, _RUNS[run]):
            yield pos + last, pos + cut, forced
            last, forced = cut, True
        yield pos + last, end, forced
        pos, forced = end, cut_forced


def encode_text(enc: HarmonyEncoding, text: str, allowed_special: Specials = frozenset()) -> list[int]:
    """``enc.encode(text)`` (special-token text stays characters unless allowed), in calls of
    bounded length cut at safe points, and inside runs without one every :data:`RUN`."""
    if len(text) <= RUN:
        return list(enc.encode(text, allowed_special=allowed_special, disallowed_special=()))
    ids: list[int] = []
    for start, end, _ in spans(text, specials=bool(allowed_special)):
        ids += enc.encode(text[start:end], allowed_special=allowed_special, disallowed_special=())
    return ids


def check_runs(text: str, param: str) -> None:
    """Text openai-harmony will encode itself: refuse a stretch it cannot encode in bounded
    time (a run of :data:`MAX_RUN` characters of one class without a safe point)."""
    if len(text) <= MAX_RUN or not any(forced for *_, forced in spans(text, run=MAX_RUN)):
        return
    raise InvalidRequest(f"The text has a run of more than {MAX_RUN:,} characters that the tokenizer "
                         "cannot split (one repeated word, whitespace or punctuation); at most "
                         f"{MAX_RUN:,} are accepted here.", param=param, code="invalid_value")


def min_tokens_of(chars: int) -> int:
    """At most as many tokens as any encoding of ``chars`` characters of text has."""
    return -(-chars // MAX_TOKEN_CHARS)


def _strings(value: Any) -> Iterator[str]:
    """Every string of a JSON value (keys too)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def check_tool_text(tools: tuple[FunctionTool, ...]) -> None:
    """Tool descriptions and schemas are encoded by openai-harmony itself, in one call holding
    the GIL: refuse a run it cannot encode in bounded time (:func:`check_runs`), and more than
    :data:`MAX_TOOL_TEXT` characters of them in all (a 14 MB parameter description held the
    event loop for up to 15 s)."""
    total = 0
    for tool in tools:  # lazily: the walk stops at the bound (a tuple of them all took 0.7 s)
        for text in itertools.chain((tool.description or "",), _strings(tool.parameters)):
            total += len(text)
            if total > MAX_TOOL_TEXT:
                raise InvalidRequest(
                    f"The function tools' descriptions and schemas hold more than {MAX_TOOL_TEXT:,} "
                    "characters; at most that many are accepted for this model.", param="tools",
                    code="invalid_value")
            check_runs(text, f"tools ({tool.name})")

