"""The LiteLLM proxy as a comparison target (``--litellm``), in a virtualenv of its own.

``litellm[proxy]`` (pinned: :data:`REQUIREMENTS`) and matplotlib (for :mod:`.plot`) live in
``benchmarks/.venvs/litellm`` (git-ignored), created on demand by ``--litellm`` or by
``python -m benchmarks.overhead.proxy`` (``make bench-litellm-venv``): never a dependency of the
gateway or of its tests.

The proxy runs as ``litellm --config FILE --host 127.0.0.1 --port P --num_workers 1`` with a
generated config: model ``chat-bench`` = ``openai/tiny`` at the fake's OpenAI-compatible chat
endpoint, so the gateway's passthrough request goes through it unchanged; no master key, no
database, no callbacks, telemetry and message logging off, no spend or error logs
(``general_settings``), ``LITELLM_LOG=ERROR``, and the bundled model cost map (no fetch at start).
uvicorn's access log stays on (one line per request, as the gateway's own JSON access log).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from benchmarks.overhead.processes import Fake, free_port, stop, wait_ready
from benchmarks.overhead.targets import CHAT_MODEL, UPSTREAM_CHAT_MODEL
from benchmarks.overhead.trees import ROOT

VENV = ROOT / "benchmarks" / ".venvs" / "litellm"
REQUIREMENTS = ("litellm[proxy]==1.102.4", "matplotlib")
# the LiteLLM environment: its settings for this run, and none of the caller's database / cloud
ENV = {"LITELLM_LOG": "ERROR", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "NUM_WORKERS": "1"}
DROPPED_ENV = ("DATABASE_URL", "REDIS_", "LITELLM_", "OPENAI_", "OTEL_", "PROMETHEUS_")


def venv_python() -> Path:
    return VENV / "bin" / "python"


def ensure_venv() -> Path:
    """The side virtualenv's Python, after creating it and installing :data:`REQUIREMENTS` if
    it lacks the ``litellm`` command."""
    if not (VENV / "bin" / "litellm").exists():
        VENV.parent.mkdir(parents=True, exist_ok=True)
        (VENV.parent / ".gitignore").write_text("# side virtualenvs of the benchmarks\n*\n")
        print(f"creating {VENV} with {' '.join(REQUIREMENTS)} (once)", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
        subprocess.run([str(venv_python()), "-m", "pip", "install", "--quiet", *REQUIREMENTS],
                       check=True)
    return venv_python()


def version() -> str:
    out = subprocess.run([str(venv_python()), "-c", "import importlib.metadata as m; "
                          "print(m.version('litellm'), m.version('uvicorn'))"],
                         capture_output=True, text=True, check=True).stdout.split()
    return f"litellm {out[0]} (uvicorn {out[1]})"


def litellm_config(fake: Fake) -> str:
    return f"""\
# written by python -m benchmarks.overhead --litellm
model_list:
  - model_name: {CHAT_MODEL}
    litellm_params:
      model: openai/{UPSTREAM_CHAT_MODEL}
      api_base: {fake.urls['openai']}/v1
      api_key: unused
litellm_settings:
  telemetry: false
  set_verbose: false
  json_logs: false
  turn_off_message_logging: true
  request_timeout: 60
general_settings:
  disable_spend_logs: true
  disable_error_logs: true
"""


@dataclass
class Proxy:
    process: subprocess.Popen[bytes]
    url: str
    log: Path
    config: str
    version: str


@contextlib.contextmanager
def start_litellm(fake: Fake, workdir: Path) -> Iterator[Proxy]:
    """The LiteLLM proxy (one uvicorn worker) in front of the fake's OpenAI chat dialect."""
    ensure_venv()
    port = free_port()
    config = litellm_config(fake)
    workdir.mkdir(parents=True, exist_ok=True)
    cfg_path = workdir / "litellm.yaml"
    cfg_path.write_text(config)
    log_path = workdir / "litellm.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(DROPPED_ENV)} | ENV
    cmd = [str(VENV / "bin" / "litellm"), "--config", str(cfg_path), "--host", "127.0.0.1",
           "--port", str(port), "--num_workers", "1"]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, "litellm", log_path, 180, 0.25,
                   lambda: httpx.get(f"{url}/health/readiness", timeout=5).status_code == 200)
        yield Proxy(proc, url, log_path, config, version())
    finally:
        stop(proc, 15)


def main() -> int:
    """``python -m benchmarks.overhead.proxy``: create the side virtualenv, print its version."""
    ensure_venv()
    print(f"{venv_python()}: {version()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
