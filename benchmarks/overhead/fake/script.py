"""What the fake model generates: the Harmony token script, and the fake's settings.

The tokens come from the gateway's own Harmony encoding, taken from whichever layout the ``app``
on the import path has (the benchmarks run the fake with the source tree under test).
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass

from openai_harmony import HarmonyEncoding

ANSWER_TEXT = "Hello from a scripted tiny model!"

# where a source tree keeps ``harmony_encoding()``: the current layout first, then older ones
VOCAB_MODULES = ("app.formats.harmony.vocab", "app.vocab")


@functools.cache
def harmony_encoding() -> HarmonyEncoding:
    """The gateway's own Harmony encoding, from whichever layout the ``app`` on the import path
    has (the benchmarks run the fake with the source tree under test)."""
    for name in VOCAB_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is None or not (name == exc.name or name.startswith(exc.name + ".")):
                raise  # the module exists but something it imports does not
            continue
        encoding: HarmonyEncoding = module.harmony_encoding()
        return encoding
    raise ModuleNotFoundError(f"none of {', '.join(VOCAB_MODULES)} is importable")


@dataclass(frozen=True)
class Script:
    """What the fake model generates (token ids and each token's text)."""

    ids: tuple[int, ...]  # <|channel|>final<|message|> + answer + <|return|>
    texts: tuple[str, ...]  # llama.cpp ``content`` per token: markers as text, the eos as ""
    special: tuple[bool, ...]
    answer_ids: tuple[int, ...]
    answer: str
    eos: int

    @classmethod
    def build(cls, n_tokens: int, text: str = ANSWER_TEXT) -> Script:
        enc = harmony_encoding()
        header = enc.encode("<|channel|>final<|message|>", allowed_special="all")
        eos = enc.encode("<|return|>", allowed_special="all")[0]
        source = text
        answer = enc.encode(source, disallowed_special=())
        while len(answer) < n_tokens:
            source += " " + text
            answer = enc.encode(source, disallowed_special=())
        answer = answer[:n_tokens]
        ids = (*header, *answer, eos)
        texts = tuple("" if t == eos else enc.decode([t]) for t in ids)
        return cls(ids, texts, tuple(enc.is_special_token(t) for t in ids), tuple(answer),
                   enc.decode(answer), eos)


@dataclass(frozen=True)
class Settings:
    tokens: int = 7
    ttft: float = 0.0
    gap: float = 0.0
    n_ctx: int = 8192
    chat_model: str = "tiny"
    chat_script: str = "answer"  # or "harmony"
    keepalive_max: int = 100  # llama.cpp: requests per connection (0: unlimited)
    # /props total_slots: the fake answers any number at once (the gateway sends a llama.cpp
    # server at most that many generations at a time; the recording says 1)
    slots: int = 1024
