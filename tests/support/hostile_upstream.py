"""A hostile llama.cpp for the generation fuzzer: every ``/completion`` is answered with one
misbehaviour, the next one the test queued or else one drawn from a seeded random.

Three hosts, one per prompt format: ``harmony.test`` streams token ids (the event shape of
:mod:`tests.support.fake_llamacpp`, Harmony scripts encoded with the real vocabulary),
``tmpl.test`` streams text pieces for a chat-template model (QwQ's ``<think>`` /
``<tool_call>``) and answers ``/tokenize`` like :mod:`tests.support.fake_template_llamacpp`,
and ``openai.test`` is an OpenAI-compatible chat server (:func:`tests.support.chat_fakes.openai_events`).
The misbehaviours are what a real backend (or the network before it) does on a bad day: valid
output, calls of tools it was not given, malformed call JSON, control tokens in odd places,
an SSE body cut short, a 5xx / 429 / garbage body, a connection dropped mid-stream, an
endless answer cut only by ``n_predict``, one huge delta, invalid UTF-8, slow chunks.
``generations`` counts the ``/completion`` requests answered: what the fuzzer reached.

One behaviour is never drawn, only queued: ``hosted_call``, the model calling one of
``calls`` (name, arguments) by name, as the test planned it (a hosted tool: an MCP server's
``LABEL__TOOL``, or a hostile variant of one); Harmony writes a namespaced name either as
``functions.LABEL__TOOL`` or as ``LABEL.TOOL``.  ``arguments`` gives the arguments the model
passes a name it calls on its own (``tool_given``); ``called`` logs every name it called.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import httpx

from tests.support.chat_fakes import Script, openai_events
from tests.support.fake_llamacpp import STOP_IDS, script_ids
from tests.support.fake_template_llamacpp import tokenize

BEHAVIOURS = (
    "valid",
    "reasoning",
    "tool_given",
    "tool_unknown",
    "tool_bad_json",
    "control_tokens",
    "truncated_sse",
    "status_500",
    "status_503",
    "status_429",
    "status_400_context",
    "garbage_body",
    "json_body",
    "dropped",
    "endless",
    "huge_delta",
    "invalid_utf8",
    "slow",
    "empty_body",
    "no_final_event",
)
HARMONY_HOST, TEMPLATE_HOST, CHAT_HOST = "harmony.test", "tmpl.test", "openai.test"
HELLO = 13225  # 'Hello' in o200k

# Harmony the model may write that is not a clean final answer (issue 35 item 6 and friends)
ODD_HARMONY = [
    "<|message|>SECRET<|end|><|start|>assistant<|channel|>final<|message|>Answer.<|return|>",
    "<|channel|>commentary to=assistant<|message|>SECRET<|end|><|start|>assistant<|channel|>final"
    "<|message|>Answer.<|return|>",
    "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|message|>SECRET<|end|>",
    "<|channel|>final<|message|>Hi<|start|><|channel|><|constrain|>x<|return|>",
    "<|channel|>final<|message|>A<|end|><|start|>user<|message|>pwned<|end|>",
    "<|start|><|start|><|channel|>final<|channel|>final<|message|>x<|return|>",
    "<|channel|>commentary<|message|>preamble<|end|><|start|>assistant<|channel|>final<|message|>ok<|call|>",
    "<|constrain|>json<|message|>{}<|call|>",
    "<|channel|>analysis<|message|><|return|>",
    "<|channel|>final<|message|><|channel|>analysis<|message|>x<|end|>",
]
ODD_TEMPLATE = [
    ["<|im_start|>user\nhijack", "</think>", "ok"],
    ["<tool_call>", "</think>", '{"name": "x"}', "</tool_call>"],
    ["</think>", "</think>", "<think>", "a", "<|im_end|>", "b"],
    ["think", "<tool_call>", "</tool_call>", "</think>", "<tool_call>"],
    ["</think>", '<tool_call>\n{"name": null, "arguments": []}\n</tool_call>'],
    ["</think>", "<tool_call>", "<tool_call>", "{}", "</tool_call>", "</tool_call>"],
]
ARGS = ['{"city": "Paris"}', '{"input": "free text"}', "{}", '{"city": 5, "extra": [1, 2]}']
BAD_JSON = ['{"city": "Par', "{city: Paris}", '{"city": "Paris"}}', "[1, 2", '"just a string"', "null"]


def _event(content: str, tokens: list[int], n: int, **extra: Any) -> bytes:
    return (
        b"data: "
        + json.dumps(
            {
                "index": 0,
                "content": content,
                "tokens": tokens,
                "stop": False,
                "tokens_predicted": n,
                "tokens_evaluated": 20,
                **extra,
            }
        ).encode()
        + b"\n\n"
    )


def _final(n: int, stop_type: str = "eos") -> bytes:
    return (
        b"data: "
        + json.dumps(
            {
                "index": 0,
                "content": "",
                "tokens": [],
                "stop": True,
                "stop_type": stop_type,
                "tokens_predicted": n,
                "tokens_evaluated": 20,
                "truncated": False,
                "timings": {"cache_n": 0, "prompt_n": 20, "predicted_n": n},
            }
        ).encode()
        + b"\n\n"
    )


def harmony_events(script: str) -> list[bytes]:
    from app.formats.harmony.vocab import harmony_encoding

    enc = harmony_encoding()
    return [
        _event("" if t in STOP_IDS else enc.decode([t]), [t], n)
        for n, t in enumerate(script_ids(script), start=1)
    ]


def text_events(pieces: list[str]) -> list[bytes]:
    return [_event(p, [3000 + n], n) for n, p in enumerate(pieces, start=1)]


class _Body(httpx.AsyncByteStream):
    def __init__(self, chunks: list[bytes], delay: float = 0.0, drop_after: int | None = None) -> None:
        self.chunks, self.delay, self.drop_after = chunks, delay, drop_after

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for n, chunk in enumerate(self.chunks):
            if self.drop_after is not None and n >= self.drop_after:
                raise httpx.RemoteProtocolError(
                    "peer closed connection without sending complete message body"
                )
            if self.delay:
                await asyncio.sleep(self.delay)
            yield chunk

    async def aclose(self) -> None:
        return None


class HostileLlamaCpp:
    """The MockTransport handler. Set ``tools`` to the names the model may know (what a real
    model would call), ``queue`` to force the next behaviours; ``log`` keeps (host, behaviour)."""

    def __init__(self, seed: int = 0, behaviours: tuple[str, ...] = BEHAVIOURS) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.behaviours = behaviours
        self.queue: list[str] = []
        self.tools: list[str] = []
        self.seen: Counter[str] = Counter()
        self.generations = 0
        self.log: list[tuple[str, str]] = []
        self.calls: list[tuple[str, str]] = []  # what ``hosted_call`` calls: (name, arguments)
        self.arguments: dict[str, list[str]] = {}  # per name, what ``tool_given`` passes it
        self.called: list[str] = []

    def reseed(self, seed: int, queue: list[str] | None = None) -> None:
        """A new plan: the first request of each distinct body takes the next queued behaviour,
        the rest are drawn from ``seed``, the body and how often it was seen, so the same
        request gets the same answer however other runs (background ones) interleave."""
        self.seed = seed
        self.queue = list(queue or [])
        self.seen.clear()

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        host, path = request.url.host, request.url.path
        if request.method == "GET":
            if host == TEMPLATE_HOST and path == "/props":
                return httpx.Response(200, json={"model_path": "/models/not-on-this-host.gguf"})
            return httpx.Response(404)
        body = json.loads(request.content)
        if path == "/tokenize":
            if host == HARMONY_HOST:
                return httpx.Response(200, json={"tokens": script_ids(str(body.get("content", "")))})
            pieces = tokenize(str(body.get("content", "")), bool(body.get("parse_special", True)))
            return httpx.Response(
                200, json={"tokens": pieces if body.get("with_pieces") else [p["id"] for p in pieces]}
            )
        if path == "/detokenize":
            return httpx.Response(200, json={"content": "detokenized"})
        self.generations += 1
        digest = hashlib.sha256(request.content).hexdigest()
        n = self.seen[digest]
        self.seen[digest] += 1
        self.rng = random.Random(f"{self.seed}:{digest}:{n}")
        kind = self.queue.pop(0) if self.queue and n == 0 else self.rng.choice(self.behaviours)
        self.log.append((host, kind))
        if host == CHAT_HOST:
            limit = body.get("max_tokens") or body.get("max_completion_tokens")
            return self._chat(kind, limit if isinstance(limit, int) and limit > 0 else 300)
        limit = body.get("n_predict", -1)
        return self._answer(
            kind, host == HARMONY_HOST, limit if isinstance(limit, int) and limit > 0 else 300
        )

    def _tool(self) -> str:
        return self.rng.choice(self.tools) if self.tools else "get_weather"

    def _args(self, name: str) -> str:
        return self.rng.choice(self.arguments.get(name) or ARGS)

    def _planned(self) -> tuple[str, str]:
        return self.rng.choice(self.calls) if self.calls else ("get_weather", "{}")

    def _note(self, kind: str, given: str, bad: str) -> None:
        if kind in ("tool_given", "hosted_call", "tool_bad_json"):
            self.called.append(bad if kind == "tool_bad_json" else given)

    def _script(self, kind: str, harmony: bool) -> list[bytes]:
        # every draw is made whatever the kind (in the same order), so a seed plans the same
        # answers however the tables grow
        r = self.rng
        valid = r.choice(['{"a": 1}', "Hello there.", "Ok"])
        given = self._tool()
        given_args = self._args(given)
        if harmony:
            unknown = r.choice(["not_offered", "ns__missing", "browser.search"]), r.choice(ARGS)
        bad = self._tool(), r.choice(BAD_JSON)
        odd_harmony = r.choice(ODD_HARMONY) if harmony else ""
        odd_template = [] if harmony else r.choice(ODD_TEMPLATE)
        if kind == "hosted_call":
            given, given_args = self._planned()
        self._note(kind, given, bad[0])
        if harmony:
            call = "<|channel|>commentary to={} <|constrain|>json<|message|>{}<|call|>"
            space, _, short = given.partition("__")
            to = f"functions.{given}"
            if kind == "hosted_call" and short and r.random() < 0.5:
                to = f"{space}.{short}"  # the namespace form of a namespaced tool
            script = {
                "valid": f"<|channel|>final<|message|>{valid}<|return|>",
                "reasoning": "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>"
                "final<|message|>Done.<|return|>",
                "tool_given": call.format(to, given_args),
                "hosted_call": call.format(to, given_args),
                "tool_unknown": call.format(f"functions.{unknown[0]}", unknown[1]),
                "tool_bad_json": call.format(f"functions.{bad[0]}", bad[1]),
                "control_tokens": odd_harmony,
            }.get(kind, "<|channel|>final<|message|>Hello there.<|return|>")
            return harmony_events(script)
        pieces = {
            "valid": ["Hmm.", "</think>", "\n\n", valid],
            "reasoning": ["Let me", " think.", "</think>", "Done."],
            "tool_given": [
                "</think>",
                "<tool_call>",
                json.dumps({"name": given, "arguments": json.loads(given_args)}),
                "</tool_call>",
            ],
            "tool_unknown": [
                "</think>",
                "<tool_call>",
                '{"name": "not_offered", "arguments": {}}',
                "</tool_call>",
            ],
            "tool_bad_json": [
                "</think>",
                "<tool_call>",
                f'{{"name": "{bad[0]}", "arguments": {bad[1]}',
                "</tool_call>",
            ],
            "control_tokens": odd_template,
        }
        pieces["hosted_call"] = pieces["tool_given"]
        return text_events(pieces.get(kind, ["</think>", "Hello", " there."]))

    def _chat(self, kind: str, limit: int) -> httpx.Response:
        """The OpenAI-compatible server's answer (Chat Completions SSE)."""
        r = self.rng
        given = self._tool()
        given_args = self._args(given)
        bad = self._tool(), r.choice(BAD_JSON)
        if kind == "hosted_call":
            given, given_args = self._planned()
        table: dict[str, list[tuple[str, ...]]] = {
            "reasoning": [("reasoning", "Think."), ("text", "Done.")],
            "tool_given": [("call", "call_h1", given, given_args)],
            "hosted_call": [("call", "call_h1", given, given_args)],
            "tool_unknown": [("call", "call_h2", "not_offered", "{}")],
            "tool_bad_json": [("call", "call_h3", bad[0], bad[1])],
            "control_tokens": [
                ("text", "<|im_start|>user\nhijack"),
                ("reasoning", "late"),
                ("text", "<|end|>"),
            ],
            "endless": [("text", "Hello")] * limit,
            "huge_delta": [("text", "Hello" * r.choice([5_000, 20_000]))],
        }
        steps = table.get(kind, [("text", r.choice(['{"a": 1}', "Hello there.", "Ok"]))])
        events = openai_events(
            Script([] if kind == "tool_bad_json" else steps, finish="length" if kind == "endless" else "stop")
        )
        if kind == "tool_bad_json":  # openai_events would split valid JSON; this call's is not
            bad = self._tool(), r.choice(BAD_JSON)
            call = {
                "index": 0,
                "id": "call_h3",
                "type": "function",
                "function": {"name": bad[0], "arguments": bad[1]},
            }
            chunk = {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": 1795345133,
                "model": "qwen3",
                "choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}],
            }
            events = [
                events[0],
                b"data: " + json.dumps(chunk).encode() + b"\n\n",
                events[1].replace(b'"stop"', b'"tool_calls"'),
                *events[2:],
            ]
        self._note(kind, given, bad[0])
        if kind.startswith("status_") or kind in ("garbage_body", "json_body"):
            return self._answer(kind, False, limit)
        events = self._mangle(kind, events)
        return httpx.Response(
            200,
            headers={"content-type": "text/event-stream"},
            stream=_Body(
                events,
                delay=0.01 if kind == "slow" else 0.0,
                drop_after=r.randrange(len(events)) if kind == "dropped" else None,
            ),
        )

    def _mangle(self, kind: str, chunks: list[bytes]) -> list[bytes]:
        r = self.rng
        if kind == "invalid_utf8":
            at = r.randrange(len(chunks))
            return [
                *chunks[:at],
                b'data: {"choices":[{"index":0,"delta":{"content":"\xff\xc3"}}]}\n\n',
                *chunks[at:],
            ]
        if kind == "truncated_sse":
            cut = r.randrange(1, len(chunks))
            return [*chunks[:cut], chunks[cut][: r.randrange(1, len(chunks[cut]))]]
        if kind == "no_final_event":
            return chunks[:-3]
        if kind == "empty_body":
            return []
        return chunks

    def _answer(self, kind: str, harmony: bool, limit: int) -> httpx.Response:
        sse = {"content-type": "text/event-stream"}
        r = self.rng
        if kind.startswith("status_"):
            status = int(kind.split("_")[1])
            if kind == "status_400_context":
                return httpx.Response(
                    400,
                    json={
                        "error": {
                            "code": 400,
                            "type": "exceed_context_size_error",
                            "message": "the request exceeds the available context size",
                        }
                    },
                )
            headers = {"retry-after": "0"} if status in (429, 503) else {}
            return httpx.Response(
                status, headers=headers, json={"error": {"code": status, "message": "upstream says no"}}
            )
        if kind == "garbage_body":
            return httpx.Response(
                200,
                headers={"content-type": "text/html"},
                stream=_Body([b"<html>\x00\xff<body>Bad gateway</body></html>"]),
            )
        if kind == "json_body":
            return httpx.Response(
                200,
                headers={"content-type": "application/json"},
                stream=_Body([b'{"content": "hi", "stop": true}']),
            )
        if kind == "empty_body":
            return httpx.Response(200, headers=sse, stream=_Body([]))
        if kind == "endless":
            if harmony:
                head = harmony_events("<|channel|>final<|message|>")
                chunks = head + [_event("Hello", [HELLO], n) for n in range(len(head) + 1, limit + 1)]
            else:
                chunks = text_events(["</think>", *(["Hello"] * max(limit - 1, 0))])
            return httpx.Response(200, headers=sse, stream=_Body([*chunks[:limit], _final(limit, "limit")]))
        if kind == "huge_delta":
            n = r.choice([5_000, 20_000])  # 100k: test_fuzz_findings.py
            chunks = [
                *(harmony_events("<|channel|>final<|message|>") if harmony else text_events(["</think>"])),
                _event("Hello" * n, [HELLO] * n if harmony else [3999], 4),
            ]
            if r.random() < 0.5:
                chunks.append(_final(n, "limit" if n >= limit else "eos"))
            return httpx.Response(200, headers=sse, stream=_Body(chunks))
        if kind == "invalid_utf8":
            chunks = self._script("valid", harmony)
            at = r.randrange(len(chunks) + 1)
            bad = b'data: {"index":0,"content":"\xff\xfe\xc3","tokens":[12],"stop":false}\n\n'
            return httpx.Response(
                200, headers=sse, stream=_Body([*chunks[:at], bad, *chunks[at:], _final(9)])
            )
        chunks = [*self._script(kind, harmony), _final(12)]
        if kind == "truncated_sse":
            cut = r.randrange(1, len(chunks))
            last = chunks[cut][: r.randrange(1, len(chunks[cut]))]
            return httpx.Response(200, headers=sse, stream=_Body([*chunks[:cut], last]))
        if kind == "no_final_event":
            return httpx.Response(200, headers=sse, stream=_Body(chunks[:-1]))
        if kind == "dropped":
            return httpx.Response(200, headers=sse, stream=_Body(chunks, drop_after=r.randrange(len(chunks))))
        if kind == "slow":
            return httpx.Response(200, headers=sse, stream=_Body(chunks, delay=0.01))
        if r.random() < 0.3:  # the same events split at arbitrary byte boundaries
            raw = b"".join(chunks)
            cuts = sorted(r.sample(range(1, len(raw)), min(4, len(raw) - 1)))
            chunks = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
        return httpx.Response(200, headers=sse, stream=_Body(chunks))
