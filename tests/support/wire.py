"""Replay real recorded HTTP exchanges (tests/fixtures/wire) through httpx.MockTransport."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx

WIRE = Path(__file__).resolve().parent.parent / "fixtures" / "wire"


def load(name: str, server: str = "llamacpp") -> dict[str, Any]:
    with open(WIRE / server / f"{name}.json", encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


class RecordedBody(httpx.AsyncByteStream):
    """The recorded chunks, one ``aiter_raw`` piece each; records whether it was closed."""

    def __init__(self, chunks: list[bytes], on_close: Callable[[], None] | None = None) -> None:
        self._chunks = chunks
        self._on_close = on_close

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk

    async def aclose(self) -> None:
        if self._on_close is not None:
            self._on_close()


def recorded_response(record: dict[str, Any], on_close: Callable[[], None] | None = None,
                      ) -> httpx.Response:
    resp = record["response"]
    headers = [(k, v) for k, v in resp["headers"]
               if k.lower() not in ("content-length", "transfer-encoding")]
    chunks = [c["text"].encode("utf-8") for c in resp["chunks"]]
    return httpx.Response(resp["status"], headers=headers, stream=RecordedBody(chunks, on_close))


class Recorder:
    """What a fake upstream was sent: parsed JSON bodies (``{}`` for none), paths, headers; and
    how many of its answers' bodies were closed."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.headers: list[httpx.Headers] = []
        self.closed = 0

    def _closed(self) -> None:
        self.closed += 1

    def _record(self, request: httpx.Request) -> None:
        self.paths.append(request.url.path)
        self.headers.append(request.headers)
        self.requests.append(json.loads(request.content) if request.content else {})

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self)  # type: ignore[arg-type]  # subclasses are callable


class Replay(Recorder):
    """A MockTransport handler answering every request with one recording.

    ``requests`` keeps the parsed JSON bodies the gateway sent, so tests can assert
    on exactly what went upstream (e.g. the prompt token ids).
    """

    def __init__(self, name: str, server: str = "llamacpp") -> None:
        super().__init__()
        self.record = load(name, server)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method != self.record["request"]["method"]:
            return httpx.Response(404)  # e.g. the gateway's discovery GETs next to a POST recording
        self._record(request)
        return recorded_response(self.record, self._closed)
