"""The invariants the generation fuzzer holds every answer to.

* a 5xx only as a documented upstream-derived or overload error (502 / 503 / 504 with a code
  other than ``internal_error``), never a 500;
* every error body is the API's envelope ``{"error": {message, type, param, code}}``;
* a chat stream ends with one ``[DONE]`` after exactly one finish per choice or one error
  chunk; a Responses stream passes :func:`tests.support.openresponses.check_stream` (one
  terminal event, sequence numbers consecutive, deltas that add up, output = fold of items);
* a streamed answer folds to the shape of the non-streamed one (:func:`chat_fold`,
  :func:`responses_shape`);
* :data:`REACHED` counts, as the checks see them, how each stream (and each whole chat answer)
  ended and the tool calls returned: the reach a run asserts a floor for (:func:`reached`).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from tests.support.gateway import sse_payloads
from tests.support.openresponses import check_stream

Json = dict[str, Any]
ALLOWED_5XX = (502, 503, 504)
# what the hostile upstream writes only outside a final answer (a message with no channel, a
# commentary to the assistant, a fabricated user turn): never part of content / output_text
NOT_ANSWERS = ("SECRET", "pwned")
# "chat stream stop" (chat and completions streams), "chat whole length", "responses stream
# failed CODE", "tool calls returned", ...
REACHED: Counter[str] = Counter()


def _calls(arguments: list[str]) -> int:
    """Calls the model made by name with JSON-object arguments (a call the gateway forced by
    ``tool_choice`` carries whatever the model wrote after the forced header: not counted)."""
    n = 0
    for text in arguments:
        with contextlib.suppress(orjson.JSONDecodeError):
            n += isinstance(orjson.loads(text), dict)
    return n


def reached(prefix: str) -> int:
    """How many checked answers ended in a way that begins with ``prefix``."""
    return sum(n for what, n in REACHED.items() if what.startswith(prefix))


def check_answer(text: str) -> None:
    assert not any(word in text for word in NOT_ANSWERS), f"not an answer, shown as one: {text[:300]!r}"


@dataclass
class Stats:
    """Per route: requests, those that reached the upstream's ``/completion``, statuses."""

    sent: Counter[str] = field(default_factory=Counter)
    reached: Counter[str] = field(default_factory=Counter)
    statuses: Counter[tuple[str, int, str]] = field(default_factory=Counter)
    behaviours: Counter[str] = field(default_factory=Counter)
    examples: dict[tuple[str, int, str], str] = field(default_factory=dict)  # one message each
    def share(self) -> float:
        sent = sum(self.sent.values())
        return sum(self.reached.values()) / sent if sent else 0.0

    def summary(self) -> str:
        lines = [
            f"generation requests {sum(self.sent.values())}, reached the upstream "
            f"{sum(self.reached.values())} ({self.share():.0%})"
        ]
        lines += [f"  {route}: {self.reached[route]}/{n}" for route, n in sorted(self.sent.items())]
        lines += [f"  {what}: {n}" for what, n in sorted(REACHED.items())]
        lines += [
            f"  {status} {route} {code}: {n}  ({self.examples.get((route, status, code), '')[:120]})"
            for (route, status, code), n in sorted(self.statuses.items())
            if status >= 400
        ]
        return "\n".join(lines)


def check_error(r: httpx.Response) -> Json:
    """An error answer: its envelope, and a 5xx only as a documented one."""
    body = r.json()
    assert isinstance(body, dict) and set(body) == {"error"}, r.text[:500]
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"], error
    assert isinstance(error["type"], str) and error["type"], error
    if r.status_code >= 500:
        assert r.status_code in ALLOWED_5XX and error["code"] != "internal_error", (r.status_code, error)
    return body


def check_status(r: httpx.Response) -> None:
    if r.status_code >= 400:
        check_error(r)
    else:
        assert r.status_code < 300, (r.status_code, r.text[:300])


