"""The Chat Completions section: ``POST /chat/completions``, streamed and not.

Every body and every chunk is parsed with the OpenAI SDK's typed models
(``ChatCompletion``, ``ChatCompletionChunk``): the *schema* verdict.  Without the SDK
installed that verdict is skipped and only the raw JSON rules below run.  The *wire* verdict
is :func:`check_chunks`:

* ``done``: the stream ends with ``data: [DONE]`` and nothing follows it;
* ``chunk``: every chunk is a ``chat.completion.chunk`` with the id of the first;
* ``role``: each choice's first delta carries ``role: "assistant"``, later ones no other role;
* ``finish``: each choice has exactly one non-null ``finish_reason``, and no content after it;
* ``usage``: with ``stream_options.include_usage``, exactly one usage chunk, the last, with
  ``choices: []`` and consistent totals (every other chunk's ``usage`` null); without it, none;
* ``tool``: a tool call's first fragment has its ``id``, ``type: "function"`` and name, and
  when the choice finishes with ``tool_calls`` its arguments add up to JSON.
"""

from __future__ import annotations

import json
from typing import Any

from app.cli.conformance.responses import WEATHER_TOOL, Context
from app.cli.conformance.runner import Check, TestCase

Json = dict[str, Any]
FINISH = {"stop", "length", "tool_calls", "content_filter", "function_call"}
SDK_MISSING = "the openai package is not installed: Chat Completions are checked as raw JSON only"


def sdk_available() -> bool:
    try:
        import openai.types.chat  # noqa: F401
    except ImportError:
        return False
    return True


def typed(check: Check, model_name: str, payloads: list[Json]) -> None:
    if not sdk_available():
        check.schema_skipped = True
        return
    import pydantic
    from openai.types import chat

    model: Any = getattr(chat, model_name)
    problems = []
    for n, payload in enumerate(payloads):
        try:
            model.model_validate(payload)
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            problems.append(f"{model_name} #{n} at /{'/'.join(map(str, first['loc']))}: {first['msg']}")
    check.typed(problems[:5])


def check_chunks(chunks: list[Json], done: bool, include_usage: bool) -> list[str]:
    """Every chunk rule ``chunks`` breaks (see the module docstring)."""
    problems: list[str] = []
    if not done:
        problems.append("done: the stream did not end with data: [DONE]")
    if not chunks:
        return [*problems, "chunk: no chunks"]
    first_id = chunks[0].get("id")
    seen_role: set[int] = set()
    finished: dict[int, str] = {}
    calls: dict[tuple[int, int], list[str]] = {}
    usage_at = [n for n, c in enumerate(chunks) if c.get("usage") is not None]
    for n, c in enumerate(chunks):
        if c.get("object") != "chat.completion.chunk" or c.get("id") != first_id:
            problems.append(f"chunk: #{n} object {c.get('object')!r} id {c.get('id')!r}")
        for choice in c.get("choices") or []:
            i, delta = choice.get("index", 0), choice.get("delta") or {}
            role = delta.get("role")
            if i not in seen_role:
                seen_role.add(i)
                if role != "assistant":
                    problems.append(f"role: choice {i}'s first delta has role {role!r}")
            elif role not in (None, "assistant"):
                problems.append(f"role: choice {i} changes role to {role!r} (#{n})")
            has_content = bool(delta.get("content") or delta.get("tool_calls") or delta.get("refusal"))
            if i in finished and (has_content or choice.get("finish_reason") is not None):
                problems.append(f"finish: choice {i} continues after its finish_reason (#{n})")
            for tc in delta.get("tool_calls") or []:
                key = (i, tc.get("index", 0))
                fn = tc.get("function") or {}
                starts = tc.get("id") and tc.get("type") == "function" and fn.get("name")
                if key not in calls and not starts:
                    problems.append(f"tool: call {key} starts without id / type / name (#{n})")
                calls.setdefault(key, []).append(fn.get("arguments") or "")
            reason = choice.get("finish_reason")
            if reason is not None and i not in finished:
                finished[i] = reason
                if reason not in FINISH:
                    problems.append(f"finish: unknown finish_reason {reason!r}")
    for i in sorted(seen_role - set(finished)):
        problems.append(f"finish: choice {i} has no finish_reason")
    for (i, k), parts in calls.items():
        if finished.get(i) == "tool_calls":
            try:
                json.loads("".join(parts))
            except ValueError:
                problems.append(f"tool: call {k} of choice {i}: arguments are not JSON")
    if include_usage:
        if usage_at != [len(chunks) - 1]:
            problems.append(f"usage: usage chunks at {usage_at}, expected one, the last ({len(chunks) - 1})")
        else:
            last = chunks[-1]
            if last.get("choices"):
                problems.append("usage: the usage chunk has choices")
            u = last["usage"]
            if u.get("total_tokens") != (u.get("prompt_tokens") or 0) + (u.get("completion_tokens") or 0):
                problems.append(f"usage: total_tokens {u.get('total_tokens')} is not prompt + completion")
    elif usage_at:
        problems.append(f"usage: usage without stream_options.include_usage (chunks {usage_at})")
    return problems


