"""The OpenAI Agents SDK as a real client of conversations: ``Runner.run(...,
conversation_id=...)`` (the SDK sends ``conversation`` and only the new input each turn) and
``OpenAIConversationsSession`` (the SDK keeps the history in a conversation through the items
routes). Tracing is off: the SDK would export traces to api.openai.com."""

from __future__ import annotations

import httpx
import openai
from agents import Agent, OpenAIConversationsSession, RunConfig, Runner, set_tracing_disabled
from agents.models.openai_responses import OpenAIResponsesModel

from app.formats.harmony.vocab import harmony_encoding
from tests.support.fake_llamacpp import FakeLlamaCpp
from tests.support.gateway import MODEL, gateway

ANSWER = "<|channel|>final<|message|>Noted.<|return|>"
NO_TRACING = RunConfig(tracing_disabled=True)
set_tracing_disabled(True)


def _agent(c: httpx.AsyncClient) -> tuple[Agent, openai.AsyncOpenAI]:
    sdk = openai.AsyncOpenAI(base_url="http://gateway/v1", api_key="x", http_client=c,  # type: ignore[arg-type]
                             max_retries=0)
    return Agent(name="memo", instructions="Remember what you are told.",
                 model=OpenAIResponsesModel(model=MODEL, openai_client=sdk)), sdk


def _prompt(up: FakeLlamaCpp) -> str:
    return str(harmony_encoding().decode(up.requests[-1]["prompt"]))


async def test_runner_with_conversation_id_keeps_the_context() -> None:
    up = FakeLlamaCpp(ANSWER)
    async with gateway(up.transport()) as c:
        agent, sdk = _agent(c)
        conv = await sdk.conversations.create()
        first = await Runner.run(agent, "The code word is heron.", conversation_id=conv.id,
                                 run_config=NO_TRACING)
        assert first.final_output == "Noted."
        await Runner.run(agent, "What is the code word?", conversation_id=conv.id, run_config=NO_TRACING)
        prompt = _prompt(up)
        assert prompt.index("The code word is heron.") < prompt.index("Noted.") < prompt.index("What is")
        items = [i async for i in sdk.conversations.items.list(conv.id, order="asc")]
    assert [getattr(i, "role", None) for i in items] == ["user", "assistant", "user", "assistant"]


async def test_openai_conversations_session() -> None:
    up = FakeLlamaCpp(ANSWER)
    async with gateway(up.transport()) as c:
        agent, sdk = _agent(c)
        session = OpenAIConversationsSession(openai_client=sdk)
        await Runner.run(agent, "The code word is heron.", session=session, run_config=NO_TRACING)
        await Runner.run(agent, "What is the code word?", session=session, run_config=NO_TRACING)
        assert "The code word is heron." in _prompt(up)
        history = await session.get_items()
        assert [item.get("role") for item in history] == ["user", "assistant", "user", "assistant"]
        popped = await session.pop_item()
        assert popped is not None and popped.get("role") == "assistant"
        assert len(await session.get_items()) == 3
        conv_id = await session._get_session_id()
        await session.clear_session()
        r = await c.get(f"/v1/conversations/{conv_id}")
    assert r.status_code == 404
