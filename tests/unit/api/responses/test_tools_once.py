"""A Responses request's tools are converted (and their schemas checked) once, however many
parts of the service ask: a 10,000-node schema was walked three times on the event loop."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from app.api.responses import ingest
from app.api.responses import tools as tools_module
from schemas.responses import CreateResponseBody
from tests.support.fake_llamacpp import FakeLlamaCpp
from tests.support.gateway import MODEL, gateway

ANSWER = "<|channel|>final<|message|>Hi.<|return|>"


def _body(**more: Any) -> dict[str, Any]:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    return {"model": MODEL, "input": "hi", "max_output_tokens": 8,
            "tools": [{"type": "function", "name": "weather", "parameters": schema}], **more}


@pytest.mark.parametrize("store", [True, False])
async def test_one_schema_check_per_tool_per_request(store: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    checks: list[str] = []
    real = tools_module.check_json_schema
    monkeypatch.setattr(tools_module, "check_json_schema",
                        lambda schema, param: (checks.append(param), real(schema, param))[1])
    async with gateway(FakeLlamaCpp(ANSWER).transport()) as c:
        r = await c.post("/v1/responses", json=_body(store=store))
        assert r.status_code == 200, r.text
        assert [t["name"] for t in r.json()["tools"]] == ["weather"]  # echoed from the same conversion
        assert checks == ["tools[0].parameters"]
        r = await c.post("/v1/responses", json=_body(store=store, stream=True))
        assert r.status_code == 200
        assert checks == ["tools[0].parameters"] * 2  # once per request, never shared between them


def test_the_conversion_is_per_body_and_per_hosted_set() -> None:
    first = CreateResponseBody.model_validate(_body())
    second = CreateResponseBody.model_validate(_body())
    assert ingest.tools_of(first) is ingest.tools_of(first)
    assert ingest.tools_of(first) is not ingest.tools_of(second)
    assert ingest.tools_of(first, frozenset({"web_search"})) is not ingest.tools_of(first)
    assert ingest.echo_of(first) == ingest.tools_of(second).echo
    key = id(second)
    del second
    gc.collect()
    assert key not in ingest._TOOLS  # the entry goes with its body