def chat_fold(text: str) -> Json:
    """A chat stream checked and folded into ``{"choices": {index: message + finish}}`` or
    ``{"error": ...}``."""
    payloads = sse_payloads(text)
    assert payloads and payloads[-1] == "[DONE]" and payloads.count("[DONE]") == 1, text[-500:]
    chunks: list[Json] = payloads[:-1]
    errors = [c for c in chunks if "error" in c]
    if errors:
        assert len(errors) == 1 and chunks[-1] is errors[0], text[-800:]
        error = errors[0]["error"]
        assert error["message"] and error["code"] != "internal_error", error
    choices: dict[int, Json] = {}
    for c in chunks:
        for choice in c.get("choices") or []:
            fold = choices.setdefault(
                choice["index"],
                {"content": "", "reasoning_content": "", "tool_calls": {}, "finish_reason": None},
            )
            assert fold["finish_reason"] is None, f"a delta after the finish: {choice}"
            delta = choice.get("delta") or {}
            for key in ("content", "reasoning_content"):
                fold[key] += delta.get(key) or ""
            for call in delta.get("tool_calls") or []:
                slot = fold["tool_calls"].setdefault(call["index"], {"name": "", "arguments": ""})
                function = call.get("function") or {}
                slot["name"] += function.get("name") or ""
                slot["arguments"] += function.get("arguments") or ""
            fold["finish_reason"] = choice.get("finish_reason")
    if errors:
        # the failed choice never finished (others of n > 1 may have)
        assert not choices or any(f["finish_reason"] is None for f in choices.values()), "finish and error"
        REACHED[f"chat stream error {errors[0]['error']['code']}"] += 1
        return {"error": errors[0]["error"]["code"]}
    assert choices and all(f["finish_reason"] for f in choices.values()), "a choice without finish"
    for f in choices.values():
        check_answer(f["content"])
        REACHED[f"chat stream {f['finish_reason']}"] += 1
        REACHED["tool calls returned"] += _calls([c["arguments"] for c in f["tool_calls"].values()])
    return {
        "choices": {
            i: {**f, "tool_calls": [f["tool_calls"][k] for k in sorted(f["tool_calls"])]}
            for i, f in choices.items()
        }
    }


def chat_shape(body: Json) -> Json:
    """A non-streamed chat completion in :func:`chat_fold`'s shape."""
    out = {}
    for choice in body["choices"]:
        msg = choice["message"]
        check_answer(msg.get("content") or "")
        REACHED[f"chat whole {choice['finish_reason']}"] += 1
        calls = msg.get("tool_calls") or []
        REACHED["tool calls returned"] += _calls([c["function"]["arguments"] for c in calls])
        out[choice["index"]] = {
            "content": msg.get("content") or "",
            "reasoning_content": msg.get("reasoning_content") or "",
            "tool_calls": [
                {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                for c in msg.get("tool_calls") or []
            ],
            "finish_reason": choice["finish_reason"],
        }
    return {"choices": out}


def responses_events(r: httpx.Response) -> tuple[list[Json], Json]:
    """A Responses SSE body checked; (events, the terminal response)."""
    names = [line[7:] for line in r.text.split("\n") if line.startswith("event: ")]
    events = [p for p in sse_payloads(r.text) if p != "[DONE]"]
    final = check_stream(events, names or None)
    error = final.get("error") or {}
    if final["status"] == "failed":
        assert error.get("code") != "internal_error", error
    REACHED[" ".join(filter(None, ["responses stream", final["status"], error.get("code")]))] += 1
    REACHED["tool calls returned"] += _calls([i["arguments"] for i in final["output"]
                                              if i["type"] == "function_call"])
    return events, final


def responses_shape(resource: Json) -> Json:
    """What a response must agree on however it was delivered (ids aside)."""

    def item(i: Json) -> Json:
        keep = {k: v for k, v in i.items() if k not in ("id", "call_id", "encrypted_content")}
        copy: Json = orjson.loads(orjson.dumps(keep))
        return copy

    for i in resource["output"]:
        if i["type"] == "message":
            check_answer("".join(str(part.get("text", "")) for part in i["content"]))
    error = resource.get("error") or {}
    return {
        "status": resource["status"],
        "output": [item(i) for i in resource["output"]],
        "error": error.get("code"),
        "incomplete": resource.get("incomplete_details"),
    }
