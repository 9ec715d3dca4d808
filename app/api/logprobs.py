"""Token logprobs in OpenAI's JSON shape (``token``, ``logprob``, ``bytes``, ``top_logprobs``),
the same in Chat Completions and in Open Responses ``output_text`` parts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.core.output import TokenLogprob


def logprobs_content(items: Sequence[TokenLogprob], top: int) -> list[dict[str, Any]]:
    """``top``: how many alternatives the client asked for (a backend may send more, e.g. vLLM
    sends one for ``logprobs`` without ``top_logprobs``; OpenAI then lists none)."""
    return [
        {
            "token": lp.token,
            "logprob": lp.logprob,
            "bytes": list(lp.bytes) if lp.bytes is not None else list(lp.token.encode()),
            "top_logprobs": [
                {"token": t.token, "logprob": t.logprob,
                 "bytes": list(t.bytes) if t.bytes is not None else list(t.token.encode())}
                for t in lp.top[:top]
            ],
        }
        for lp in items
    ]
