"""``ocm-gateway serve --embedded MODEL.gguf``: one command, a real model, no other server."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from tests.support.fixtures import SCRIPT_FINAL
from tests.support.process import free_port, healthy_process
from tests.support.scripted_gguf import scripted_model

pytestmark = pytest.mark.integration


def test_embedded_llamacpp_serves_a_gguf() -> None:
    model = scripted_model("final", SCRIPT_FINAL)
    port, llama_port = free_port(), free_port()
    exe = Path(sys.executable).with_name("ocm-gateway")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OCMGW")}
    env["OCMGW__store__path"] = ":memory:"
    cmd = [str(exe), "serve", "--embedded", str(model), "--model-name", "tiny", "--ctx-size", "4096",
           "--port", str(port), "--embedded-port", str(llama_port), "--log-level", "warning"]
    with healthy_process(cmd, f"http://127.0.0.1:{port}", timeout=90, env=env) as gw:
        client = OpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0, timeout=60)
        assert [m.id for m in client.models.list().data] == ["tiny"]
        r = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}])
        assert r.choices[0].message.content == "Hello from a scripted tiny model!"
        # The in-process llama.cpp listens where --embedded-port says (loopback only).
        assert httpx.get(f"http://127.0.0.1:{llama_port}/health", timeout=10).status_code == 200
