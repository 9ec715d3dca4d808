"""Cancelling a response with hosted tools in the phases the other tests do not reach: a
WebSocket closed while a tool runs, the gateway shutting down while a background response's
tool runs, and ``POST .../cancel`` during a later generation (after a tool ran).  The MCP
server is the real one of ``tests/support/mcp_server.py``; its ``hold`` tool notes in a file
when its handler is cancelled."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import connect

from tests.support.asgi import eventually
from tests.support.gateway import MODEL, gateway
from tests.support.gateway import allowing_mcp as cfg
from tests.support.slow_upstream import EndlessUpstream
from tests.support.switch_model import Switch, answer, call
from tests.support.ws import create, served

Json = dict[str, Any]


def tools(server: str) -> list[Json]:
    return [{"type": "mcp", "server_label": "tools", "server_url": server + "/mcp",
             "require_approval": "never"}]


async def test_closing_the_websocket_cancels_the_running_tool(server: str, tmp_path: Path) -> None:
    note = tmp_path / "hold.txt"
    model = Switch(call("hold", {"path": str(note)}))
    async with served(model.transport(), cfg(server)) as host:
        async with connect(f"ws://{host}/v1/responses") as ws:
            await ws.send(create(input="hold", tools=tools(server)))
            await eventually(lambda: note.exists(), seconds=5)
        await eventually(lambda: "cancelled" in note.read_text(), seconds=5)
    assert note.read_text() == "started\ncancelled\n" and len(model.prompts) == 1


async def test_shutdown_cancels_a_background_responses_running_tool(server: str, tmp_path: Path) -> None:
    note = tmp_path / "hold.txt"
    model = Switch(call("hold", {"path": str(note)}))
    async with gateway(model.transport(), cfg(server)) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "hold", "background": True,
                                                 "tools": tools(server)})
        assert r.status_code == 200, r.text
        await eventually(lambda: note.exists(), seconds=5)
    # the gateway has shut down: the tool's handler was cancelled, not left running
    await eventually(lambda: "cancelled" in note.read_text(), seconds=5)
    assert note.read_text() == "started\ncancelled\n"


class CallThenEndless:
    """A llama.cpp whose first generation calls ``add`` and whose next one never ends."""

    def __init__(self) -> None:
        self.first = Switch(call("add", {"a": 1, "b": 2}), ("<|message|>3<|end|>", answer("never")))
        self.endless = EndlessUpstream()
        self.generations = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(404)
        self.generations += 1
        if self.generations == 1:
            return self.first(request)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=self.endless)


async def test_cancel_during_the_generation_after_a_tool(server: str) -> None:
    model = CallThenEndless()
    async with gateway(httpx.MockTransport(model), cfg(server)) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "input": "1+2", "background": True,
                                                 "tools": tools(server)})
        rid = r.json()["id"]
        await eventually(lambda: model.endless.sent >= 5, seconds=5)  # the second generation runs
        cancelled = await c.post(f"/v1/responses/{rid}/cancel")
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
        await eventually(lambda: model.endless.closed_at is not None, seconds=5)
        stored = (await c.get(f"/v1/responses/{rid}")).json()
    assert stored["status"] == "cancelled" and model.generations == 2
    done = [i for i in stored["output"] if i["type"] == "mcp_call"]
    assert [(i["status"], i["output"]) for i in done] == [("completed", "3")]  # the step before stays
    assert json.dumps(stored).count('"type": "mcp_call"') == 1
