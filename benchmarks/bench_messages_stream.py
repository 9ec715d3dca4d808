"""Per-event cost of a stream's encoder and SSE framing: Chat Completions against Anthropic's
Messages (its dicts framed by ``typed_event``, and, where the tree has it, the pre-encoded
``wire=True`` frames of :mod:`app.api.messages.wire`) and Responses (named events; where the
tree has them, the pre-encoded frames of :mod:`app.api.chat.wire` and
:mod:`app.api.responses.wire` as ``chat_wire`` / ``responses_wire``, each checked byte for byte
against its generic stream).  No network: a Harmony answer (analysis
and final) through the Harmony parser, then each encoder; the minimum over many repetitions,
interleaved.  Run with a tree as the working directory (its ``app``):
``cd TREE && python -m benchmarks.bench_messages_stream [repetitions]`` (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from adapters.llamacpp import event_to_chunk
from app.api.chat.encode import ChatEncoder
from app.api.messages.encode import MessagesEncoder
from app.api.responses.encode import ResponsesEncoder
from app.core import events as ev
from app.formats.harmony.parse import HarmonyEventParser
from app.formats.harmony.vocab import harmony_encoding
from app.http.sse import data_event, named_event, typed_event

RESOURCE = {"id": "resp_x", "object": "response", "status": "in_progress", "output": []}


def _events() -> list[ev.Event]:
    enc = harmony_encoding()
    words = " ".join(f"word{i % 50}" for i in range(40))
    script = (f"<|channel|>analysis<|message|>{words}<|end|><|start|>assistant<|channel|>final"
              f"<|message|>{words}<|return|>")
    parser = HarmonyEventParser(100)
    out: list[ev.Event] = []
    for t in enc.encode(script, allowed_special="all"):
        out += parser.feed(event_to_chunk({"index": 0, "content": enc.decode([t]), "tokens": [t],
                                           "stop": False}))
    return out + parser.feed(event_to_chunk({"content": "", "tokens": [], "stop": True, "stop_type": "eos",
                                              "tokens_predicted": 80, "tokens_evaluated": 100}))


def main(argv: list[str]) -> int:
    events = _events()

    def chat() -> list[bytes]:
        e = ChatEncoder("chatcmpl-x", "gpt-oss-20b", 0, include_usage=False, logprobs=False)
        return [data_event(p) for p in e.start()] + [data_event(p) for x in events for p in e.encode(x)]

    def messages() -> list[bytes]:
        e = MessagesEncoder("msg_x", "gpt-oss-20b", lambda s: "sig")
        return [typed_event(p) for p in e.start()] + [typed_event(p) for x in events for p in e.encode(x)]

    def responses() -> list[bytes]:
        e = ResponsesEncoder(dict(RESOURCE, output=[]))
        return [named_event(p["type"], p) for p in e.start()] + [named_event(p["type"], p) for x in events
                                                                  for p in e.encode(x)]

    fns: dict[str, Callable[[], list[bytes]]] = {"chat": chat, "messages": messages, "responses": responses}
    try:
        from app.api.chat import wire as chat_wire
    except ImportError:  # a tree without the pre-encoded chat stream
        pass
    else:
        def chat_pre() -> list[bytes]:
            e = ChatEncoder("chatcmpl-x", "gpt-oss-20b", 0, include_usage=False, logprobs=False, wire=True)
            return [chat_wire.frame(p) for p in e.start()] + [chat_wire.frame(p) for x in events
                                                               for p in e.encode(x)]

        assert b"".join(chat_pre()) == b"".join(chat())
        fns["chat_wire"] = chat_pre
    try:
        from app.api.messages import wire
    except ImportError:  # a tree without the pre-encoded stream
        pass
    else:
        def messages_wire() -> list[bytes]:
            e = MessagesEncoder("msg_x", "gpt-oss-20b", lambda s: "sig", wire=True)
            return [wire.frame(p) for p in e.start()] + [wire.frame(p) for x in events for p in e.encode(x)]

        assert b"".join(messages_wire()) == b"".join(messages())
        fns["messages_wire"] = messages_wire
    try:
        from app.api.responses import wire as responses_wire
    except ImportError:  # a tree without the pre-encoded Responses stream
        pass
    else:
        def responses_pre() -> list[bytes]:
            e = ResponsesEncoder(dict(RESOURCE, output=[]), wire=True)
            return [responses_wire.frame(p) for p in e.start()] + [responses_wire.frame(p) for x in events
                                                                    for p in e.encode(x)]

        generic, pre = b"".join(responses()), b"".join(responses_pre())
        assert len(generic) == len(pre)  # item ids are random: same bytes but for them
        fns["responses_wire"] = responses_pre
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(int(argv[0]) if argv else 400):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    print(f"events={len(events)} " + " ".join(
        f"{k}={v * 1e6:.1f}us ({v * 1e6 / len(events):.2f}us/event, {len(b''.join(fns[k]()))} bytes)"
        for k, v in best.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
