"""Integration fixtures: real llama.cpp servers on scripted models, and the real gateway.

The gateway runs as its console script (``ocm-gateway serve``) in a subprocess on
a loopback port, configured with one model per scripted llama.cpp server, so the
tests exercise exactly what a user runs.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.fixtures import llama_final, llama_reasoning, llama_tool  # noqa: F401

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _console_script() -> list[str]:
    exe = Path(sys.executable).with_name("ocm-gateway")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "app.cli"]


@pytest.fixture(scope="session")
def gateway_url(llama_final: str, llama_reasoning: str, llama_tool: str,  # noqa: F811
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("gateway")
    config = tmp / "gateway.toml"
    models = {"scripted-final": llama_final, "scripted-reasoning": llama_reasoning,
              "scripted-tool": llama_tool}
    lines = ["[upstream]", "read_timeout = 60.0", ""]
    for name, url in models.items():
        lines += [f'[models."{name}"]', 'backend = "llamacpp"', f'base_urls = ["{url}"]',
                  "context_window = 4096", f'[models."{name}".harmony]', 'current_date = "2026-11-22"', ""]
    config.write_text("\n".join(lines))
    port = _free_port()
    log = open(tmp / "gateway.log", "wb")  # noqa: SIM115 - closed below
    env = {k: v for k, v in os.environ.items() if not k.startswith("OCMGW")}
    proc = subprocess.Popen([*_console_script(), "serve", "--config", str(config), "--host", "127.0.0.1",
                             "--port", str(port), "--log-level", "warning"],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError("gateway exited:\n" + (tmp / "gateway.log").read_text())
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("gateway did not start:\n" + (tmp / "gateway.log").read_text())
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
