"""Client text → token ids that are never one of the model's marker tokens.

llama.cpp tokenizes client text with ``parse_special: false``, but it still matches the
vocabulary's USER_DEFINED added tokens in plain text (tests/fixtures/wire/README.md, 06f):
on Gemma, a user typing ``[multimodal]`` or ``<b>`` gets that single added token.  Which
ids are markers comes from the vocabulary itself (:mod:`adapters.gguf`) when the gateway
can read the model file; otherwise from the token's shape (a bracketed tag), which is
what a remote llama-server lets one see.

When a marker id shows up, the text is tokenized again in pieces cut right after the first
character of each occurrence of that marker's text, so no token can span it; a marker that
still forms (a one-character added token) refuses the request.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any

from app.core.errors import InvalidRequest

Token = dict[str, Any]  # llama.cpp /tokenize with_pieces: {"id": int, "piece": str | list[int]}
Tokenize = Callable[[str], Awaitable[list[Token]]]
IsMarker = Callable[[Token], bool]

# A piece that is one bracketed tag: ``<start_of_turn>``, ``<|im_end|>``, ``[INST]``, ``<b>``.
_MARKER_PIECE = re.compile(r"^\s*(<[^<>\s]+>|\[[^\[\]\s]+\])\s*$")
_BRACKETS = re.compile(r"[<\[]")
_IN_FLIGHT = 8  # tokenize requests at once for one text cut into pieces


def by_shape(token: Token) -> bool:
    """Without the vocabulary: every token shaped like a tag may be a marker (an ordinary
    token of that shape only costs a different split of the same text)."""
    piece = token.get("piece")
    return isinstance(piece, str) and _MARKER_PIECE.match(piece) is not None


def by_ids(ids: Collection[int]) -> IsMarker:
    """From the vocabulary: the ids of its control, added, unknown and unused tokens."""
    return lambda token: token.get("id") in ids


def _cuts(text: str, markers: Sequence[Token]) -> list[int]:
    """Where to cut ``text`` so that none of ``markers`` can be one token again."""
    cuts: set[int] = set()
    for token in markers:
        piece = token.get("piece")
        needle = piece.strip() if isinstance(piece, str) else ""
        start = text.find(needle) if needle else -1
        if start < 0:  # the piece is not verbatim in the text: cut at every bracket
            cuts.update(m.start() + 1 for m in _BRACKETS.finditer(text))
            continue
        while start >= 0:
            cuts.add(start + 1)
            start = text.find(needle, start + 1)
    return sorted(c for c in cuts if 0 < c < len(text))


async def safe_ids(text: str, tokenize: Tokenize, is_marker: IsMarker) -> list[int]:
    """``text`` as token ids none of which is a marker (or :class:`InvalidRequest`)."""
    tokens = await tokenize(text)
    found = [t for t in tokens if is_marker(t)]
    if not found:
        return [int(t["id"]) for t in tokens]
    bounds = [0, *_cuts(text, found), len(text)]
    pieces = [text[a:b] for a, b in itertools.pairwise(bounds) if a < b]
    gate = asyncio.Semaphore(_IN_FLIGHT)

    async def one(piece: str) -> list[Token]:
        async with gate:
            return await tokenize(piece)

    parts = await asyncio.gather(*(one(p) for p in pieces))
    ids: list[int] = []
    for part in parts:
        if any(is_marker(t) for t in part):
            raise InvalidRequest("The message text contains a sequence this model's tokenizer "
                                 "treats as a control token.", param="messages",
                                 code="control_token_in_text")
        ids += [int(t["id"]) for t in part]
    return ids