def _basic(ctx: Context, check: Check) -> None:
    ex = ctx.client.post("/chat/completions", {"model": ctx.model, "max_tokens": 64, "messages": [
        {"role": "user", "content": "Say hello in exactly 3 words."}]})
    if not check.expect(ex.status == 200 and isinstance(ex.body, dict), f"HTTP {ex.status}: {ex.text[:200]}"):
        return
    body: Json = ex.body
    typed(check, "ChatCompletion", [body])
    check.expect(body.get("object") == "chat.completion", f"object {body.get('object')!r}")
    choices = body.get("choices") or []
    if not check.expect(bool(choices), "no choices"):
        return
    message = choices[0].get("message") or {}
    check.expect(message.get("role") == "assistant", f"message role {message.get('role')!r}")
    check.expect(bool(message.get("content") or message.get("tool_calls")), "message has no content")
    reason = choices[0].get("finish_reason")
    check.expect(reason in FINISH, f"finish_reason {reason!r}")
    u = body.get("usage") or {}
    check.expect(u.get("total_tokens") == (u.get("prompt_tokens") or 0) + (u.get("completion_tokens") or 0)
                 and bool(u), f"usage {u}")


def _streamed(body: Json, *, include_usage: bool, tool: bool) -> Any:
    def run(ctx: Context, check: Check) -> None:
        request = {"model": ctx.model, **body, "stream": True}
        if include_usage:
            request["stream_options"] = {"include_usage": True}
        st = ctx.client.stream("/chat/completions", request)
        if not check.expect(st.status == 200 and not st.text, f"HTTP {st.status}: {st.text[:200]}"):
            return
        check.suite += st.problems
        check.event_count += len(st.events)
        typed(check, "ChatCompletionChunk", st.events)
        check.wire(check_chunks(st.events, st.done_marker, include_usage))
        deltas = [c.get("delta") or {} for e in st.events for c in e.get("choices") or []]
        reasons = [c.get("finish_reason") for e in st.events for c in e.get("choices") or []
                   if c.get("finish_reason")]
        if tool:
            check.expect(any(d.get("tool_calls") for d in deltas), "the model did not call the tool")
            check.expect(reasons == ["tool_calls"], f"finish_reason {reasons}, expected tool_calls")
        else:
            check.expect(bool("".join(d.get("content") or "" for d in deltas)), "no content streamed")
    return run


def cases() -> list[TestCase]:
    hello = {"max_tokens": 64, "messages": [{"role": "user", "content": "Count from 1 to 5."}]}
    tool = {"max_tokens": 128, "messages": [{"role": "user", "content": "What's the weather like in Paris?"}],
            "tools": [{"type": "function", "function": {k: WEATHER_TOOL[k] for k in
                                                        ("name", "description", "parameters")}}]}
    c = "chat"
    return [
        TestCase("chat-basic", c, "Chat Completion", _basic, origin="extra"),
        TestCase("chat-stream", c, "Chat Completion (Streaming, usage)",
                 _streamed(hello, include_usage=True, tool=False), origin="extra"),
        TestCase("chat-stream-no-usage", c, "Chat Completion (Streaming, no usage)",
                 _streamed(hello, include_usage=False, tool=False), origin="extra"),
        TestCase("chat-tool-calling-stream", c, "Chat Tool Calling (Streaming)",
                 _streamed(tool, include_usage=True, tool=True), origin="extra"),
    ]
