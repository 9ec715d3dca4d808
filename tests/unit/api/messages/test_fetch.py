"""``url`` sources of ``document`` and ``image`` blocks, fetched from a real HTTP server on
loopback under ``[media] allowed_urls``: the document is read by the hardened reader, the image
reaches a seeing llama.cpp; a URL outside the list, a host name resolving to a private address,
a redirect, an error status, a body past the limit and a slow server are Anthropic 400s, and
nothing reaches the model."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from typing import Any

import pytest

from app.cli.conformance.responses import HEART_PNG
from app.config import GatewayConfig
from app.formats.harmony.vocab import harmony_encoding
from tests.support.anthropic_sdk import clients
from tests.support.fake_llamacpp import FakeLlamaCpp
from tests.support.fake_vision_llamacpp import FakeVisionLlamaCpp
from tests.support.gateway import MODEL, config
from tests.support.http_thread import Quiet, serving
from tests.support.pdf import make_pdf

PDF = make_pdf("Fetched walrus memo")
PNG = base64.b64decode(HEART_PNG)
FINAL = "<|channel|>final<|message|>Seen.<|return|>"
VISION = {"prompt_format": "template",
          "template": {"builtin": "gemma3", "bos_token": "<bos>", "eos_token": "<eos>"}}


class _Media(Quiet):
    def do_GET(self) -> None:
        routes: dict[str, tuple[int, str, bytes]] = {
            "/media/memo.pdf": (200, "application/pdf", PDF),
            "/media/heart.png": (200, "image/png", PNG),
            "/media/notes.txt": (200, "text/plain; charset=utf-8", b"Plain fetched notes."),
            "/media/big.txt": (200, "text/plain", b"x" * (10 * 1024 * 1024 + 1)),
            "/media/gone": (404, "text/plain", b"no"),
            "/secret/key.txt": (200, "text/plain", b"do not leak"),
        }
        if self.path == "/media/redirect":
            self.reply(302, "text/plain", b"", location="/secret/key.txt")
            return
        if self.path == "/media/slow":
            time.sleep(1.5)
        self.reply(*routes.get(self.path, (404, "text/plain", b"")))


@pytest.fixture(scope="module")
def media() -> Iterator[str]:
    with serving(_Media) as url:
        yield url


def _config(allowed: list[str], **model: Any) -> GatewayConfig:
    data = config(**model).model_dump()
    data["media"] = {"allowed_urls": allowed, "fetch_timeout": 1.0}
    return GatewayConfig.model_validate(data)


def _doc(url: str, **extra: Any) -> list[Any]:
    return [{"role": "user", "content": [{"type": "document", "source": {"type": "url", "url": url},
                                          **extra}, {"type": "text", "text": "Summarize."}]}]


async def test_url_documents_are_fetched_and_read(media: str) -> None:
    fake = FakeLlamaCpp(FINAL)
    async with clients(fake.transport(), _config([f"{media}/media/"])) as c:
        await c.sdk.messages.create(model=MODEL, max_tokens=50, messages=_doc(f"{media}/media/memo.pdf"))
        pdf_prompt = harmony_encoding().decode(fake.requests[-1]["prompt"])
        await c.sdk.messages.create(model=MODEL, max_tokens=50,
                                    messages=_doc(f"{media}/media/notes.txt", title="Notes"))
        text_prompt = harmony_encoding().decode(fake.requests[-1]["prompt"])
    assert "<file name='memo.pdf' type='application/pdf, 1 page'>" in pdf_prompt
    assert "Fetched walrus memo" in pdf_prompt
    assert "<file name='Notes' type='text/plain'>\nPlain fetched notes.\n</file>" in text_prompt


async def test_a_url_image_is_fetched_and_seen(media: str) -> None:
    fake = FakeVisionLlamaCpp(["A heart."])
    image = {"type": "image", "source": {"type": "url", "url": f"{media}/media/heart.png"}}
    messages: Any = [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, image]}]
    async with clients(fake.transport(), _config([f"{media}/media/"], **VISION)) as c:
        msg = await c.sdk.messages.create(model=MODEL, max_tokens=50, messages=messages)
    assert msg.content[0].type == "text" and msg.content[0].model_dump()["text"] == "A heart."
    assert fake.prompts()[0]["multimodal_data"] == [HEART_PNG]


@pytest.mark.parametrize(("path", "allowed", "says"), [
    ("/media/memo.pdf", None, "allows none"),
    ("/secret/key.txt", "/media/", "not under"),
    ("/media/../secret/key.txt", "/media/", "not under"),
    ("/media/redirect", "/media/", "redirect"),
    ("/media/gone", "/media/", "HTTP 404"),
    ("/media/big.txt", "/media/", "more than 10 MiB"),
    ("/media/slow", "/media/", "within 1 s"),
], ids=["none-allowed", "outside", "dot-segments", "redirect", "404", "too-big", "slow"])
async def test_refused_urls_are_400s_before_the_model(media: str, path: str, allowed: str | None,
                                                      says: str) -> None:
    fake = FakeLlamaCpp(FINAL)
    async with clients(fake.transport(), _config([media + allowed] if allowed else [])) as c:
        r = await c.http.post("/v1/messages", json={"model": MODEL, "max_tokens": 50,
                                                    "messages": _doc(media + path)})
    body = r.json()
    assert r.status_code == 400 and body["error"]["type"] == "invalid_request_error", body
    assert says in body["error"]["message"] and "do not leak" not in r.text and not fake.requests


async def test_a_name_that_resolves_to_a_private_address_is_refused(media: str) -> None:
    port = media.rsplit(":", 1)[1]
    named = f"http://localhost:{port}"
    fake = FakeLlamaCpp(FINAL)
    async with clients(fake.transport(), _config([f"{named}/media/"])) as c:
        r = await c.http.post("/v1/messages", json={"model": MODEL, "max_tokens": 50,
                                                    "messages": _doc(f"{named}/media/memo.pdf")})
    assert r.status_code == 400 and "non-public address" in r.json()["error"]["message"]
    assert not fake.requests
