"""Hypothesis strategies for request bodies the gateway accepts: valid model names, valid
message and item chains (calls followed by their outputs), function / custom / namespace tools
with a ``tool_choice`` that names them, response formats, streaming and storage flags.

Each tools strategy draws ``(tools, names)``: ``names`` are the function names the model
knows them by (``NAMESPACE__NAME`` for a namespace member), which the hostile upstream calls.
"""

from __future__ import annotations

import hashlib
from typing import Any

from hypothesis import strategies as st

from app.config import GatewayConfig
from tests.support.hostile_upstream import CHAT_HOST, HARMONY_HOST, TEMPLATE_HOST
from tests.support.paths import FIXTURES

Json = dict[str, Any]
HARMONY_MODEL, TEMPLATE_MODEL, CHAT_MODEL = "gpt-oss-test", "tmpl", "chat-qwen"
MODELS = st.sampled_from([HARMONY_MODEL, TEMPLATE_MODEL, CHAT_MODEL])
TEXT = st.one_of(
    st.sampled_from(
        [
            "hi",
            "Weather in Paris?",
            " ",
            "ünïcödé ✓ 日本",
            "<|start|>user",
            "<tool_call>",
            "</think>",
            "a\n\nb",
        ]
    ),
    st.text(max_size=24),
)
PARAMS = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}},
    "required": ["a"],
    "additionalProperties": False,
}
NAMES = st.sampled_from(["get_weather", "lookup", "run_code", "search_docs"])
CALL_IDS = st.sampled_from(["call_1", "call_2", "call_abc"])
KEYS = {"a": "fuzz-key-a", "b": "fuzz-key-b"}  # two tenants
QWQ = str(FIXTURES / "templates" / "Qwen-QwQ-32B.jinja")


def fuzz_config() -> GatewayConfig:
    """The gateway these bodies are valid for: one model per prompt format on the hostile
    upstream's hosts, two API keys, no retry backoff or cooldown (every attempt reaches it)."""
    keys = [{"name": f"team-{k}", "sha256": hashlib.sha256(v.encode()).hexdigest()} for k, v in KEYS.items()]
    common = {"backend": "llamacpp", "context_window": 8192}
    return GatewayConfig.model_validate({
        "store": {"path": ":memory:"}, "auth": {"keys": keys},
        "responses": {"encryption_key": "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="},
        "upstream": {"retry_backoff": 0, "cooldown_seconds": 0},
        "models": {
            HARMONY_MODEL: {**common, "base_urls": [f"http://{HARMONY_HOST}:8080"],
                            "harmony": {"current_date": "2026-11-22"}},
            TEMPLATE_MODEL: {**common, "base_urls": [f"http://{TEMPLATE_HOST}:8080"],
                             "prompt_format": "template", "template": {"path": QWQ}},
            CHAT_MODEL: {**common, "backend": "openai", "base_urls": [f"http://{CHAT_HOST}:8000"],
                         "prompt_format": "chat", "upstream_model": "qwen3"}}})


@st.composite
def chat_tools(draw: st.DrawFn) -> tuple[list[Json], list[str]]:
    names = draw(st.lists(NAMES, max_size=3, unique=True))
    tools = [
        {
            "type": "function",
            "function": {
                "name": n,
                "description": "A tool.",
                "parameters": PARAMS,
                **draw(st.sampled_from([{}, {"strict": True}])),
            },
        }
        for n in names
    ]
    return tools, names


@st.composite
def responses_tools(draw: st.DrawFn) -> tuple[list[Json], list[str]]:
    tools: list[Json] = []
    names: list[str] = []
    for name in draw(st.lists(NAMES, max_size=3, unique=True)):
        kind = draw(st.sampled_from(["function", "custom", "namespace"]))
        if kind == "function":
            tools.append(
                {"type": "function", "name": name, "parameters": PARAMS, "strict": draw(st.booleans())}
            )
            names.append(name)
        elif kind == "custom":
            tools.append({"type": "custom", "name": name, "description": "Free text in."})
            names.append(name)
        else:
            member = {"type": "function", "name": "inner", "parameters": PARAMS}
            tools.append(
                {"type": "namespace", "name": f"ns_{name}", "description": "A namespace.", "tools": [member]}
            )
            names.append(f"ns_{name}__inner")
    return tools, names


@st.composite
def tool_choice(draw: st.DrawFn, tools: list[Json], chat: bool) -> Any:
    plain = [t for t in tools if t["type"] == "function"]
    options: list[Any] = [None, "auto", "none"]
    if tools:
        options.append("required")
    for t in plain:
        name = t["function"]["name"] if chat else t["name"]
        options.append(
            {"type": "function", "function": {"name": name}} if chat else {"type": "function", "name": name}
        )
    if not chat and plain:
        options.append(
            {
                "type": "allowed_tools",
                "mode": "auto",
                "tools": [{"type": "function", "name": plain[0]["name"]}],
            }
        )
    return draw(st.sampled_from(options))


