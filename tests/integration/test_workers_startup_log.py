"""``ocm-gateway serve --workers 2``: a start-up warning is logged once for the ``serve``, not
once per worker (app/http/startup_log.py).  No ``[responses] encryption_key``: both workers start
up (each answers /health, found from /proc), and the warning is in the output exactly once (it
was there twice)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import _console_script
from tests.integration.test_workers_limits import two_workers
from tests.support.loopback_upstream import LoopbackUpstream
from tests.support.process import ROOT, Running, free_port, stop

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
SEALING = "encryption_key is not set"


def test_start_up_warnings_are_logged_once_for_two_workers(tmp_path: Path) -> None:
    with LoopbackUpstream(mode="final").running() as url:
        config = tmp_path / "gw.toml"
        config.write_text(f'[store]\npath = "{tmp_path / "r.sqlite3"}"\n'
                          f'[models.m]\nbase_urls = ["{url}"]\n')
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OCMGW", "OTEL_"))}
        out = tmp_path / "serve.log"
        with out.open("wb") as sink:
            proc = subprocess.Popen([*_console_script(), "serve", "--config", str(config), "--host",
                                     "127.0.0.1", "--port", str(port), "--workers", "2"],
                                    stdout=sink, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
            try:
                deadline = time.monotonic() + 180
                while True:
                    assert proc.poll() is None, out.read_text()
                    try:
                        if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1.0).status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    assert time.monotonic() < deadline, out.read_text()
                    time.sleep(0.1)
                two_workers(Running(f"http://127.0.0.1:{port}", proc))  # both have started up
            finally:
                stop(proc)
    text = out.read_text()
    assert text.count(SEALING) == 1, text
