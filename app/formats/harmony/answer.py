"""Where a Harmony answer's final message starts, found in the output's token ids.

The gateway constrains only the final message to a response format's JSON schema (the
reasoning before it stays free): :class:`FinalHeaderWatch` reads the token ids as they come
and reports the position right after the ``<|message|>`` that opens a ``final`` message
(no recipient), which is where the constrained part begins.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.core.output import Chunk
from app.formats.harmony.header import CONSTRAIN_MARKER, HarmonyFormatError, decode_header
from app.formats.harmony.vocab import CALL, END, MESSAGE, RETURN, START

_MAX_HEADER = 64  # tokens; a longer "header" is not one the watch needs to read


class FinalHeaderWatch:
    """Feed token ids in order; :meth:`feed` returns the index (within that batch) just
    after the final message's ``<|message|>``, once."""

    def __init__(self) -> None:
        self._header: list[int] | None = []  # the answer opens in a header (role known)
        self._role: str | None = "assistant"
        self._done = False

    def feed(self, ids: Sequence[int]) -> int | None:
        if self._done:
            return None
        for i, token in enumerate(ids):
            if token == START:
                self._header, self._role = [], None
            elif token == MESSAGE:
                if self._header is not None and self._is_final(self._header):
                    self._done = True
                    return i + 1
                self._header = None
            elif token in (END, RETURN, CALL):
                self._header = None
            elif self._header is not None:
                self._header.append(token)
                if len(self._header) > _MAX_HEADER:
                    self._header = None
        return None

    def _is_final(self, header: list[int]) -> bool:
        try:
            got = decode_header(header, self._role)
        except HarmonyFormatError:
            return False
        # "final <|constrain|>json": the content type reads as a recipient (openai-harmony)
        content_type_only = got.recipient is None or got.recipient.startswith(CONSTRAIN_MARKER)
        return got.role == "assistant" and got.channel == "final" and content_type_only


class HarmonyAnswerWatch:
    """:class:`FinalHeaderWatch` as the engine's ``AnswerWatch`` (see
    :mod:`app.engine.constrained`): token ids only, never held back."""

    def __init__(self, prefill_ids: Sequence[int]) -> None:
        self._watch = FinalHeaderWatch()
        self._at_start = self._watch.feed(prefill_ids) is not None

    def at_start(self) -> bool:
        return self._at_start

    def feed(self, chunk: Chunk) -> int | None:
        return self._watch.feed(chunk.token_ids)
