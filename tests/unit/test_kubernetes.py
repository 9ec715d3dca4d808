"""docker/kubernetes: every manifest valid against Kubernetes' own schemas (kubernetes-validate,
offline, the latest version it ships), and consistent with the gateway: the ConfigMap's
config loads, probes hit real routes, the grace period outlasts the gateway's drain."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import httpx
import kubernetes_validate
import pytest
import yaml

from app.config import GatewayConfig, load_config
from tests.support.gateway import gateway

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = sorted((ROOT / "docker" / "kubernetes").glob("*.yaml"))


def _documents() -> list[dict[str, Any]]:
    return [doc for path in MANIFESTS for doc in yaml.safe_load_all(path.read_text()) if doc]


def test_every_manifest_is_valid_kubernetes() -> None:
    docs = _documents()
    assert {d["kind"] for d in docs} == {"ConfigMap", "Deployment", "Service", "HorizontalPodAutoscaler",
                                         "PodDisruptionBudget", "Secret"}
    version = kubernetes_validate.latest_version()
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


async def test_the_manifests_fit_the_gateway(tmp_path: Path) -> None:
    docs = {d["kind"]: d for d in _documents()}
    toml = docs["ConfigMap"]["data"]["gateway.toml"]
    (tmp_path / "gateway.toml").write_text(toml)
    cfg = load_config(tmp_path / "gateway.toml", env={"OCMGW__store__url": "postgresql://x@db/ocm",
                                                      "OCMGW__responses__encryption_key": "a" * 43})
    assert isinstance(cfg, GatewayConfig) and cfg.redis.url and cfg.store.url
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    local = cfg.model_copy(update={"store": cfg.store.model_copy(update={"url": None, "path": ":memory:"}),
                                   "redis": cfg.redis.model_copy(update={"url": None})})
    async with gateway(httpx.MockTransport(lambda r: httpx.Response(503)), local) as c:
        for probe in ("readinessProbe", "livenessProbe"):  # real routes (a 503 is an answer)
            assert (await c.get(container[probe]["httpGet"]["path"])).status_code in (200, 503)
    assert pod["terminationGracePeriodSeconds"] > tomllib.loads(toml)["shutdown_grace_seconds"]
    assert container["ports"][0]["containerPort"] == cfg.port


async def test_the_replicas_share_the_key_and_the_store_from_the_secret(tmp_path: Path) -> None:
    """Pods as deployed: the ConfigMap's config with the environment the Deployment gives every
    pod (its values from the Secret): one sealing key for all (encrypted reasoning opens on
    another pod), stored chat completions in PostgreSQL; a pod without the key refuses to start."""
    from tests.support.deployed import check_two_replicas, replica_config
    from tests.support.postgres import postgres_server

    docs = {d["kind"]: d for d in _documents()}
    (tmp_path / "gateway.toml").write_text(docs["ConfigMap"]["data"]["gateway.toml"])
    secret = {"postgres-url": "postgresql://x@db/ocm",
              "encryption-key": "c2hhcmVkLWJ5LWV2ZXJ5LXJlcGxpY2EtMzItYnl0ZXM="}
    container = docs["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    env: dict[str, str] = {}
    for var in container["env"]:
        ref = var.get("valueFrom", {}).get("secretKeyRef")
        if ref is not None:
            assert ref["name"] == docs["Secret"]["metadata"]["name"]
            assert ref["key"] in docs["Secret"]["stringData"]
            env[var["name"]] = secret[ref["key"]]
        else:
            env[var["name"]] = var["value"]
    cfg = replica_config(tmp_path / "gateway.toml", env)
    assert cfg.responses.encryption_key == secret["encryption-key"] and cfg.store.url
    with pytest.raises(ValueError, match="encryption_key is required"):
        replica_config(tmp_path / "gateway.toml",
                       {k: v for k, v in env.items() if "encryption" not in k})
    with pytest.raises(ValueError, match="32 bytes"):  # the example Secret's placeholder
        from app.items.sealing import parse_key

        parse_key(docs["Secret"]["stringData"]["encryption-key"])
    with postgres_server() as pg:
        await check_two_replicas(cfg, cfg, pg, tmp_path)
