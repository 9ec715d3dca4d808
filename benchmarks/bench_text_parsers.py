"""Per-token cost of the text-level parsers on the streaming hot path (no network).

The same long answer (2000-word reasoning + 2000-word answer) streamed one token's text
at a time through: the OpenChatML decoder (Harmony markers as text), and the chat-template
decoder for Qwen3-Coder-style ``<think>`` output (DeepSeek-V3.1's template), each wrapped
in :class:`app.formats.parsing.text.TextEventParser`, then encoded as Chat Completions SSE bytes.
Run: ``python -m benchmarks.bench_text_parsers`` (results: benchmarks/RESULTS.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from app.api.chat.encode import ChatEncoder
from app.core.conversation import FunctionTool
from app.core.output import Chunk, Finish
from app.formats.harmony.vocab import harmony_encoding
from app.formats.openchatml.parse import OpenChatMLDecoder
from app.formats.parsing.base import TextDecoder
from app.formats.parsing.text import TextEventParser
from app.formats.template.parse import template_decoder
from app.http.sse import data_event

TEMPLATES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "templates"


def pieces(text: str) -> list[str]:
    enc = harmony_encoding()
    return [enc.decode([t]) for t in enc.encode(text, allowed_special="all")]


def run(name: str, make: Callable[[], TextDecoder], text: str) -> None:
    chunks = [Chunk(p, (1,)) for p in pieces(text)]
    best = float("inf")
    for _ in range(5):
        parser = TextEventParser(make(), 100)
        encoder = ChatEncoder("chatcmpl-x", "m", 0, include_usage=True, logprobs=False)
        out = 0
        t0 = time.perf_counter()
        for chunk in [*chunks, Chunk(finish=Finish("eos"))]:
            for event in parser.feed(chunk):
                for payload in encoder.encode(event):
                    out += len(data_event(payload))
        for event in parser.close():
            for payload in encoder.encode(event):
                out += len(data_event(payload))
        best = min(best, time.perf_counter() - t0)
    print(f"{name}: tokens={len(chunks)} best_total_ms={best * 1e3:.1f} "
          f"us_per_token={best / len(chunks) * 1e6:.2f} sse_bytes={out}")


def main() -> None:
    words = " ".join(f"word{i % 50}" for i in range(2000))
    harmony = (f"<|channel|>analysis<|message|>{words}<|end|><|start|>assistant<|channel|>final"
               f"<|message|>{words}<|return|>")
    run("openchatml", OpenChatMLDecoder, harmony)
    source = (TEMPLATES / "deepseek-ai-DeepSeek-V3.1.jinja").read_text()
    think = f"<think>{words}</think>{words}"
    run("template(deepseek-v3.1)", lambda: template_decoder(source, (("<｜Assistant｜><think>", True),)),
        think)
    # one long tagged argument (a file written by a coding agent): linear, not O(L) per chunk
    tools = (FunctionTool("write", None, {"type": "object",
                                          "properties": {"text": {"type": "string"}}}),)
    coder = (TEMPLATES / "Qwen3-Coder.jinja").read_text()
    for words_n in (150, 1500, 6000, 23500):  # ~1k to ~160k characters
        body = " ".join(f"word{i % 50}" for i in range(words_n))
        call = (f"<tool_call>\n<function=write>\n<parameter=text>\n{body}\n</parameter>\n"
                "</function>\n</tool_call>")
        run(f"template(qwen3-coder), one {len(body)}-char tagged argument",
            lambda: template_decoder(coder, (("", False),), tools=tools), call)


if __name__ == "__main__":
    main()
