"""The direct call of an ``(body, request) -> Response`` endpoint (app/http/body.py): FastAPI's
dependency solving is skipped, and every body gets the answer FastAPI's handler gives it — the
same validated model, the same error (status, envelope, message, param, code).

Each endpoint below is mounted twice on a :class:`GatewayRoute` router: as it is (the direct
call) and with a no-op dependency, which makes FastAPI solve it (its handler, as before)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import fastapi.routing
import httpx
import orjson
import pytest
from fastapi import APIRouter, Depends, FastAPI, Request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.responses import Response

from app.http import errors
from app.http.body import BIG_BODY, GatewayRoute
from app.http.responses import JSONResponse
from schemas.chat import ChatCompletionRequest
from schemas.messages import MessagesRequest
from schemas.responses import CreateResponseBody

router = APIRouter(route_class=GatewayRoute)


def _nothing() -> None:
    return None


def _echo(body: Any) -> Response:
    return JSONResponse(body.model_dump(mode="json"))


@router.post("/direct/chat")
async def direct_chat(body: ChatCompletionRequest, request: Request) -> Response:
    return _echo(body)


@router.post("/solved/chat")
async def solved_chat(body: ChatCompletionRequest, request: Request, _: None = Depends(_nothing)) -> Response:
    return _echo(body)


@router.post("/direct/responses")
async def direct_responses(body: CreateResponseBody, request: Request) -> Response:
    return _echo(body)


@router.post("/solved/responses")
async def solved_responses(body: CreateResponseBody, request: Request,
                           _: None = Depends(_nothing)) -> Response:
    return _echo(body)


@router.post("/direct/messages")
async def direct_messages(body: MessagesRequest, request: Request) -> Response:
    return _echo(body)


@router.post("/solved/messages")
async def solved_messages(body: MessagesRequest, request: Request, _: None = Depends(_nothing)) -> Response:
    return _echo(body)


APP = FastAPI()
APP.include_router(router)
errors.install(APP, [router])
APIS = ("chat", "responses", "messages")
LOOP = asyncio.new_event_loop()
CLIENT = httpx.AsyncClient(transport=httpx.ASGITransport(app=APP), base_url="http://t")


@pytest.fixture(scope="module", autouse=True)
def _close() -> Iterator[None]:
    yield
    LOOP.run_until_complete(CLIENT.aclose())


def post(path: str, raw: bytes, content_type: str | None) -> tuple[int, Any]:
    headers = {} if content_type is None else {"content-type": content_type}
    r = LOOP.run_until_complete(CLIENT.post(path, content=raw, headers=headers))
    return r.status_code, r.json()


def both(api: str, raw: bytes, content_type: str | None = "application/json") -> tuple[int, Any]:
    direct = post(f"/direct/{api}", raw, content_type)
    assert direct == post(f"/solved/{api}", raw, content_type), raw[:300]
    return direct


def test_the_direct_routes_skip_dependency_solving(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = fastapi.routing.solve_dependencies  # type: ignore[attr-defined]

    async def spy(**kwargs: Any) -> Any:
        calls.append(kwargs["request"].url.path)
        return await real(**kwargs)

    monkeypatch.setattr(fastapi.routing, "solve_dependencies", spy)
    raw = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert post("/direct/chat", raw, "application/json")[0] == 200
    assert post("/solved/chat", raw, "application/json")[0] == 200
    assert calls == ["/solved/chat"]
    # off the direct path (no JSON content type): FastAPI's handler, as before
    assert post("/direct/chat", raw, "text/plain")[0] == 400
    assert calls == ["/solved/chat", "/direct/chat"]


USER = [{"role": "user", "content": "hi"}]
GOOD: dict[str, dict[str, Any]] = {"chat": {"model": "m", "messages": USER},
                                   "responses": {"model": "m", "input": USER},
                                   "messages": {"model": "m", "messages": USER, "max_tokens": 16}}
RAW = [b"", b" ", b"{", b"[]", b"null", b"1", b'"x"', b"{}", b"NaN", b'{"model": NaN}',
       b'{"model": "\\ud800", "messages": []}', b'{"model": "m", "n": 99999999999999999999}',
       b'{"model": "m", "seed": -9223372036854775809}', b'{"model": "m", "seed": 9223372036854775807}',
       b"\xff\xfe{}", b"\xef\xbb\xbf{}", b'{"model": "m"} x', b'{"model": "m", "model": 3}',
       b'{"model": "m", "temperature": 1e999}', b'{"a": 1}' * 2]
TYPES = [None, "application/json", "application/json; charset=utf-8", "APPLICATION/JSON",
         " application/json ;q=1", "text/plain", "application/x-www-form-urlencoded",
         "application/vnd.example+json", "application/jsonx", ""]


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("content_type", TYPES)
def test_content_types_get_the_same_answers(api: str, content_type: str | None) -> None:
    both(api, orjson.dumps(GOOD[api]), content_type)
    both(api, b"", content_type)
    both(api, b"{", content_type)


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("raw", RAW)
def test_odd_bodies_get_the_same_answers(api: str, raw: bytes) -> None:
    status, body = both(api, raw)
    assert status in (200, 400) and ("error" in body) == (status == 400)


SCHEMA = {"type": "object", "properties": {"a": {"type": "string"}}}
TOOL = {"type": "function", "function": {"name": "f", "description": "d", "parameters": SCHEMA}}
CALL = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
HISTORY = [{"role": "system", "content": [{"type": "text", "text": "s"}]}, *USER,
           {"role": "assistant", "content": None, "tool_calls": [CALL]},
           {"role": "tool", "tool_call_id": "c", "content": "ok"}]
VALID = [("chat", {**GOOD["chat"], "stream": True, "stream_options": {"include_usage": True},
                   "tools": [TOOL], "tool_choice": "auto", "temperature": 0.5, "max_tokens": 9,
                   "seed": 2**63 - 1, "user": None, "metadata": {"k": "v"}, "stop": ["x"],
                   "response_format": {"type": "json_object"}}),
         ("chat", {**GOOD["chat"], "messages": HISTORY}),
         ("responses", {**GOOD["responses"], "store": False, "stream": True, "instructions": "be brief",
                        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
                        "reasoning": {"effort": "low"}, "max_output_tokens": 50,
                        "previous_response_id": None}),
         ("responses", {"model": "m", "input": "plain text", "background": False,
                        "text": {"format": {"type": "text"}}}),
         ("messages", {**GOOD["messages"], "system": "s", "stream": True, "temperature": 1,
                       "tools": [{"name": "f", "input_schema": {"type": "object"}}], "stop_sequences": ["x"],
                       "thinking": {"type": "enabled", "budget_tokens": 1024}})]


@pytest.mark.parametrize(("api", "body"), VALID)
def test_full_bodies_get_the_same_model(api: str, body: dict[str, Any]) -> None:
    status, echoed = both(api, orjson.dumps(body))
    assert status == 200, echoed


@pytest.mark.parametrize("api", APIS)
def test_a_large_body_gets_the_same_answers(api: str) -> None:
    good = {**GOOD[api], "metadata": {"pad": "x" * BIG_BODY}}
    bad = {**good, "temperature": "hot"}
    both(api, orjson.dumps(good))  # FastAPI's handler (its parse and validation in a thread)
    assert both(api, orjson.dumps(bad))[0] == 400


JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70)
                    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                max_size=3),
                    max_leaves=8)
FIELDS = {"chat": sorted(ChatCompletionRequest.model_fields),
          "responses": sorted(CreateResponseBody.model_fields),
          "messages": sorted(MessagesRequest.model_fields)}
PLAUSIBLE = (st.none() | st.booleans() | st.integers(-1, 5000) | st.floats(0, 2.5)
             | st.sampled_from(["auto", "none", "required", "low", "high", "m", "text"]))
MESSAGE = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system", "tool", "x"]),
                                 "content": st.text(max_size=8) | JSON})


@st.composite
def bodies(draw: st.DrawFn) -> tuple[str, bytes]:
    """A body near each API's model: its required fields mostly right, some fields of the model
    with odd values, now and then a field it does not have."""
    api = draw(st.sampled_from(APIS))
    body: dict[str, Any] = dict(draw(st.sampled_from([GOOD[api], GOOD[api], {}])))
    for name in draw(st.lists(st.sampled_from(FIELDS[api]), max_size=3)):
        body[name] = draw(PLAUSIBLE | JSON | st.lists(MESSAGE, max_size=2))
    if draw(st.booleans()):
        body[draw(st.text(max_size=6))] = draw(JSON)
    raw = json.dumps(body).encode()  # integers beyond 64 bits too
    return api, raw if draw(st.integers(0, 9)) else raw[:-1]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies())
def test_any_body_gets_the_same_answer_from_both_paths(case: tuple[str, bytes]) -> None:
    api, raw = case
    status, body = both(api, raw)
    assert status in (200, 400), body
