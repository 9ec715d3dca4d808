"""Schema-valid fuzzing of hosted tools and the WebSocket mode (issue 35, item 10's remainder).

The generation fuzzer (``test_fuzz_generation.py``) offers function tools over HTTP only.  This
state machine draws the same valid Responses bodies with hosted tool entries beside them: ``mcp``
naming a URL the operator allows (a real MCP server, :mod:`tests.support.mcp_server`), an allowed
URL where nothing listens, or one outside the allow-list; ``web_search`` over an offline index;
``code_interpreter`` with a sandbox that cannot be reached; ``file_search`` with random vector
store ids; and sends them to a gateway in a real uvicorn server, against
:class:`~tests.support.hostile_upstream.HostileLlamaCpp` (whose model also calls the MCP
server's tools by name), over HTTP (whole, streamed, background streamed) and as
``response.create`` on a WebSocket.  The bar: no 5xx answer but the documented ones of a failing
upstream (``ALLOWED_5XX``, as the generation fuzzer), never ``internal_error``, and every stream
or socket turn ends with exactly one terminal event, its last, or one error event.  CI runs a
derandomized few; ``OCM_FUZZ_EXAMPLES=N`` runs N random ones.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test
from websockets.asyncio.client import connect

from app.config import GatewayConfig
from tests.support import fuzz_bodies as fb
from tests.support.fuzz_checks import ALLOWED_5XX, check_status, responses_events
from tests.support.hostile_upstream import BEHAVIOURS, HostileLlamaCpp
from tests.support.mcp_server import running
from tests.support.ws import served

EXAMPLES = int(os.environ.get("OCM_FUZZ_EXAMPLES", "0"))
pytestmark = pytest.mark.timeout(0 if EXAMPLES else 240)
Json = dict[str, Any]
TERMINAL = ("response.completed", "response.incomplete", "response.failed")
NOWHERE = "http://127.0.0.1:9/mcp"  # allowed, and nothing listens there
DENIED = "http://169.254.169.254/mcp"  # not allowed (and link-local)
WHERE: dict[str, Any] = {}  # the MCP server's URL and the index's folder, set by the test
SEEN: Counter[str] = Counter()  # what the run reached: answers per leg, generations, MCP listings


def hosted_config(mcp_url: str, documents: Path) -> GatewayConfig:
    c = fb.fuzz_config()
    return c.model_copy(update={"tools": c.tools.model_validate({
        "mcp": {"allowed_urls": [mcp_url, NOWHERE]},
        "web_search": {"documents": str(documents), "index": str(documents.parent / "index")},
        "code_interpreter": {"url": "http://127.0.0.1:9", "token": "t"},
        "connect_timeout": 2, "call_timeout": 2, "deadline_seconds": 20})})


@st.composite
def hosted_tools(draw: st.DrawFn, mcp_url: str) -> tuple[list[Json], list[str]]:
    """Hosted tool entries, and the names the hostile model may call."""
    tools: list[Json] = []
    names: list[str] = []
    for i in range(draw(st.integers(0, 2))):
        label = f"m{i}"
        entry: Json = {"type": "mcp", "server_label": label,
                       "server_url": draw(st.sampled_from([mcp_url, mcp_url, NOWHERE, DENIED])),
                       "require_approval": draw(st.sampled_from(["never", "always"]))}
        if draw(st.booleans()):
            entry["allowed_tools"] = draw(st.lists(st.sampled_from(["add", "echo", "nope"]), max_size=2))
        tools.append(entry)
        names += [f"{label}__add", f"{label}__echo"]
    if draw(st.booleans()):
        tools.append({"type": draw(st.sampled_from(["web_search", "web_search_preview"]))})
    if draw(st.booleans()):
        tools.append({"type": "code_interpreter", "container": {"type": "auto"}})
    if draw(st.booleans()):
        ids = draw(st.lists(st.text("abcdef0123456789_", min_size=1, max_size=24), min_size=1, max_size=3))
        tools.append({"type": "file_search", "vector_store_ids": [f"vs_{i}" for i in ids]})
    return tools, names


class HostedMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.upstream = HostileLlamaCpp()
        self.loop = asyncio.new_event_loop()
        self.ctx = served(self.upstream.transport(), hosted_config(WHERE["mcp"], WHERE["documents"]))
        self.host = self.loop.run_until_complete(self.ctx.__aenter__())
        self.client = httpx.AsyncClient(base_url=f"http://{self.host}", timeout=60,
                                        headers={"authorization": f"Bearer {fb.KEYS['a']}"})

    def teardown(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.run_until_complete(self.ctx.__aexit__(None, None, None))
        left = asyncio.all_tasks(self.loop)
        for task in left:
            task.cancel()

        async def ended() -> None:
            await asyncio.gather(*left, return_exceptions=True)

        self.loop.run_until_complete(ended())
        self.loop.close()

    def body(self, data: st.DataObject) -> Json:
        drawn, names = data.draw(fb.responses_body())
        hosted, more = data.draw(hosted_tools(WHERE["mcp"]))
        tools = [*drawn.get("tools", []), *hosted]
        self.upstream.tools = [*names, *more]
        return {**drawn, "tools": tools} if tools else drawn

    @rule(data=st.data(), mode=st.sampled_from(["wait", "stream", "background_stream"]),
          seed=st.integers(0, 2**16), first=st.sampled_from(BEHAVIOURS))
    def create_over_http(self, data: st.DataObject, mode: str, seed: int, first: str) -> None:
        body = {**self.body(data), "stream": mode != "wait", "background": mode.startswith("background")}
        if body["background"]:
            body["store"] = True
        self.upstream.reseed(seed, [first])
        before = self.upstream.generations
        r = self.loop.run_until_complete(self.client.post("/v1/responses", json=body))
        SEEN[f"http {r.status_code}"] += 1
        SEEN["http generations"] += self.upstream.generations > before
        SEEN["mcp listings"] += '"mcp_list_tools"' in r.text
        check_status(r)  # a 4xx in the envelope, never a 5xx
        if r.status_code == 200 and body["stream"]:
            responses_events(r)  # exactly one terminal event, its last; never internal_error

    @rule(data=st.data(), seed=st.integers(0, 2**16), first=st.sampled_from(BEHAVIOURS),
          turns=st.integers(1, 2))
    def create_on_a_socket(self, data: st.DataObject, seed: int, first: str, turns: int) -> None:
        self.upstream.reseed(seed, [first])
        before = self.upstream.generations
        self.loop.run_until_complete(self.socket([self.body(data) for _ in range(turns)]))
        SEEN["socket generations"] += self.upstream.generations > before

    async def socket(self, bodies: list[Json]) -> None:
        async with connect(f"ws://{self.host}/v1/responses", max_size=None,
                           additional_headers={"authorization": f"Bearer {fb.KEYS['a']}"}) as ws:
            for body in bodies:
                await ws.send(json.dumps({"type": "response.create", **body}))
                events: list[Json] = []
                while True:
                    event = json.loads(await asyncio.wait_for(ws.recv(), 60))
                    if event["type"] == "error" and "sequence_number" not in event:
                        assert not events, f"an error event after {[e['type'] for e in events][-3:]}"
                        status = event.get("status", 400)
                        assert status < 500 or status in ALLOWED_5XX, event  # as over HTTP
                        assert event["error"].get("code") != "internal_error", event
                        SEEN[f"socket {event.get('status')}"] += 1
                        break
                    events.append(event)
                    if event["type"] in TERMINAL:
                        break
                if events:
                    ends = [e["type"] for e in events if e["type"] in TERMINAL]
                    assert ends == [events[-1]["type"]], [e["type"] for e in events][-5:]
                    SEEN[f"socket {events[-1]['type']}"] += 1
                    SEEN["mcp listings"] += any(e.get("item", {}).get("type") == "mcp_list_tools"
                                                for e in events)
                    error = events[-1]["response"].get("error") or {}
                    assert error.get("code") != "internal_error", error


@pytest.fixture(scope="module")
def mcp_url() -> Iterator[str]:
    with running("streamable") as url:
        yield f"{url}/mcp"


def test_fuzz_hosted_tools_and_sockets(mcp_url: str, tmp_path: Path) -> None:
    documents = tmp_path / "docs"
    documents.mkdir()
    (documents / "pages.jsonl").write_text("".join(
        json.dumps({"url": f"https://example.test/{i}", "title": f"Page {i}", "text": f"weather in {i}"})
        + "\n" for i in range(20)))
    WHERE.update(mcp=mcp_url, documents=documents)
    run_state_machine_as_test(
        HostedMachine,
        settings=settings(max_examples=EXAMPLES or 8, stateful_step_count=6, derandomize=EXAMPLES == 0,
                          database=None, deadline=None, suppress_health_check=list(HealthCheck),
                          print_blob=True),
    )
    print(dict(SEEN))
    # it reached what it is for: generations on both legs, and the allowed MCP server listed
    assert SEEN["http generations"] and SEEN["socket generations"] and SEEN["mcp listings"], dict(SEEN)
