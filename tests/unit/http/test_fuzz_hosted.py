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
or socket turn ends with exactly one terminal event, its last, or one error event.

The MCP server logs every ``tools/call`` it receives (``--call-log``), and one rule has the
model call a planned name (:mod:`tests.support.fuzz_mcp`): an offered tool, one awaiting
approval, the web search, or a hostile name (a tool the entry does not allow, a label not
listed, another case, a Unicode confusable, another server's label); every answer is judged
against the log: only what the request lets run reached the server, by that name, every
``mcp_call`` shown carries the server's own result, and no hostile name ever ran.  The test
ends by asserting a floor for each thing reached (``FLOORS``): generations on both legs,
listings, calls run and their results, each hostile kind refused, approvals, web searches,
streams by terminal event.  CI runs a derandomized few; ``OCM_FUZZ_EXAMPLES=N`` runs N random
ones.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, run_state_machine_as_test
from websockets.asyncio.client import connect

from app.config import GatewayConfig
from tests.support import fuzz_bodies as fb
from tests.support import fuzz_mcp as fm
from tests.support.fuzz_checks import ALLOWED_5XX, check_status, responses_events
from tests.support.hostile_upstream import BEHAVIOURS, HostileLlamaCpp
from tests.support.mcp_server import CallLog, running
from tests.support.ws import served

EXAMPLES = int(os.environ.get("OCM_FUZZ_EXAMPLES", "0"))
pytestmark = pytest.mark.timeout(0 if EXAMPLES else 240)
Json = dict[str, Any]
TERMINAL = ("response.completed", "response.incomplete", "response.failed")
LEGS = st.sampled_from(["wait", "stream", "background_stream", "socket"])
SEEDS = st.integers(0, 2**16)
THEN = st.one_of(st.sampled_from(["valid", "reasoning"]), st.sampled_from(BEHAVIOURS))
NOWHERE = "http://127.0.0.1:9/mcp"  # allowed, and nothing listens there
DENIED = "http://169.254.169.254/mcp"  # not allowed (and link-local)
WHERE: dict[str, Any] = {}  # the MCP server's URL, its call log and the index's folder, set by the test
SEEN: Counter[str] = Counter()  # what the run reached (the floors at the end of the test)
# what a derandomized run must reach at least: a fuzzer whose cases stop reaching the
# generation, the MCP server or the hostile names fails here
FLOORS = {
    "http generations": 10, "socket generations": 2, "mcp listings": 6,
    "mcp calls run by name": 2, "mcp_call items with the server's result": 2,
    "approval requests (not run)": 1, "web_search calls": 1,
    **{f"hostile {kind}: refused, not run": 1 for kind in fm.HOSTILE},
    "stream response.completed": 2, "stream response.failed": 1,
}


def hosted_config(mcp_url: str, documents: Path) -> GatewayConfig:
    c = fb.fuzz_config()
    return c.model_copy(update={"tools": c.tools.model_validate({
        "mcp": {"allowed_urls": [mcp_url, NOWHERE]},
        "web_search": {"documents": str(documents), "index": str(documents.parent / "index")},
        "code_interpreter": {"url": "http://127.0.0.1:9", "token": "t"},
        "connect_timeout": 2, "call_timeout": 2, "deadline_seconds": 20})})


@st.composite
def hosted_tools(draw: st.DrawFn, mcp_url: str) -> tuple[list[Json], list[fm.Entry], list[str]]:
    """Hosted tool entries, those naming the MCP server (as :class:`~fm.Entry`), and the
    labels of every ``mcp`` entry."""
    tools: list[Json] = []
    entries: list[fm.Entry] = []
    labels: list[str] = []
    for i in range(draw(st.integers(0, 2))):
        label = f"m{i}"
        url = draw(st.sampled_from([mcp_url, mcp_url, NOWHERE, DENIED]))
        allowed = None
        if draw(st.booleans()):
            allowed = tuple(draw(st.lists(st.sampled_from(["add", "echo", "weather", "nope"]), max_size=2)))
        entry = fm.Entry(label, allowed, draw(st.sampled_from(["never", "always"])))
        tools.append(entry.wire(url))
        labels.append(label)
        if url == mcp_url:
            entries.append(entry)
    if draw(st.booleans()):
        tools.append({"type": draw(st.sampled_from(["web_search", "web_search_preview"]))})
    if draw(st.booleans()):
        tools.append({"type": "code_interpreter", "container": {"type": "auto"}})
    if draw(st.booleans()):
        ids = draw(st.lists(st.text("abcdef0123456789_", min_size=1, max_size=24), min_size=1, max_size=3))
        tools.append({"type": "file_search", "vector_store_ids": [f"vs_{i}" for i in ids]})
    return tools, entries, labels


class HostedMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.upstream = HostileLlamaCpp()
        self.loop = asyncio.new_event_loop()
        self.ctx = served(self.upstream.transport(), hosted_config(WHERE["mcp"], WHERE["documents"]))
        self.host = self.loop.run_until_complete(self.ctx.__aenter__())
        self.client = httpx.AsyncClient(base_url=f"http://{self.host}", timeout=60,
                                        headers={"authorization": f"Bearer {fb.KEYS['a']}"})
        self.calls: CallLog = WHERE["log"]
        self.code: str | None = None  # the error code of the last error answer
        self.calls.new()  # what earlier examples left (nothing, when they ended well)

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

    def body(self, data: st.DataObject) -> tuple[Json, list[fm.Entry]]:
        drawn, names = data.draw(fb.responses_body())
        hosted, entries, labels = data.draw(hosted_tools(WHERE["mcp"]))
        tools = [*drawn.get("tools", []), *hosted]
        known, arguments = fm.known_names([fm.Entry(label, None, "never") for label in labels])
        self.upstream.tools = [*names, *known]
        self.upstream.arguments = arguments
        return ({**drawn, "tools": tools} if tools else drawn), entries

    def over_http(self, body: Json, mode: str) -> Json | None:
        """One request over HTTP, checked; the response as answered (None: an error answer)."""
        body = {**body, "stream": mode != "wait", "background": mode.startswith("background")}
        if body["background"]:
            body["store"] = True
        before = self.upstream.generations
        r = self.loop.run_until_complete(self.client.post("/v1/responses", json=body))
        SEEN[f"http {r.status_code}"] += 1
        SEEN["http generations"] += self.upstream.generations > before
        SEEN["mcp listings"] += '"mcp_list_tools"' in r.text
        check_status(r)  # a 4xx in the envelope, never a 5xx
        if r.status_code != 200:
            self.code = r.json()["error"]["code"]
            return None
        if not body["stream"]:
            final: Json = r.json()
            return final
        final = responses_events(r)[1]  # exactly one terminal event, its last; never internal_error
        SEEN[f"stream response.{final['status']}"] += 1
        return final

    @rule(data=st.data(), mode=st.sampled_from(["wait", "stream", "background_stream"]),
          seed=st.integers(0, 2**16), first=st.sampled_from(BEHAVIOURS))
    def create_over_http(self, data: st.DataObject, mode: str, seed: int, first: str) -> None:
        body, entries = self.body(data)
        self.upstream.reseed(seed, [first])
        final = self.over_http(body, mode)
        fm.judge(entries, self.calls.new(), final, SEEN)

    @rule(data=st.data(), seed=st.integers(0, 2**16), first=st.sampled_from(BEHAVIOURS),
          turns=st.integers(1, 2))
    def create_on_a_socket(self, data: st.DataObject, seed: int, first: str, turns: int) -> None:
        self.upstream.reseed(seed, [first])
        before = self.upstream.generations
        turns_ = [self.body(data) for _ in range(turns)]  # (the model knows the last's names)
        self.loop.run_until_complete(self.socket(
            [body for body, _ in turns_],
            lambda n, final: fm.judge(turns_[n][1], self.calls.new(), final, SEEN)))
        SEEN["socket generations"] += self.upstream.generations > before

    @rule(data=st.data(), leg=LEGS, seed=SEEDS, then=THEN)
    def call_mcp_by_name(self, data: st.DataObject, leg: str, seed: int, then: str) -> None:
        """The model calls one planned name (:func:`fm.plan`): an offered tool, one awaiting
        approval, the web search, or a hostile name that must never reach the server; the
        generation after a call that ran behaves as ``then``."""
        self.planned(data.draw(fm.plan(fm.KINDS)), data, leg, seed, then)

    @initialize(data=st.data())
    def call_each_kind(self, data: st.DataObject) -> None:
        """Each example begins with one call of every kind (:data:`fm.KINDS`), each in a body of
        its own and over a leg of its own (a call that runs is followed by a valid answer; the
        rule below draws what follows): what the floors count on."""
        for kind in fm.KINDS:
            self.planned(data.draw(fm.plan((kind,))), data, data.draw(LEGS), data.draw(SEEDS), "valid")

    def planned(self, plan: fm.Plan, data: st.DataObject, leg: str, seed: int, then: str) -> None:
        drawn = {k: v for k, v in data.draw(fb.responses_body())[0].items() if k != "tool_choice"}
        tools = [*drawn.get("tools", []), *(e.wire(WHERE["mcp"]) for e in plan.entries)]
        if plan.web:
            tools.append({"type": "web_search"})
        known, arguments = fm.known_names(plan.entries)
        if plan.kind in (*fm.HOSTILE, "approval"):  # whatever else it says, it names nothing runnable
            known, arguments = [], {}
        self.upstream.tools, self.upstream.arguments = known, arguments
        self.upstream.calls = [(plan.name, plan.args)]
        self.upstream.reseed(seed, ["hosted_call", then])
        body = {**drawn, "tools": tools}
        finals: list[Json | None] = []
        self.code = None
        before = self.upstream.generations
        final: Json | None = None
        if leg == "socket":
            self.loop.run_until_complete(self.socket([body], lambda n, f: finals.append(f)))
            final = finals[0]
        else:
            final = self.over_http(body, leg)
        SEEN[f"{'socket' if leg == 'socket' else 'http'} generations"] += self.upstream.generations > before
        fm.judge(plan.entries, self.calls.new(), final, SEEN, plan, self.code)
        self.upstream.calls = []

    async def socket(self, bodies: list[Json], after: Callable[[int, Json | None], None]) -> None:
        """The turns of one socket, checked; ``after(n, response)`` once turn ``n`` ended
        (None: with an error event)."""
        async with connect(f"ws://{self.host}/v1/responses", max_size=None,
                           additional_headers={"authorization": f"Bearer {fb.KEYS['a']}"}) as ws:
            for n, body in enumerate(bodies):
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
                        self.code = event["error"].get("code")
                        break
                    events.append(event)
                    if event["type"] in TERMINAL:
                        break
                if not events:
                    after(n, None)
                    continue
                ends = [e["type"] for e in events if e["type"] in TERMINAL]
                assert ends == [events[-1]["type"]], [e["type"] for e in events][-5:]
                SEEN[f"socket {events[-1]['type']}"] += 1
                SEEN[f"stream {events[-1]['type']}"] += 1
                SEEN["mcp listings"] += any(e.get("item", {}).get("type") == "mcp_list_tools"
                                            for e in events)
                error = events[-1]["response"].get("error") or {}
                assert error.get("code") != "internal_error", error
                after(n, events[-1]["response"])


@pytest.fixture(scope="module")
def mcp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, CallLog]]:
    log = tmp_path_factory.mktemp("mcp") / "calls.jsonl"
    with running("streamable", call_log=log) as url:
        yield f"{url}/mcp", CallLog(log)


