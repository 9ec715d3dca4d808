"""Traces as an operator collects them: ``ocm-gateway serve`` with ``OTEL_EXPORTER_OTLP_ENDPOINT``
pointing at a loopback OTLP/HTTP receiver that decodes the protobuf it gets; a streamed
response with a hosted tool call (``web_search`` on the offline index, a real llama.cpp
running the scripted gpt-oss model that searches, then answers) through the OpenAI SDK."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from openai import OpenAI

from tests.integration.conftest import run_gateway
from tests.integration.test_hosted_web_search import MODEL, SCRIPT
from tests.support.llama_server import llama_server
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.paths import ROOT
from tests.support.scripted_gguf import scripted_model

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"


def test_a_streamed_response_with_a_hosted_tool_is_one_trace(tmp_path: Path) -> None:
    receiver = OtlpReceiver()
    with receiver.running() as otlp, llama_server(scripted_model("web-search", SCRIPT)) as url:
        config = tmp_path / "gateway.toml"
        config.write_text("\n".join([
            "[store]", f'path = "{tmp_path / "store.sqlite3"}"', "",
            "[tools.web_search]", f'documents = "{ROOT / "tests" / "fixtures" / "web_corpus"}"',
            f'index = "{tmp_path / "web.sqlite3"}"', "",
            f'[models."{MODEL}"]', 'backend = "llamacpp"', f'base_urls = ["{url}"]', "context_window = 4096",
            f'[models."{MODEL}".harmony]', 'current_date = "2026-11-26"', ""]))
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": otlp, "OTEL_SERVICE_NAME": "gateway-under-test",
               "OTEL_BSP_SCHEDULE_DELAY": "100"}
        with run_gateway(config, env) as gw:
            client = OpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0, timeout=90)
            with client.responses.stream(
                    model=MODEL, input="What is Open Responses?", tools=[{"type": "web_search"}],
                    extra_headers={"traceparent": f"00-{CALLER_TRACE}-b7ad6b7169203331-01"}) as s:
                kinds = [e.type for e in s]
            assert kinds[-1] == "response.completed"
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not any(
                    sp["name"] == "POST /v1/responses" for sp in receiver.spans):
                time.sleep(0.1)
    spans = [sp for sp in receiver.spans if sp["trace_id"] == CALLER_TRACE]
    names = [sp["name"] for sp in spans]
    assert receiver.requests >= 1 and {sp["service"] for sp in spans} == {"gateway-under-test"}
    [server] = [sp for sp in spans if sp["name"] == "POST /v1/responses"]
    assert server["parent_id"] == "b7ad6b7169203331" and server["kind"] == 2  # SERVER
    a = server["attributes"]
    assert a["gen_ai.request.model"] == MODEL and a["http.response.status_code"] == 200
    assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0
    assert a["ocm.tool_rounds"] == 1
    assert names.count("plan") == 2, names  # the call, then the answer
    upstream = [sp for sp in spans if sp["name"] == "POST /completion"]
    assert len(upstream) == 2 and all(sp["kind"] == 3 for sp in upstream)  # CLIENT
    assert all(sp["attributes"]["server.address"] == "127.0.0.1" for sp in upstream)
    [tool] = [sp for sp in spans if sp["name"].startswith("execute_tool")]
    assert tool["attributes"]["gen_ai.tool.name"] == "browser__search"  # the toolbox's name for it
    assert tool["attributes"]["gen_ai.operation.name"] == "execute_tool"
    assert any(n.startswith("store.") for n in names), names
    ids = {sp["span_id"] for sp in spans}
    assert all(sp["parent_id"] in ids for sp in spans if sp is not server)  # one tree
    assert all(sp["start"] >= server["start"] and sp["end"] <= server["end"] for sp in spans)
