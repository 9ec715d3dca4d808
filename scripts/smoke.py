#!/usr/bin/env python3
"""First-contact smoke test: the README and the Dockerfile, run as a new user would.

Outside the test venv and with the standard library only, on a copy of the working tree:

1. README: the quickstart command (the first ``sh`` block under "## Two commands") in a new
   venv, exactly as written: its install steps, then its ``ocm-gateway serve`` in the
   background; wait for ``/health``; every ``sh`` block and the Python SDK example under
   "## Use it" (the SDK in a venv of its own with only ``openai``); each answer must be 200,
   well formed and non-empty; then SIGTERM and a clean exit.
2. Dockerfile: its ``RUN`` lines that build the venv (``pip install .`` and the vocabulary
   bake) with ``/opt/...`` mapped into a temporary folder; then ``import app.main``,
   ``ocm-gateway --help``, ``ocm-gateway template analyze``, and the image's entrypoint with
   its ``ENV`` and ``docker/gateway.toml``: ``/health``, the image's own HEALTHCHECK command,
   ``/v1/models``, a clean 502 for an unreachable backend, SIGTERM.

Commands are read from README.md and the Dockerfile, never copied here: when they change,
the smoke follows. Prints one timing line per phase; exits non-zero on the first failure.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IGNORE = shutil.ignore_patterns(".venv", ".git", "__pycache__", "*.egg-info", ".pytest_cache",
                                ".mypy_cache", ".ruff_cache", ".hypothesis", "build", "dist")
TIMINGS: list[tuple[str, float]] = []


class SmokeFailure(Exception):
    pass


def check(condition: object, message: str) -> None:
    if not condition:
        raise SmokeFailure(message)


def timed(label: str, start: float) -> None:
    TIMINGS.append((label, time.monotonic() - start))
    print(f"smoke: {label}: {TIMINGS[-1][1]:.1f} s", flush=True)


# --- reading the README and the Dockerfile -----------------------------------------------------

def section(markdown: str, title: str, level: int = 2) -> str:
    """The text under ``## title`` up to the next heading of the same level or higher; with
    ``level=3`` stop at its first subsection too (``#`` lines inside code blocks are not
    headings)."""
    out: list[str] = []
    inside = fenced = False
    for line in markdown.splitlines(keepends=True):
        if line.startswith("```"):
            fenced = not fenced
        heading = not fenced and re.match(r"(#+) ", line)
        if heading and inside and len(heading[1]) <= level:
            break
        if inside:
            out.append(line)
        inside = inside or line.rstrip("\n") == f"## {title}"
    check(inside, f"README.md has no '## {title}' section")
    return "".join(out)


def fenced_blocks(text: str, lang: str) -> list[str]:
    return [m[1] for m in re.finditer(rf"^```{lang}\n(.*?)^```", text, re.M | re.S)]


def dockerfile_build(dockerfile: str, venv: Path, cache: Path) -> tuple[list[str], dict[str, str],
                                                                        list[str], list[str]]:
    """The build stage's RUN commands (``/opt/venv``, ``/opt/ocm-cache`` mapped), the final
    stage's ENV, HEALTHCHECK and ENTRYPOINT commands."""
    text = dockerfile.replace("\\\n", " ")
    stages = re.split(r"^FROM ", text, flags=re.M)[1:]
    check(len(stages) >= 2, "Dockerfile: a multi-stage build expected")
    runs = [line[4:].strip() for line in stages[0].splitlines() if line.startswith("RUN ")]
    check(any("pip install" in r for r in runs), "Dockerfile: no pip install line")
    cache_dir = re.search(r"OCM_GATEWAY_CACHE=(\S+)", stages[-1])
    runs = [r.replace("/opt/venv", str(venv)).replace(cache_dir[1] if cache_dir else "/opt/ocm-cache",
                                                       str(cache)) for r in runs]
    env: dict[str, str] = {}
    for line in stages[-1].splitlines():
        if line.startswith("ENV "):
            for part in shlex.split(line[4:]):
                key, _, value = part.partition("=")
                env[key] = value
    health = re.search(r"^HEALTHCHECK .*?CMD (\[.*\])\s*$", stages[-1], re.M)
    entry = re.search(r"^ENTRYPOINT (\[.*\])\s*$", stages[-1], re.M)
    check(health and entry, "Dockerfile: HEALTHCHECK CMD and ENTRYPOINT (exec form) expected")
    assert health is not None and entry is not None
    return runs, env, json.loads(health[1]), json.loads(entry[1])


# --- processes and HTTP ------------------------------------------------------------------------

def clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment minus anything that would leak the test venv or config."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OCMGW", "VIRTUAL_ENV", "PYTHON", "PIP_")) and k != "OCM_GATEWAY_CACHE"}
    path = [p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p]
    env["PATH"] = os.pathsep.join(path)
    env.update(extra)
    return env


def sh(command: str, cwd: Path, env: dict[str, str], label: str, timeout: float = 900) -> str:
    start = time.monotonic()
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode:
        raise SmokeFailure(f"{label}: exit {proc.returncode}\n$ {command}\n{proc.stdout[-3000:]}"
                           f"\n{proc.stderr[-3000:]}")
    timed(label, start)
    return proc.stdout


def http(method: str, url: str, body: object = None, timeout: float = 60) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def port_free(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


class Server:
    """A gateway process started from a command line; stopped with SIGTERM."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str], log: Path) -> None:
        self.log = log
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=log.open("wb"),
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def wait_healthy(self, base: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            check(self.proc.poll() is None, f"the gateway exited ({self.proc.returncode}):\n{self.tail()}")
            try:
                if http("GET", f"{base}/health", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.25)
        raise SmokeFailure(f"no /health within {timeout} s:\n{self.tail()}")

    def stop(self) -> None:
        """SIGTERM; the gateway must exit 0, promptly, without a traceback."""
        if self.proc.poll() is not None:
            raise SmokeFailure(f"the gateway died early ({self.proc.returncode}):\n{self.tail()}")
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            raise SmokeFailure(f"no exit within 30 s of SIGTERM:\n{self.tail()}") from None
        # uvicorn re-raises the signal once its graceful shutdown is done, so "terminated by
        # SIGTERM" after a complete shutdown is as clean as exit 0.
        check(code in (0, -signal.SIGTERM) and "Application shutdown complete" in self.tail(),
              f"exit status {code} after SIGTERM:\n{self.tail()}")
        check("Traceback" not in self.tail(20000), f"a traceback in the log:\n{self.tail()}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:]


def answer_text(output: str, label: str) -> str:
    """The answer in a curl output: a Chat Completions / Responses body or an SSE stream."""
    output = output.strip()
    check(output, f"{label}: empty output")
    if output.startswith("{"):
        body = json.loads(output)
        check("error" not in body or body["error"] is None, f"{label}: error body {body}")
        if body.get("object") == "chat.completion":  # the answer, or the tool calls it makes
            message = body["choices"][0]["message"]
            calls = [f"{c['function']['name']}({c['function']['arguments']})"
                     for c in message.get("tool_calls") or []]
            return str(message.get("content") or "") + " ".join(calls)
        if body.get("object") == "response":
            return "".join(part.get("text", "") if item["type"] == "message" else ""
                           for item in body["output"] for part in item.get("content") or []) + " ".join(
                f"{item['name']}({item['arguments']})" for item in body["output"]
                if item["type"] == "function_call")
        raise SmokeFailure(f"{label}: unexpected body {output[:300]}")
    lines = [line[6:] for line in output.splitlines() if line.startswith("data: ")]
    check(lines and lines[-1] == "[DONE]", f"{label}: a stream must end with data: [DONE]")
    text = ""
    for raw in lines[:-1]:
        event = json.loads(raw)
        check("error" not in event and event.get("type") not in ("error", "response.failed"),
              f"{label}: error event {raw}")
        text += event.get("delta", "") if event.get("type", "").endswith("output_text.delta") else ""
        for choice in event.get("choices", []):
            text += choice.get("delta", {}).get("content") or ""
    return text


# --- the two phases -----------------------------------------------------------------------------

def readme_phase(work: Path, base_env: dict[str, str]) -> None:
    readme = (work / "README.md").read_text()
    quick = fenced_blocks(section(readme, "Two commands"), "sh")
    check(quick, "README.md: no sh block under '## Two commands'")
    steps = [s.strip() for s in quick[0].strip().split("&&")]
    serve = steps.pop()
    check("ocm-gateway serve" in serve, f"the quickstart must end by starting the gateway: {serve!r}")
    env = clean_env(**base_env)
    sh(" && ".join(steps), work, env, "README quickstart install")
    first_use = section(readme, "Use it", level=3)  # the quickstart's examples, before "### ..."
    curls, pythons = fenced_blocks(first_use, "sh"), fenced_blocks(first_use, "python")
    check(curls and pythons, "README '## Use it' has a curl and a Python example")
    check("8000" in first_use, "README '## Use it' talks to port 8000")
    check(port_free(8000), "port 8000 is busy: the README's gateway cannot start")
    start = time.monotonic()
    server = Server(shlex.split(serve), work, env, work / "quickstart.log")
    try:
        server.wait_healthy("http://127.0.0.1:8000", timeout=300)
        timed("README quickstart: model load to /health", start)
        for i, command in enumerate(curls):
            text = answer_text(sh(command, work, env, f"README curl example {i + 1} (first answer)"),
                               f"curl example {i + 1}")
            check(text.strip(), f"curl example {i + 1}: the answer is empty")
            print(f"smoke:   answer: {text.strip()[:120]!r}")
        sdk = work / "sdk-venv"
        sh(f"{shlex.quote(sys.executable)} -m venv {sdk} && {sdk}/bin/pip install --quiet openai",
           work, env, "SDK venv (openai only)")
        for i, code in enumerate(pythons):
            (work / f"example{i}.py").write_text(code)
            out = sh(f"{sdk}/bin/python example{i}.py", work, env, f"README Python example {i + 1}")
            check(out.strip(), f"Python example {i + 1} printed nothing")
            print(f"smoke:   answer: {out.strip()[:120]!r}")
        start = time.monotonic()
        server.stop()
        timed("README quickstart: SIGTERM to clean exit", start)
    finally:
        server.kill()


def docker_phase(work: Path, base_env: dict[str, str]) -> None:
    venv, cache = work / "opt-venv", work / "opt-cache"
    runs, image_env, health, entry = dockerfile_build((work / "Dockerfile").read_text(), venv, cache)
    env = clean_env(**base_env)
    sh(" && ".join(runs), work, env, "Dockerfile install line (pip install . + vocabulary)")
    bin_ = venv / "bin"
    sh(f"{bin_}/python -c 'import app.main'", work, env, "plain install: import app.main")
    sh(f"{bin_}/ocm-gateway --help", work, env, "plain install: ocm-gateway --help")
    out = sh(f"{bin_}/ocm-gateway template analyze tests/fixtures/templates/Qwen3-Coder.jinja", work, env,
             "plain install: ocm-gateway template analyze")
    check("tools.format" in out, "template analyze printed no analysis")
    image_env.update({"PATH": f"{bin_}:{env['PATH']}", "OCM_GATEWAY_CACHE": str(cache),
                      "OCMGW_CONFIG": str(work / "docker" / "gateway.toml"), "OCMGW_HOST": "127.0.0.1",
                      "HOME": str(work / "home"), "OCMGW__store__path": str(work / "responses.sqlite3")})
    for name in ("llamacpp", "vllm", "ollama"):  # no backend services here: unreachable, not unknown
        image_env[f"OCMGW__models__gpt_oss_20b{'' if name == 'llamacpp' else '_' + name}__base_urls"] = \
            '["http://127.0.0.1:9"]'
    check(port_free(int(image_env.get("OCMGW_PORT", "8000"))), "the image's port is busy")
    run_env = {**env, **image_env}
    start = time.monotonic()
    (work / "home").mkdir()
    server = Server(entry, work / "home", run_env, work / "image.log")
    try:
        base = f"http://127.0.0.1:{image_env.get('OCMGW_PORT', '8000')}"
        server.wait_healthy(base, timeout=60)
        timed("image entrypoint to /health", start)
        check(subprocess.run([str(bin_ / health[0]), *health[1:]], env=run_env, timeout=10).returncode == 0,
              "the image's HEALTHCHECK command failed")
        status, body = http("GET", f"{base}/v1/models")
        ids = sorted(m["id"] for m in json.loads(body)["data"])
        check(status == 200 and len(ids) == 3, f"/v1/models: {status} {ids}")
        status, body = http("POST", f"{base}/v1/chat/completions",
                            {"model": ids[0], "messages": [{"role": "user", "content": "hi"}]})
        error = json.loads(body).get("error") or {}
        check(status == 502 and error.get("message") and "type" in error,
              f"unreachable backend: expected a 502 error body, got {status} {body[:300]!r}")
        server.stop()
    finally:
        server.kill()


def main() -> int:
    only = sys.argv[1:] or ["readme", "docker"]
    with tempfile.TemporaryDirectory(prefix="ocm-smoke-") as tmp:
        work = Path(tmp) / "ocm-gateway"
        shutil.copytree(ROOT, work, ignore=IGNORE)
        # A user's own data folders, not the developer's (the pip cache stays shared).
        base_env = {"XDG_DATA_HOME": str(Path(tmp) / "data")}
        try:
            if "readme" in only:
                readme_phase(work, base_env)
            if "docker" in only:
                docker_phase(work, base_env)
        except (SmokeFailure, subprocess.TimeoutExpired, json.JSONDecodeError, KeyError) as exc:
            print(f"smoke: FAILED: {exc}", file=sys.stderr)
            return 1
    print("smoke: OK " + ", ".join(f"{label} {s:.1f}s" for label, s in TIMINGS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
