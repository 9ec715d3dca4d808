"""``file_id`` inputs on a fake upstream: a file uploaded through ``/v1/files`` reaches the
prompt as its text (``input_file`` in /v1/responses and conversation items, ``{"type": "file"}``
in /v1/chat/completions, a PDF read by the file worker) or as its image (``input_image``);
another key's file or a missing one is a 404 naming the part's ``file_id``, never a 500."""

from __future__ import annotations

import base64
from typing import Any

import httpx

from app.cli.conformance.responses import HEART_PNG
from app.formats.harmony.vocab import harmony_encoding
from tests.support.fake_llamacpp import FakeLlamaCpp
from tests.support.fake_vision_llamacpp import FakeVisionLlamaCpp
from tests.support.gateway import MODEL, config, gateway
from tests.support.pdf import make_pdf
from tests.unit.api.files.test_routes import ALICE, BOB, error, two_keys

ANSWER = "<|channel|>final<|message|>Read it.<|return|>"
SECRET = "The launch code is AZURE-HERON-42."


def prompt(up: FakeLlamaCpp) -> str:
    return str(harmony_encoding().decode(up.requests[-1]["prompt"]))


async def uploaded(c: httpx.AsyncClient, data: bytes, name: str, kind: str = "text/plain",
                   headers: dict[str, str] = ALICE) -> str:
    r = await c.post("/v1/files", headers=headers, data={"purpose": "user_data"},
                     files={"file": (name, data, kind)})
    assert r.status_code == 200, r.text
    return str(r.json()["id"])


def ask(part: dict[str, Any]) -> dict[str, Any]:
    return {"model": MODEL, "input": [{"role": "user", "content": [
        {"type": "input_text", "text": "What does the file say?"}, part]}]}


async def test_responses_input_file_by_id_reaches_the_prompt() -> None:
    up = FakeLlamaCpp(ANSWER)
    async with gateway(up.transport(), two_keys()) as c:
        fid = await uploaded(c, SECRET.encode(), "notes.txt")
        r = await c.post("/v1/responses", headers=ALICE, json=ask({"type": "input_file", "file_id": fid}))
        assert r.status_code == 200, r.text
        assert SECRET in prompt(up) and "notes.txt" in prompt(up)
        pdf = await uploaded(c, make_pdf("Page one says PELICAN-7."), "report.pdf", "application/pdf")
        r = await c.post("/v1/responses", headers=ALICE, json=ask({"type": "input_file", "file_id": pdf}))
        assert r.status_code == 200, r.text
        assert "PELICAN-7" in prompt(up)
        sent = len(up.requests)
        for headers in (BOB, ALICE):  # bob: alice's file is missing to him; then a deleted one
            if headers is ALICE:
                await c.delete(f"/v1/files/{fid}", headers=ALICE)
            r = await c.post("/v1/responses", headers=headers,
                             json=ask({"type": "input_file", "file_id": fid}))
            error(r, 404, "input[0].content[1].file_id")
        assert len(up.requests) == sent  # nothing reached the model


async def test_chat_file_part_by_id_and_inline() -> None:
    up = FakeLlamaCpp(ANSWER)
    async with gateway(up.transport(), two_keys()) as c:
        fid = await uploaded(c, SECRET.encode(), "notes.md", "text/markdown")

        def chat(file: dict[str, Any]) -> dict[str, Any]:
            return {"model": MODEL, "messages": [{"role": "user", "content": [
                {"type": "text", "text": "Summarize."}, {"type": "file", "file": file}]}]}

        r = await c.post("/v1/chat/completions", headers=ALICE, json=chat({"file_id": fid}))
        assert r.status_code == 200, r.text
        assert SECRET in prompt(up)
        inline = base64.b64encode(b"inline OSPREY text").decode()
        r = await c.post("/v1/chat/completions", headers=ALICE,
                         json=chat({"file_data": inline, "filename": "x.txt"}))
        assert r.status_code == 200, r.text
        assert "inline OSPREY text" in prompt(up)
        error(await c.post("/v1/chat/completions", headers=BOB, json=chat({"file_id": fid})), 404,
              "messages[0].content[1].file.file_id")
        error(await c.post("/v1/chat/completions", headers=ALICE, json=chat({"file_id": "file-nope"})),
              404, "messages[0].content[1].file.file_id")
        bin_id = await uploaded(c, b"\x00\x01binary", "blob.bin", "application/octet-stream")
        r = await c.post("/v1/chat/completions", headers=ALICE, json=chat({"file_id": bin_id}))
        assert r.status_code == 400, r.text  # unsupported type: a 400, never a 500