def prepare(mcp_url: str, log: CallLog, folder: Path) -> None:
    """Where the machine finds the MCP server, its call log and the search index's pages."""
    documents = folder / "docs"
    documents.mkdir()
    (documents / "pages.jsonl").write_text("".join(
        json.dumps({"url": f"https://example.test/{i}", "title": f"Page {i}", "text": f"weather in {i}"})
        + "\n" for i in range(20)))
    WHERE.update(mcp=mcp_url, log=log, documents=documents)
    SEEN.clear()


def short_of_floors() -> dict[str, tuple[int, int]]:
    """What the run reached less often than :data:`FLOORS` asks: (seen, floor) each."""
    return {what: (SEEN[what], least) for what, least in FLOORS.items() if SEEN[what] < least}


def test_fuzz_hosted_tools_and_sockets(mcp_server: tuple[str, CallLog], tmp_path: Path) -> None:
    prepare(*mcp_server, tmp_path)
    run_state_machine_as_test(
        HostedMachine,
        settings=settings(max_examples=EXAMPLES or 3, stateful_step_count=6, derandomize=EXAMPLES == 0,
                          database=None, deadline=None, suppress_health_check=list(HealthCheck),
                          print_blob=True),
    )
    print(dict(sorted(SEEN.items())))
    # it reached what it is for: generations on both legs, the MCP server listed and its tools
    # run by name with their results shown, every hostile name refused, streams ending both ways
    short = short_of_floors()
    assert not short, f"below the floor (seen, floor): {short}; all: {dict(sorted(SEEN.items()))}"
