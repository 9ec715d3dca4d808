"""Where the llama.cpp adapter learns which tokens are markers: the configured GGUF, the
file llama-server reports in ``/props`` (``model_path``) when readable, else the shape check.

The ``/props`` body is the recorded one (``01b_get_props``) with ``model_path`` pointed at a
GGUF written for the test; ``/tokenize`` matches added tokens in plain text like llama.cpp.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.llamacpp import LlamaCppBackend
from app.core.errors import UpstreamError
from tests.support.vocab_gguf import write
from tests.support.wire import load

# ids in tests/support/vocab_gguf.TOKENS: 4 is "<b>" (USER_DEFINED), 10 is "<think>" (NORMAL)
ADDED = {"<b>": 4, "<think>": 10}


def props(model_path: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(load("01b_get_props")["response"]["chunks"][0]["text"])
    body["model_path"] = model_path
    return body


def server(model_path: str, log: list[str]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/props":
            return httpx.Response(200, json=props(model_path))
        text = json.loads(request.content)["content"]
        log.append(text)
        tokens, i = [], 0
        while i < len(text):
            hit = next((p for p in ADDED if text.startswith(p, i)), None)
            piece = hit or text[i]
            tokens.append({"id": ADDED[hit] if hit else 1000 + ord(text[i]), "piece": piece})
            i += len(piece)
        return httpx.Response(200, json={"tokens": tokens})
    return httpx.MockTransport(handle)


async def tokenize(transport: httpx.MockTransport, text: str, gguf: str | None = None) -> list[int]:
    async with httpx.AsyncClient(transport=transport) as client:
        return await LlamaCppBackend(client, ["http://llama:8080"], gguf=gguf).tokenize([(text, False)])


async def test_vocabulary_from_the_file_props_reports(tmp_path: Path) -> None:
    write(tmp_path / "m.gguf")
    calls: list[str] = []
    ids = await tokenize(server(str(tmp_path / "m.gguf"), calls), "a <b> <think>")
    assert 4 not in ids  # the added token is split ...
    assert 10 in ids  # ... an ordinary token shaped like a tag is not
    assert calls[0] == "a <b> <think>" and len(calls) == 3  # "a <", "b> <think>" after the first


async def test_configured_gguf_wins(tmp_path: Path) -> None:
    write(tmp_path / "m.gguf")
    ids = await tokenize(server("/nowhere/else.gguf", []), "<b><think>", gguf=str(tmp_path / "m.gguf"))
    assert 4 not in ids and 10 in ids


async def test_unreadable_model_path_falls_back_to_shapes(tmp_path: Path) -> None:
    ids = await tokenize(server(str(tmp_path / "absent.gguf"), []), "<b><think>")
    assert 4 not in ids and 10 not in ids  # both look like tags


async def test_unreadable_configured_gguf_is_an_upstream_error(tmp_path: Path) -> None:
    (tmp_path / "bad.gguf").write_bytes(b"GGUF\x03\0\0\0")
    with pytest.raises(UpstreamError, match="vocabulary"):
        await tokenize(server("", []), "hi", gguf=str(tmp_path / "bad.gguf"))


async def test_decided_once(tmp_path: Path) -> None:
    write(tmp_path / "m.gguf")
    seen: list[str] = []
    transport = server(str(tmp_path / "m.gguf"), seen)
    props_calls = 0
    inner = transport.handler  # type: ignore[attr-defined]

    def counting(request: httpx.Request) -> httpx.Response:
        nonlocal props_calls
        props_calls += request.url.path == "/props"
        return inner(request)  # type: ignore[no-any-return]

    async with httpx.AsyncClient(transport=httpx.MockTransport(counting)) as client:
        backend = LlamaCppBackend(client, ["http://llama:8080"])
        for _ in range(3):
            await backend.tokenize([("x", False), ("y", False)])
    assert props_calls == 1
