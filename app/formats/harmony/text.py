"""Client text to o200k token ids in bounded time.

o200k's pre-tokenizer (a backtracking regex in openai-harmony and tiktoken) is superlinear on
a long run of characters without whitespace: 64,000 ``a`` take 1.7 s, 256,000 take 33 s, and
at ~1 MB it overflows its stack and panics (``pyo3_runtime.PanicException``, a
``BaseException``); it holds the GIL throughout, so a thread does not keep the event loop
free.  Random text is fast (64,000 random letters: 10 ms); repetitive runs are not.

:func:`encode_text` encodes a run longer than :data:`RUN` characters in pieces of
:data:`RUN`: linear time, and the same ids as one call for every text without such a run (no
natural word is that long).  Text openai-harmony encodes itself (the developer message's
instructions and tools) is checked instead (:func:`check_runs`): a run longer than
:data:`MAX_RUN` there is a 400 naming the field.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Literal

from openai_harmony import HarmonyEncoding

from app.core.errors import InvalidRequest

RUN = 256  # characters of a run encoded in one call
MAX_RUN = 8192  # the longest run openai-harmony is given to encode itself (~50 ms worst case)
_LONG = re.compile(r"\S{" + str(RUN + 1) + ",}")
_TOO_LONG = re.compile(r"\S{" + str(MAX_RUN + 1) + ",}")

Specials = Literal["all"] | Collection[str]


def has_long_run(text: str) -> bool:
    return _LONG.search(text) is not None


def encode_text(enc: HarmonyEncoding, text: str, allowed_special: Specials = frozenset()) -> list[int]:
    """``enc.encode(text)`` (special-token text stays characters unless allowed), in pieces
    where a run of non-whitespace is longer than :data:`RUN`."""
    if not has_long_run(text):
        return list(enc.encode(text, allowed_special=allowed_special, disallowed_special=()))
    ids: list[int] = []
    pos = 0
    for match in _LONG.finditer(text):
        if match.start() > pos:
            ids += enc.encode(text[pos:match.start()], allowed_special=allowed_special,
                              disallowed_special=())
        run = match.group(0)
        for i in range(0, len(run), RUN):
            ids += enc.encode(run[i:i + RUN], allowed_special=allowed_special, disallowed_special=())
        pos = match.end()
    if pos < len(text):
        ids += enc.encode(text[pos:], allowed_special=allowed_special, disallowed_special=())
    return ids


def check_runs(text: str, param: str) -> None:
    """Text openai-harmony will encode itself: refuse a run it cannot encode in bounded time."""
    found = _TOO_LONG.search(text)
    if found is not None:
        raise InvalidRequest(f"The text has a run of {len(found.group(0)):,} characters without "
                             f"whitespace; at most {MAX_RUN:,} are accepted here.", param=param,
                             code="invalid_value")
