"""What adapters make of a backend's answer: chunks of text / token ids, logprobs, usage,
how generation ended.  Parsers turn chunks into :mod:`app.core.events`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class TopLogprob:
    token: str
    logprob: float
    bytes: tuple[int, ...] | None = None
    token_id: int | None = None


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    token: str
    logprob: float
    bytes: tuple[int, ...] | None = None
    token_id: int | None = None
    top: tuple[TopLogprob, ...] = ()


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    cached_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


StopKind = Literal["eos", "length", "stop_string", "tool_calls"]


@dataclass(frozen=True, slots=True)
class Finish:
    """How the backend ended generation (before any format-level interpretation).
    ``refused``: the backend declined the answer — its content filter ended it (OpenAI's
    ``finish_reason: "content_filter"``) or the model answered with a refusal (the ``refusal``
    field of OpenAI-compatible servers); parsers of chat-mode backends finish with
    ``content_filter``."""

    kind: StopKind
    stop_string: str | None = None
    refused: bool = False


@dataclass(frozen=True, slots=True)
class ToolCallChunk:
    """A structured tool-call delta from a chat-mode backend (OpenAI / Ollama shape).

    The first delta of a call carries ``name`` (and ``id`` when the backend gives one);
    later deltas with the same ``index`` carry argument fragments.
    """

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True, slots=True, init=False)
class Chunk:
    """One piece of backend output: text, the token ids behind it, and metadata.

    Prompt-mode backends fill ``text`` / ``token_ids`` with raw model output (control
    tokens included where the backend returns them).  Chat-mode backends have already
    separated the output: ``text`` is answer content, ``reasoning`` is chain of thought
    and ``tool_calls`` are structured calls.
    """

    text: str = ""
    token_ids: tuple[int, ...] = ()
    logprobs: tuple[TokenLogprob, ...] | None = None
    finish: Finish | None = None
    usage: Usage | None = None
    reasoning: str = ""
    tool_calls: tuple[ToolCallChunk, ...] = ()

    def __init__(self, text: str = "", token_ids: tuple[int, ...] = (),
                 logprobs: tuple[TokenLogprob, ...] | None = None, finish: Finish | None = None,
                 usage: Usage | None = None, reasoning: str = "",
                 tool_calls: tuple[ToolCallChunk, ...] = ()) -> None:
        # The dataclass's own __init__ of a frozen class calls object.__setattr__ by name for
        # each field; the slots' setters are a third cheaper (a chunk per upstream token).
        # Same parameters, order and defaults as the fields (tests/unit/core/test_output_chunk.py).
        _SET_TEXT(self, text)
        _SET_TOKEN_IDS(self, token_ids)
        _SET_LOGPROBS(self, logprobs)
        _SET_FINISH(self, finish)
        _SET_USAGE(self, usage)
        _SET_REASONING(self, reasoning)
        _SET_TOOL_CALLS(self, tool_calls)


(_SET_TEXT, _SET_TOKEN_IDS, _SET_LOGPROBS, _SET_FINISH, _SET_USAGE, _SET_REASONING,
 _SET_TOOL_CALLS) = (Chunk.__dict__[name].__set__ for name in (
    "text", "token_ids", "logprobs", "finish", "usage", "reasoning", "tool_calls"))
