"""Anthropic's ``code_execution_20250522`` server tool on /v1/messages, run by the gateway's
sandbox service (the real ``ocm-gateway sandbox``, bubblewrap, its own process): the run comes
back as ``server_tool_use`` + ``code_execution_tool_result`` blocks (typed by the ``anthropic``
SDK, streamed and not), the answer sees the output, and a run that raises is ``stderr`` with a
non-zero ``return_code``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.anthropic_sdk import clients
from tests.support.gateway import MODEL, with_tool
from tests.support.process import Running
from tests.support.sandbox import TOKEN, sandbox_service
from tests.support.switch_model import Switch, answer, python

pytestmark = pytest.mark.timeout(120)
CODE: Any = {"type": "code_execution_20250522", "name": "code_execution"}
ASK: Any = [{"role": "user", "content": "What is 6 times 7? Compute it."}]


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Running]:
    with sandbox_service("--wall-seconds", "3") as running:
        yield running


def cfg(sandbox: Running) -> Any:
    return with_tool("code_interpreter", url=sandbox.url, token=TOKEN)


async def test_a_run_comes_back_as_code_execution_blocks(sandbox: Running) -> None:
    model = Switch(python("print(6*7)"), ("<|message|>42\n", answer("It is 42.")))
    async with clients(model.transport(), cfg(sandbox)) as c:
        msg = await c.sdk.messages.create(model=MODEL, max_tokens=1000, messages=ASK, tools=[CODE])
        async with c.sdk.messages.stream(model=MODEL, max_tokens=1000, messages=ASK, tools=[CODE]) as s:
            streamed = await s.get_final_message()
    for m in (msg, streamed):
        assert [b.type for b in m.content] == ["server_tool_use", "code_execution_tool_result", "text"]
        use, result, text = m.content
        assert use.type == "server_tool_use" and use.name == "code_execution"
        assert use.input == {"code": "print(6*7)"}
        assert result.type == "code_execution_tool_result" and result.tool_use_id == use.id
        run = result.content
        assert run.type == "code_execution_result" and run.stdout == "42\n" and run.return_code == 0
        assert text.type == "text" and text.text == "It is 42."
        assert m.usage.server_tool_use is not None and m.usage.server_tool_use.web_search_requests == 0


async def test_a_run_that_raises_is_stderr_and_a_non_zero_return_code(sandbox: Running) -> None:
    model = Switch(python("1/0"), ("ZeroDivisionError", answer("It failed.")))
    async with clients(model.transport(), cfg(sandbox)) as c:
        msg = await c.sdk.messages.create(model=MODEL, max_tokens=1000, messages=ASK, tools=[CODE])
    result = next(b for b in msg.content if b.type == "code_execution_tool_result")
    run = result.content
    assert run.type == "code_execution_result" and run.return_code == 1
    assert "ZeroDivisionError" in run.stderr
    assert msg.content[-1].type == "text" and msg.content[-1].text == "It failed."
