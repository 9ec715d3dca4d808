"""The OpenAI Agents SDK's WebSocket mode (``responses_websocket_session``) against
``ocm-gateway serve`` on a real llama.cpp server: a tool loop on one socket.

Every ``response.create`` frame the SDK sends carries ``"stream": true``; the gateway takes
it.  The scripted gpt-oss model calls ``lookup`` and, once that call and its output are in
the prompt (its marker token comes from the call's arguments), answers.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from agents import Agent, function_tool, set_tracing_disabled
from agents.responses_websocket_session import responses_websocket_session

from tests.integration.conftest import run_gateway, write_config
from tests.support.llama_server import llama_server
from tests.support.process import Running
from tests.support.scripted_gguf import scripted_model

pytestmark = [pytest.mark.integration, pytest.mark.asyncio, pytest.mark.timeout(120)]

WORD = "quixotic_axolotl"  # the call's rarest token is the marker: not in the first prompt
ANSWER = "The lookup says it is fine."
SCRIPT = ('<|channel|>commentary to=functions.lookup <|constrain|>json'
          f'<|message|>{{"word":"{WORD}"}}<|call|>'
          f"<|start|>assistant<|channel|>final<|message|>{ANSWER}<|return|>")


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    tmp = tmp_path_factory.mktemp("agents-ws")
    with llama_server(scripted_model("agents-ws", SCRIPT)) as url:
        config = write_config(tmp / "gateway.toml", {"scripted-loop": url}, tmp / "store.sqlite3")
        with run_gateway(config) as running:
            yield running


async def test_a_tool_loop_on_one_websocket(gateway: Running) -> None:
    set_tracing_disabled(True)
    looked_up: list[str] = []

    @function_tool
    def lookup(word: str) -> str:
        """Look a word up."""
        looked_up.append(word)
        return "fine"

    agent = Agent(name="assistant", instructions="Be brief.", model="scripted-loop", tools=[lookup])
    async with responses_websocket_session(api_key="not-needed", base_url=f"{gateway.url}/v1") as ws:
        result = await ws.run(agent, "Look it up.")
        assert looked_up == [WORD]
        assert result.final_output == ANSWER
        streamed = ws.run_streamed(agent, "Again.", previous_response_id=result.last_response_id)
        async for _ in streamed.stream_events():
            pass
        assert streamed.final_output == ANSWER  # the second run continues the first on the socket
    async with httpx.AsyncClient(timeout=30) as client:
        metrics = (await client.get(f"{gateway.url}/metrics")).text
    assert 'route="/v1/responses",status="101"} 1.0' in metrics  # one socket, no HTTP fallback
    assert 'route="/v1/responses",status="200"' not in metrics
