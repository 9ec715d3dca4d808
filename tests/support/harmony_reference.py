"""The Harmony parser's message tracking as it was built on openai-harmony's ``StreamableParser``:
the oracle of the differential tests in ``tests/unit/formats/harmony/test_parse_equivalence.py``.

``app.formats.harmony.parse`` now tracks Harmony's message structure by token id itself
(openai-harmony's parser costs a ``StreamableParser`` per request and more per token). This
subclass keeps the previous implementation's part that changed (commit f2acde9: which token
opens or closes a message, its header, its text deltas, all read from ``StreamableParser``)
and inherits what did not (chunk bookkeeping, the channel → event mapping, finishes), so the
tests pin that both trackings give the same events for every well-formed and malformed token
stream whose message bodies are valid UTF-8.
"""

from __future__ import annotations

from openai_harmony import Role, StreamableParser, StreamState

from app.core.output import TokenLogprob
from app.formats.harmony.parse import HarmonyEventParser
from app.formats.harmony.vocab import CALL, END, RETURN, harmony_encoding

FIRST_SPECIAL = 199998  # o200k: ids from here on are special / control tokens
_TERMINATORS = frozenset({END, RETURN, CALL})


class ReferenceHarmonyParser(HarmonyEventParser):
    def __init__(self, prompt_tokens: int, prefill: tuple[int, ...] = ()) -> None:
        self._parser = StreamableParser(harmony_encoding(), Role.ASSISTANT, strict=False)
        self._in_content = False
        super().__init__(prompt_tokens, prefill)  # steps the prefill through _step below

    def _step(self, tok: int, logprob: TokenLogprob | None) -> None:
        p = self._parser
        # A content token is one read while a message body is open and that does not
        # close it; only those count as reasoning tokens or carry answer logprobs.
        was_content = self._in_content
        is_content = was_content and tok not in _TERMINATORS
        p.process(tok)
        if tok >= FIRST_SPECIAL:
            # Only special tokens move the parser between header and content.  Its
            # ``state`` getter serializes the whole parser state, so it is read here only.
            self._in_content = p.state == StreamState.CONTENT
        if tok in (RETURN, CALL):
            self._stop_token = tok
        if self._in_content and not was_content:
            role = p.current_role
            self._open_message("assistant" if role in (None, Role.ASSISTANT) else str(role),
                               p.current_channel, p.current_recipient)
        if is_content and self._kind == "reasoning":
            self._acct.reasoning_tokens += 1
        if is_content and logprob is not None and self._kind == "text":
            self._pending_logprobs.append(logprob)
        if self._in_content:
            delta = p.last_content_delta
            if delta:
                self._emit_delta(delta)
        elif was_content:
            self._close_message()