async def test_conversation_items_by_file_id() -> None:
    up = FakeLlamaCpp(ANSWER)
    async with gateway(up.transport(), two_keys()) as c:
        fid = await uploaded(c, SECRET.encode(), "notes.txt")
        item = {"type": "message", "role": "user", "content": [{"type": "input_file", "file_id": fid}]}
        r = await c.post("/v1/conversations", headers=ALICE, json={"items": [item]})
        assert r.status_code == 200, r.text
        conv = r.json()["id"]
        r = await c.post("/v1/responses", headers=ALICE, json={"model": MODEL, "conversation": conv,
                                                               "input": "What is the code?"})
        assert r.status_code == 200, r.text
        assert SECRET in prompt(up)
        r = await c.post(f"/v1/conversations/{conv}/items", headers=BOB, json={"items": [item]})
        assert r.status_code == 404
        other = await c.post("/v1/conversations", headers=BOB, json={"items": [item]})
        error(other, 404, "items[0].content[0].file_id")


async def test_input_image_by_file_id() -> None:
    fake = FakeVisionLlamaCpp(["A heart."])
    cfg = config(prompt_format="template",
                 template={"builtin": "gemma3", "bos_token": "<bos>", "eos_token": "<eos>"})
    async with gateway(fake.transport(), cfg) as c:
        fid = await uploaded(c, base64.b64decode(HEART_PNG), "heart.png", "image/png", headers={})
        r = await c.post("/v1/responses", json=ask({"type": "input_image", "file_id": fid}))
        assert r.status_code == 200, r.text
        assert fake.prompts()[0]["multimodal_data"] == [HEART_PNG]
        text = await uploaded(c, b"not an image", "x.png", "image/png", headers={})
        r = await c.post("/v1/responses", json=ask({"type": "input_image", "file_id": text}))
        assert r.status_code == 400, r.text


async def test_stored_files_read_for_one_request_are_bounded(monkeypatch: Any) -> None:
    from app.items import file_ids

    monkeypatch.setattr(file_ids, "MAX_REQUEST_BYTES", 5000)
    monkeypatch.setattr(file_ids, "MAX_FILE_BYTES", 3000)
    up = FakeLlamaCpp(ANSWER)
    async with gateway(up.transport(), two_keys()) as c:
        fid = await uploaded(c, b"a" * 2000, "a.txt")
        big = await uploaded(c, b"b" * 3001, "b.txt")
        part = {"type": "input_file", "file_id": fid}
        body = {"model": MODEL, "input": [{"role": "user", "content": [part, part]}]}
        assert (await c.post("/v1/responses", headers=ALICE, json=body)).status_code == 200
        body["input"][0]["content"] = [part, part, part]  # 6000 bytes in all: over the 5000
        r = await c.post("/v1/responses", headers=ALICE, json=body)
        error(r, 400, "input[0].content[2].file_id", "unsupported_file")
        assert "in all" in r.json()["error"]["message"]
        r = await c.post("/v1/responses", headers=ALICE, json=ask({"type": "input_file", "file_id": big}))
        error(r, 400, "input[0].content[1].file_id", "unsupported_file")
        assert "larger than" in r.json()["error"]["message"]
