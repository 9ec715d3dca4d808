"""Where a generation's answer starts: the contract between prompt formats and the engine.

A response format's schema constrains only the answer (:mod:`app.engine.constrained`); a
format that can find it in its output gives an :class:`AnswerWatch` for a prompt.
"""

from __future__ import annotations

from typing import Literal, Protocol, runtime_checkable

from app.core.output import Chunk
from app.core.prompt import Prompt

HOLD: Literal["hold"] = "hold"  # not yet known whether this chunk belongs to the answer
RESTART: Literal["restart"] = "restart"  # the answer began where the held chunks begin
Cut = int | Literal["hold", "restart"] | None


class AnswerWatch(Protocol):
    """Reads a generation's chunks in order and says where its answer starts."""

    def at_start(self) -> bool:
        """The prompt itself opens the answer (a prefill, a reasoning the prompt closed)."""
        ...

    def feed(self, chunk: Chunk) -> Cut:
        """``None``: pass the chunk on; an int: the answer starts that many tokens into it
        (once); :data:`HOLD`: keep it back; :data:`RESTART`: the answer starts where the
        chunks held back begin (they are dropped, this one too)."""
        ...


@runtime_checkable
class WatchesAnswer(Protocol):
    """A prompt format that can tell where the answer starts in its output."""

    def answer_watch(self, prompt: Prompt) -> AnswerWatch | None:
        """None: this prompt's whole output is the answer (``prompt.json_schema`` covers it)."""
        ...
