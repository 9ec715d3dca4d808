"""Integration fixtures: real llama.cpp servers on scripted models, and the real gateway.

The gateway runs as its console script (``ocm-gateway serve``) in a subprocess on
a loopback port, configured with one model per scripted llama.cpp server, so the
tests exercise exactly what a user runs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.fixtures import llama_final, llama_reasoning, llama_tool  # noqa: F401
from tests.support.process import Running, free_port, healthy_process, launch_env

pytestmark = pytest.mark.integration


def _console_script() -> list[str]:
    exe = Path(sys.executable).with_name("ocm-gateway")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "app.cli.main"]


@contextmanager
def serve_workers(config: Path, workers: int = 2) -> Iterator[Running]:
    """``ocm-gateway serve --workers N`` on ``config`` as a process of its own, once healthy
    (the environment's ``OCMGW_*`` / ``OTEL_*`` left out: the workers find their machine
    services by what ``serve`` itself sets)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OCMGW", "OTEL_"))}
    cmd = [*_console_script(), "serve", "--config", str(config), "--host", "127.0.0.1", "--port",
           str(port), "--workers", str(workers), "--log-level", "warning"]
    with healthy_process(cmd, f"http://127.0.0.1:{port}", timeout=180, env=env) as running:
        yield running


def write_config(path: Path, models: dict[str, str], store: Path) -> Path:
    lines = ["[upstream]", "read_timeout = 60.0", "", "[store]", f'path = "{store}"', ""]
    for name, url in models.items():
        lines += [f'[models."{name}"]', 'backend = "llamacpp"', f'base_urls = ["{url}"]',
                  "context_window = 4096", f'[models."{name}".harmony]', 'current_date = "2026-11-22"', ""]
    path.write_text("\n".join(lines))
    return path


@contextmanager
def run_gateway(config: Path, extra_env: dict[str, str] | None = None) -> Iterator[Running]:
    """``ocm-gateway serve --config CONFIG`` on a free loopback port."""
    port = free_port()
    env = launch_env(("OCMGW", "OTEL_"))  # OCMGW_WORKERS kept: the suite's worker count
    env.update(extra_env or {})
    cmd = [*_console_script(), "serve", "--config", str(config), "--host", "127.0.0.1",
           "--port", str(port), "--log-level", "warning"]
    with healthy_process(cmd, f"http://127.0.0.1:{port}", timeout=60, env=env) as running:
        yield running


@pytest.fixture(scope="session")
def scripted_models(llama_final: str, llama_reasoning: str, llama_tool: str) -> dict[str, str]:  # noqa: F811
    return {"scripted-final": llama_final, "scripted-reasoning": llama_reasoning, "scripted-tool": llama_tool}


@pytest.fixture(scope="session")
def gateway_url(scripted_models: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("gateway")
    config = write_config(tmp / "gateway.toml", scripted_models, tmp / "responses.sqlite3")
    with run_gateway(config) as running:
        yield running.url
