"""``ocm-gateway keys``: keys made, listed, updated, rotated and revoked on the store a
gateway uses, seen by that gateway (no running gateway needed for the CLI)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from app.cli.main import main
from tests.support.gateway import MODEL, gateway
from tests.support.wire import Replay
from tests.unit.api.admin.test_keys import CHAT, admin_config, bearer


def _cli(capsys: pytest.CaptureFixture[str], config: Path, *argv: str) -> dict[str, object]:
    assert main(["keys", "--config", str(config), "--json", *argv]) == 0
    out: dict[str, object] = json.loads(capsys.readouterr().out)
    return out


def test_keys_cli_against_a_gateway_on_the_same_store(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "s.sqlite3"
    config = tmp_path / "gateway.toml"
    config.write_text(f'[store]\npath = "{db}"\n')
    made = _cli(capsys, config, "create", "team-a", "--owner", "search", "--models", MODEL, "--rpm", "5",
                "--budget-tokens", "100000", "--budget-period", "day", "--price", f"{MODEL}=1.5,3",
                "--expires-days", "30", "--meta", "ticket=OPS-2")
    secret, key_id = str(made["secret"]), str(made["id"])
    assert made["owner"] == "search" and made["budget"] == {"period": "day", "tokens": 100000, "cost": None}
    assert made["prices"] == {MODEL: {"input": 1.5, "output": 3.0}}
    assert made["metadata"] == {"ticket": "OPS-2"}
    assert main(["keys", "--config", str(config), "list"]) == 0
    listing = capsys.readouterr().out
    assert key_id in listing and "team-a" in listing and secret not in listing
    assert _cli(capsys, config, "update", key_id, "--rpm", "50")["requests_per_minute"] == 50
    cfg = admin_config(db, auth={"key_cache_seconds": 0})

    async def use(secret: str) -> int:
        async with gateway(Replay("03a_completion_tokenids_stream").transport(), cfg) as c:
            return (await c.post("/v1/chat/completions", json=CHAT, headers=bearer(secret))).status_code

    assert asyncio.run(use(secret)) == 200
    rotated = str(_cli(capsys, config, "rotate", key_id)["secret"])
    assert asyncio.run(use(secret)) == 401 and asyncio.run(use(rotated)) == 200
    assert _cli(capsys, config, "revoke", key_id)["status"] == "revoked"
    assert asyncio.run(use(rotated)) == 401
    assert main(["keys", "--config", str(config), "show", "key_nope"]) == 1
    assert main(["keys", "--config", str(config), "create", "x", "--rpm", "0"]) == 2
    assert "greater than or equal to 1" in capsys.readouterr().err
