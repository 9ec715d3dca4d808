"""Every number the admin API takes is bounded (issue 35, item 5): a value past its bound is a
400 naming the field, never a 500 (``budget.tokens`` of 2**70 was one: the store could not
encode it) nor a silent change (``Infinity`` was stored as null); a value at its bound is kept
exactly.  The same bounds in ``ocm-gateway keys`` are exit code 2 naming the option."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.cli.main import main
from app.config import MAX_COST, MAX_EXPIRES_AT, MAX_INT, MAX_LIMIT, MAX_PRICE
from tests.support.gateway import gateway
from tests.support.wire import Replay
from tests.unit.api.admin.test_keys import ADMIN_H, admin_config

# field (dotted path in the body) -> (smallest, largest) allowed
INTS = {"requests_per_minute": (1, MAX_LIMIT), "tokens_per_minute": (1, MAX_LIMIT),
        "max_concurrent": (1, MAX_LIMIT), "budget.tokens": (1, MAX_INT),
        "expires_at": (0, MAX_EXPIRES_AT)}
FLOATS = {"budget.cost": (5e-324, MAX_COST), "prices.m.input": (0.0, MAX_PRICE),
          "prices.m.output": (0.0, MAX_PRICE)}
# JSON number literals (as sent), some of which Python's JSON reads as inf / nan
PAST = ["1e400", "-1e400", "Infinity", "-Infinity", "NaN", "1e308"]
BIG = [2**53, 2**63 - 1, 2**63, 2**64, 2**70, -(2**70), -1]


def _body(path: str, literal: str) -> str:
    """``{"name": "b", path: literal}`` as JSON text (the literal as is: ``NaN``, ``1e400``)."""
    inner = literal
    for part in reversed(path.split(".")):
        inner = f'{{"{part}": {inner}}}'
    return '{"name": "b", ' + inner[1:]


def _allowed(path: str, value: float) -> bool:
    low, high = {**INTS, **FLOATS}[path]
    return math.isfinite(value) and low <= value <= high


def _cases() -> list[tuple[str, str]]:
    cases = [(path, str(v)) for path, (low, high) in INTS.items()
             for v in {low - 1, low, high, high + 1, *BIG}]
    cases += [(path, repr(v)) for path, (low, high) in FLOATS.items()
              for v in {low, high, high * (1 + 1e-9), -0.5}]
    cases += [(path, literal) for path in FLOATS for literal in PAST]
    return cases


async def _post(c: httpx.AsyncClient, url: str, text: str) -> httpx.Response:
    return await c.post(url, content=text, headers={**ADMIN_H, "content-type": "application/json"})


async def test_every_numeric_field_is_bounded_on_create_and_update() -> None:
    async with gateway(Replay("03a_completion_tokenids_stream").transport(), admin_config()) as c:
        made = (await c.post("/admin/keys", json={"name": "u"}, headers=ADMIN_H)).json()
        for path, literal in _cases():
            value = float(literal) if literal not in ("Infinity", "-Infinity", "NaN") else math.nan
            update = _body(path, literal).replace('"name": "b", ', "")
            for url, text in (("/admin/keys", _body(path, literal)), (f"/admin/keys/{made['id']}", update)):
                r = await _post(c, url, text)
                where = (path, literal, url)
                if _allowed(path, value):
                    assert r.status_code in (200, 201), (where, r.text)
                    shown: Any = r.json()
                    for part in path.split("."):
                        shown = shown[part]
                    assert shown == (int(literal) if path in INTS else float(literal)), where
                    again = (await c.get(f"/admin/keys/{r.json()['id']}", headers=ADMIN_H)).json()
                    assert again == {k: v for k, v in r.json().items() if k != "secret"}, where
                else:
                    assert r.status_code == 400, (where, r.text)
                    error = r.json()["error"]
                    assert error["param"] == path and error["code"] == "invalid_value", (where, error)
                    assert path in error["message"]


@pytest.mark.parametrize(("query", "param"), [
    ("from=²", "from"), ("to=٣", "to"), ("from=99999999999999999999", "from"),
    ("from=0001-01-01T00:00:00%2B14:00", "from"), ("to=9999-12-31T23:59:59-14:00", "to"),
    ("from=1&to=99999999999", "from"), ("group_by=key,hour,day", "group_by"),
])
async def test_usage_query_numbers_are_bounded(query: str, param: str) -> None:
    async with gateway(Replay("03a_completion_tokenids_stream").transport(), admin_config()) as c:
        r = await c.get(f"/admin/usage?{query}", headers=ADMIN_H)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
        for limit in ("0", "201", "99999999999999999999999", "1e3"):
            r = await c.get(f"/admin/errors?limit={limit}", headers=ADMIN_H)
            assert r.status_code == 400 and r.json()["error"]["param"] == "limit"


@pytest.mark.parametrize(("argv", "option"), [
    (["--budget-tokens", str(2**70)], "--budget-tokens"), (["--budget-tokens", "0"], "--budget-tokens"),
    (["--budget-cost", "inf"], "--budget-cost"), (["--budget-cost", "nan"], "--budget-cost"),
    (["--budget-cost", "1e13"], "--budget-cost"), (["--rpm", "0"], "--rpm"),
    (["--tpm", str(MAX_LIMIT + 1)], "--tpm"), (["--concurrency", str(2**64)], "--concurrency"),
    (["--price", "m=1e999,1"], "--price"), (["--price", "m=1,-1"], "--price"),
    (["--price", "m=x,1"], "--price"), (["--price", "m"], "--price"),
    (["--expires-days", "1e300"], "--expires-days"), (["--expires-days", "inf"], "--expires-days"),
    (["--expires-days", "nan"], "--expires-days"), (["--expires-days=-1e9"], "--expires-days"),
])
@pytest.mark.parametrize("action", ["create", "update"])
def test_cli_bounds_exit_2_naming_the_option(argv: list[str], option: str, action: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(f'[store]\npath = "{tmp_path / "s.sqlite3"}"\n')
    target = ["b"] if action == "create" else ["key_x"]
    assert main(["keys", "--config", str(config), action, *target, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ocm-gateway keys: {option}") and "Traceback" not in err
    assert not (tmp_path / "s.sqlite3").exists()  # refused before the store was opened


def test_cli_takes_every_bound_itself(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(f'[store]\npath = "{tmp_path / "s.sqlite3"}"\n')
    argv = ["--budget-tokens", str(MAX_INT), "--budget-cost", repr(MAX_COST), "--rpm", str(MAX_LIMIT),
            "--tpm", str(MAX_LIMIT), "--concurrency", str(MAX_LIMIT), "--price", f"m={MAX_PRICE!r},0"]
    assert main(["keys", "--config", str(config), "--json", "create", "b", *argv]) == 0
    out = capsys.readouterr().out
    assert str(MAX_INT) in out and '"requests_per_minute":1000000000000' in out


@pytest.mark.parametrize(("field", "value"), [
    ("budget", {"tokens": 2**70}), ("budget", {"tokens": MAX_INT + 1}), ("budget", {"cost": float("inf")}),
    ("requests_per_minute", MAX_LIMIT + 1), ("tokens_per_minute", 0), ("max_concurrent", 2**64),
    ("prices", {"m": {"input": MAX_PRICE * 2}}), ("prices", {"m": {"output": float("nan")}}),
    ("expires_at", MAX_EXPIRES_AT + 1), ("expires_at", -1)])
def test_keys_in_the_config_file_have_the_same_bounds(field: str, value: object) -> None:
    """A key written into the config file is held to the bounds /admin/keys and the CLI keep,
    at load time (a startup error naming the field), not as a 500 on its first request."""
    from pydantic import ValidationError

    from app.config import ApiKey

    key: dict[str, object] = {"name": "k", "sha256": "0" * 64, field: value}
    with pytest.raises(ValidationError) as caught:
        ApiKey.model_validate(key)
    assert field in str(caught.value)
    at_bounds = {"budget": {"tokens": MAX_INT, "cost": MAX_COST}, "requests_per_minute": MAX_LIMIT,
                 "prices": {"m": {"input": MAX_PRICE, "output": 0.0}}, "expires_at": MAX_EXPIRES_AT}
    ApiKey.model_validate({"name": "k", "sha256": "0" * 64, **at_bounds})
