"""A response format enforced on a real llama.cpp server (app/engine/constrained.py).

The scripted reasoning model always answers "Hi there, friend!" in its final message.  With
a json_schema response format its reasoning comes back untouched and its final message is
held to the schema by llama.cpp's own grammar (the gateway's second request carries
``json_schema``): the prose cannot come out, the schema's JSON does.  (Held to a grammar,
this tiny scripted model has no idea what to write, and at temperature 0 it pads the JSON
with whitespace until the token budget ends it; so the test checks how the answer starts.)
"""

from __future__ import annotations

import pytest
from openai import OpenAI

pytestmark = pytest.mark.integration

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
          "additionalProperties": False}
ASK = [{"role": "user", "content": "Say hello."}]


def test_the_final_answer_is_held_to_the_schema(gateway_url: str) -> None:
    client = OpenAI(base_url=f"{gateway_url}/v1", api_key="not-needed", max_retries=0, timeout=60)
    # Unconstrained, the model writes its prose.
    r = client.chat.completions.create(model="scripted-reasoning", messages=ASK,  # type: ignore[arg-type]
                                       max_tokens=60, temperature=0)
    assert r.choices[0].message.content == "Hi there, friend!"
    fmt = {"type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMA}}
    r = client.chat.completions.create(model="scripted-reasoning", messages=ASK,  # type: ignore[call-overload]
                                       response_format=fmt, max_tokens=60, temperature=0)
    choice = r.choices[0]
    reasoning = (choice.message.model_extra or {}).get("reasoning_content")
    assert reasoning == "The user greets me; reply politely."
    assert (choice.message.content or "").startswith('{"n"')
    assert r.usage is not None and r.usage.completion_tokens <= 60
