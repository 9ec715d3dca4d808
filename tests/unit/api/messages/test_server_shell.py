"""Anthropic's ``code_execution_20250825`` server tool on /v1/messages: its ``bash_code_execution``
and ``text_editor_code_execution`` sub-tools run in the gateway's sandbox service (the real
``ocm-gateway sandbox``, bubblewrap, its own process).  The blocks are Anthropic's, typed by the
``anthropic`` SDK (streamed and not): a command's ``stdout`` / ``stderr`` / ``return_code``; a
file created, edited by ``str_replace`` and viewed within one message (one container); a
missing file's ``file_not_found``; ``max_uses`` as ``too_many_requests``; the blocks sent back on
the next turn; a 400 without a sandbox.  The model is the prompt-dependent fake of
:mod:`tests.support.switch_model`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from anthropic.types import RawMessageStreamEvent
from pydantic import TypeAdapter

from tests.support.anthropic_sdk import clients
from tests.support.gateway import MODEL, config, sse_payloads, with_tool
from tests.support.process import Running
from tests.support.sandbox import TOKEN, sandbox_service
from tests.support.switch_model import Switch, answer, call

pytestmark = pytest.mark.timeout(120)
SHELL: Any = {"type": "code_execution_20250825", "name": "code_execution"}
ASK: Any = [{"role": "user", "content": "Work in the sandbox."}]
COMMAND = "echo hi; echo oops >&2; exit 3"


def bash(command: str) -> str:
    return call("bash_code_execution", {"command": command}, ns="functions")


def edit(**args: str) -> str:
    return call("text_editor_code_execution", args, ns="functions")


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Running]:
    with sandbox_service("--wall-seconds", "5") as running:
        yield running


def cfg(sandbox: Running | None) -> Any:
    if sandbox is None:
        return config(context_window=16384)
    return with_tool("code_interpreter", url=sandbox.url, token=TOKEN)


async def test_a_command_comes_back_as_bash_blocks(sandbox: Running) -> None:
    model = Switch(bash(COMMAND), ("[exit code 3]", answer("It failed with 3.")))
    async with clients(model.transport(), cfg(sandbox)) as c:
        msg = await c.sdk.messages.create(model=MODEL, max_tokens=1000, messages=ASK, tools=[SHELL])
        raw = await c.http.post("/v1/messages", headers={"x-api-key": "test-key"}, json={
            "model": MODEL, "max_tokens": 1000, "messages": ASK, "tools": [SHELL], "stream": True})
    assert [b.type for b in msg.content] == ["thinking", "server_tool_use", "bash_code_execution_tool_result",
                                             "text"]
    use, result = msg.content[1], msg.content[2]
    assert use.type == "server_tool_use" and use.name == "bash_code_execution"
    assert use.input == {"command": COMMAND}
    assert result.type == "bash_code_execution_tool_result" and result.tool_use_id == use.id
    run = result.content
    assert run.type == "bash_code_execution_result"
    assert (run.stdout, run.stderr, run.return_code, run.content) == ("hi\n", "oops\n", 3, [])
    assert msg.content[3].type == "text" and msg.content[3].text == "It failed with 3."
    assert "hi\n\nstderr:\noops\n\n[exit code 3]" in model.prompts[1]  # what the model read
    events = [TypeAdapter(RawMessageStreamEvent).validate_python(e) for e in sse_payloads(raw.text)
              if e.get("type") != "ping"]
    starts = [e.content_block for e in events if e.type == "content_block_start"]
    kinds = ["thinking", "server_tool_use", "bash_code_execution_tool_result", "text"]
    assert [b.type for b in starts] == kinds
    streamed = starts[2]
    assert streamed.type == "bash_code_execution_tool_result"
    assert streamed.content.type == "bash_code_execution_result" and streamed.content.return_code == 3


async def test_create_edit_and_view_a_file_in_one_message(sandbox: Running) -> None:
    model = Switch(edit(command="create", path="notes.txt", file_text="hello world\nbye\n"),
                   ("<|message|>goodbye world", answer("Edited.")),
                   ("+goodbye world", edit(command="view", path="notes.txt")),
                   ("File created.", edit(command="str_replace", path="notes.txt", old_str="hello world",
                                          new_str="goodbye world")))
    async with clients(model.transport(), cfg(sandbox)) as c:
        msg = await c.sdk.messages.create(model=MODEL, max_tokens=1000, messages=ASK, tools=[SHELL])
    results = [b.content for b in msg.content if b.type == "text_editor_code_execution_tool_result"]
    assert [r.type for r in results] == ["text_editor_code_execution_create_result",
                                         "text_editor_code_execution_str_replace_result",
                                         "text_editor_code_execution_view_result"]
    created, replaced, viewed = results
    assert created.type == "text_editor_code_execution_create_result" and created.is_file_update is False
    assert replaced.type == "text_editor_code_execution_str_replace_result"
    assert (replaced.old_start, replaced.old_lines, replaced.new_start, replaced.new_lines) == (1, 1, 1, 1)
    assert replaced.lines == ["-hello world", "+goodbye world"]
    assert viewed.type == "text_editor_code_execution_view_result" and viewed.file_type == "text"
    assert (viewed.content, viewed.num_lines, viewed.total_lines) == ("goodbye world\nbye", 2, 2)
    assert msg.content[-1].type == "text" and msg.content[-1].text == "Edited."


async def test_a_missing_file_and_max_uses_are_error_blocks(sandbox: Running) -> None:
    model = Switch(edit(command="view", path="nothing.txt"), ("file_not_found", answer("No such file.")))
    capped = Switch(bash("true"), ("may be used at most 1 times", answer("Stopped.")))
    once: Any = {**SHELL, "max_uses": 1}
    async with clients(model.transport(), cfg(sandbox)) as c:
        missing = await c.sdk.messages.create(model=MODEL, max_tokens=1000, messages=ASK, tools=[SHELL])
    async with clients(capped.transport(), cfg(sandbox)) as c:
        bounded = await c.sdk.messages.create(model=MODEL, max_tokens=1000, messages=ASK, tools=[once])
    error = missing.content[2]
    assert error.type == "text_editor_code_execution_tool_result"
    assert error.content.type == "text_editor_code_execution_tool_result_error"
    assert error.content.error_code == "file_not_found"
    runs = [b.content for b in bounded.content if b.type == "bash_code_execution_tool_result"]
    assert [r.type for r in runs] == ["bash_code_execution_result", "bash_code_execution_tool_result_error"]
    assert runs[1].type == "bash_code_execution_tool_result_error"
    assert runs[1].error_code == "too_many_requests"


async def test_the_blocks_sent_back_are_read_as_the_calls_output(sandbox: Running) -> None:
    model = Switch(bash("echo zanzibar"), ("zanzibar", answer("Printed it.")))
    async with clients(model.transport(), cfg(sandbox)) as c:
        first = await c.sdk.messages.create(model=MODEL, max_tokens=1000, messages=ASK, tools=[SHELL])
        back: Any = first.model_dump(exclude_none=True)["content"]
        again = await c.sdk.messages.create(model=MODEL, max_tokens=1000, tools=[SHELL], messages=[
            *ASK, {"role": "assistant", "content": back}, {"role": "user", "content": "And?"}])
    assert [(b.type, getattr(b, "text", None)) for b in again.content] == [("text", "Printed it.")]
    assert len(model.prompts) == 3 and "zanzibar\n\n[exit code 0]" in model.prompts[2]


async def test_without_a_sandbox_it_is_a_400() -> None:
    async with clients(Switch(bash("true")).transport(), cfg(None)) as c:
        r = await c.http.post("/v1/messages", headers={"x-api-key": "test-key"}, json={
            "model": MODEL, "max_tokens": 100, "messages": ASK, "tools": [SHELL]})
    assert r.status_code == 400 and "code_execution_20250825" in r.json()["error"]["message"]
    assert "[tools.code_interpreter]" in r.json()["error"]["message"]


async def test_a_tool_choice_naming_it_forces_a_sub_tool_call(sandbox: Running) -> None:
    # forced: the prompt ends with the recipient's namespace (either sub-tool), the model goes on
    model = Switch('.bash_code_execution <|constrain|>json<|message|>{"command":"echo forced"}<|call|>',
                   ("forced\n", answer("Done.")))
    async with clients(model.transport(), cfg(sandbox)) as c:
        msg = await c.sdk.messages.create(model=MODEL, max_tokens=1000, messages=ASK, tools=[SHELL],
                                          tool_choice={"type": "tool", "name": "code_execution"})
    assert [b.type for b in msg.content] == ["server_tool_use", "bash_code_execution_tool_result", "text"]
    assert msg.content[0].type == "server_tool_use" and msg.content[0].name == "bash_code_execution"
    assert model.prompts[0].endswith("<|channel|>commentary to=functions")