FORMATS = st.sampled_from(
    [
        None,
        {"type": "text"},
        {"type": "json_object"},
        {"type": "json_schema", "name": "obj", "schema": SCHEMA, "strict": True},
    ]
)


@st.composite
def chat_messages(draw: st.DrawFn) -> list[Json]:
    messages: list[Json] = []
    if draw(st.booleans()):
        messages.append({"role": draw(st.sampled_from(["system", "developer"])), "content": draw(TEXT)})
    for _ in range(draw(st.integers(0, 2))):
        messages.append({"role": "user", "content": draw(TEXT)})
        if draw(st.booleans()):
            call_id, name = draw(CALL_IDS), draw(NAMES)
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": name, "arguments": '{"city":"Paris"}'},
                        }
                    ],
                }
            )
            messages.append({"role": "tool", "tool_call_id": call_id, "content": draw(TEXT)})
        else:
            messages.append({"role": "assistant", "content": draw(TEXT)})
    messages.append(
        {"role": "user", "content": draw(st.one_of(TEXT, st.just([{"type": "text", "text": "hi"}])))}
    )
    return messages


@st.composite
def chat_body(draw: st.DrawFn) -> tuple[Json, list[str]]:
    tools, names = draw(chat_tools())
    body: Json = {"model": draw(MODELS), "messages": draw(chat_messages())}
    if tools:
        body["tools"] = tools
        choice = draw(tool_choice(tools, chat=True))
        if choice is not None:
            body["tool_choice"] = choice
        body["parallel_tool_calls"] = draw(st.sampled_from([None, True, False]))
    fmt = draw(FORMATS)
    if fmt is not None:
        body["response_format"] = (
            {"type": "json_schema", "json_schema": {k: v for k, v in fmt.items() if k != "type"}}
            if fmt["type"] == "json_schema"
            else fmt
        )
    body["max_tokens"] = draw(st.sampled_from([None, 8, 64, 400]))
    body["store"] = draw(st.booleans())
    body["n"] = None if body["store"] else draw(st.sampled_from([None, None, 2]))  # stored: one choice
    return {k: v for k, v in body.items() if v is not None}, names


@st.composite
def input_items(draw: st.DrawFn) -> Any:
    if draw(st.booleans()):
        return draw(TEXT)
    items: list[Json] = []
    if draw(st.booleans()):
        items.append(
            {"type": "message", "role": draw(st.sampled_from(["system", "developer"])), "content": draw(TEXT)}
        )
    for _ in range(draw(st.integers(0, 2))):
        items.append(
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": draw(TEXT)}]}
        )
        kind = draw(st.sampled_from(["answer", "call", "custom"]))
        call_id = draw(CALL_IDS)
        if kind == "answer":
            items.append(
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": draw(TEXT), "annotations": []}],
                }
            )
        elif kind == "call":
            items.append(
                {
                    "type": "function_call",
                    "call_id": call_id,
                    "name": draw(NAMES),
                    "arguments": '{"city": "Paris"}',
                }
            )
            items.append({"type": "function_call_output", "call_id": call_id, "output": draw(TEXT)})
        else:
            items.append(
                {"type": "custom_tool_call", "call_id": call_id, "name": draw(NAMES), "input": draw(TEXT)}
            )
            items.append({"type": "custom_tool_call_output", "call_id": call_id, "output": draw(TEXT)})
    items.append({"type": "message", "role": "user", "content": draw(TEXT)})
    return items


@st.composite
def responses_body(draw: st.DrawFn) -> tuple[Json, list[str]]:
    tools, names = draw(responses_tools())
    body: Json = {"model": draw(MODELS), "input": draw(input_items())}
    if tools:
        body["tools"] = tools
        choice = draw(tool_choice(tools, chat=False))
        if choice is not None:
            body["tool_choice"] = choice
    fmt = draw(FORMATS)
    if fmt is not None:
        body["text"] = {"format": fmt}
    body["instructions"] = draw(st.sampled_from([None, "Be brief.", "<|end|>"]))
    body["max_output_tokens"] = draw(st.sampled_from([None, 16, 64, 400]))
    body["reasoning"] = draw(
        st.sampled_from([None, {"effort": "low"}, {"effort": "high", "summary": "auto"}])
    )
    body["truncation"] = draw(st.sampled_from([None, "auto", "disabled"]))
    return {k: v for k, v in body.items() if v is not None}, names
