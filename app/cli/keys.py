"""``ocm-gateway keys create|list|show|update|revoke|rotate``: API keys in the gateway's store.

Works on the store the config names (``--config`` / ``OCMGW_CONFIG``: the SQLite file at
``[store] path``, or PostgreSQL at ``[store] url``), so it needs no running gateway and no
admin key; running gateways see a change within ``[auth] key_cache_seconds``.  The same
functions back ``/admin/keys`` (:mod:`app.api.admin.keys`).  A new or rotated secret is
printed once.

Exit codes: 0 done, 1 the store refused (no such key, ...), 2 a bad option (out of bounds,
malformed): the same bounds as ``/admin/keys``, named by the option.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import sys
import time
from typing import Any

import orjson
from pydantic import ValidationError

from app.api.admin.keys import (
    KeyCreate,
    KeyFields,
    create_key,
    revoke_key,
    rotate_key,
    update_key,
    view,
)
from app.cli.errors import config_problem
from app.config import MAX_EXPIRES_AT, load_config
from app.core.errors import GatewayError
from app.stores import open_stores

DESCRIPTION = """\
Create, list, show, update, revoke and rotate API keys in the gateway's store (the SQLite
file or PostgreSQL database the config names). No running gateway or admin key is needed;
running gateways see a change within [auth] key_cache_seconds. A new or rotated secret is
printed once.

exit status: 0 done, 1 the store refused (no such key, ...), 2 a bad option.

examples:
  ocm-gateway keys create team-a --config gateway.toml --rpm 60 --models gpt-oss-20b
  ocm-gateway keys list --config gateway.toml"""


def _common(p: argparse.ArgumentParser, default: Any) -> None:
    """--config and --json, accepted before and after the action (an action's copy defaults to
    SUPPRESS so it does not clobber the one given before it)."""
    p.add_argument("--config", metavar="FILE", default=default,
                   help="gateway config file (default: $OCMGW_CONFIG)")
    p.add_argument("--json", action="store_true", default=default, help="print JSON")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options and actions of ``ocm-gateway keys`` (on ``parser``, from the CLI's tree)."""
    _common(parser, None)
    parser.set_defaults(json=False)
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    def action(name: str, text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        _common(p, argparse.SUPPRESS)
        return p

    def limits(p: argparse.ArgumentParser) -> None:
        p.add_argument("--owner", help="owner or team")
        p.add_argument("--models", help="comma-separated model allow-list (default: every model)")
        p.add_argument("--rpm", type=int, help="requests per minute")
        p.add_argument("--tpm", type=int, help="tokens per minute")
        p.add_argument("--concurrency", type=int, help="generations in flight")
        p.add_argument("--budget-tokens", type=int, help="token budget per period")
        p.add_argument("--budget-cost", type=float, help="cost budget per period (with --price)")
        p.add_argument("--budget-period", choices=["day", "month", "total"], default="month",
                       help="the budget's period (default month)")
        p.add_argument("--price", action="append", default=[], metavar="MODEL=IN,OUT",
                       help="price per million input, output tokens of a model (repeatable)")
        p.add_argument("--expires-days", type=float, help="expires this many days from now")
        p.add_argument("--meta", action="append", default=[], metavar="K=V", help="metadata (repeatable)")

    create = action("create", "make a key (prints its secret, once)")
    create.add_argument("name", help="the key's name (for people: a team, an app)")
    limits(create)
    action("list", "list keys")
    for name, text in (("show", "show a key"), ("revoke", "revoke a key"),
                       ("rotate", "give a key a new secret (prints it, once)")):
        action(name, text).add_argument("key_id", help="the key's id (key_..., see 'keys list')")
    update = action("update", "change a key's name, limits, budget, expiry, metadata")
    update.add_argument("key_id", help="the key's id (key_..., see 'keys list')")
    update.add_argument("--name")
    limits(update)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ocm-gateway keys", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return parser


# The API's fields as the options that set them (for messages).
OPTIONS = {"requests_per_minute": "--rpm", "tokens_per_minute": "--tpm", "max_concurrent": "--concurrency",
           "budget.tokens": "--budget-tokens", "budget.cost": "--budget-cost",
           "budget.period": "--budget-period", "prices": "--price", "expires_at": "--expires-days",
           "metadata": "--meta", "models": "--models", "owner": "--owner", "name": "name"}


class BadOption(Exception):
    """An option out of bounds or malformed: exit code 2, the message names the option."""


def _price(spec: str) -> dict[str, float]:
    model, sep, pair = spec.partition("=")
    inp, _, out = pair.partition(",")
    with contextlib.suppress(ValueError):
        if model and sep:
            return {"input": float(inp or 0), "output": float(out or 0)}
    raise BadOption(f"--price {spec!r}: give MODEL=IN,OUT (prices per million tokens)")


def _expires_at(days: float) -> int:
    at = time.time() + days * 86400 if math.isfinite(days) else math.inf
    if not 0 <= at <= MAX_EXPIRES_AT:
        raise BadOption(f"--expires-days {days:g}: the key must expire between 1970 and the end of "
                        "9999")
    return int(at)


def _body(model: type[KeyFields], fields: dict[str, Any]) -> KeyFields:
    """The options as the API's body, under the API's bounds."""
    try:
        return model.model_validate(fields, strict=False)
    except ValidationError as exc:
        first = exc.errors()[0]
        at = ".".join(str(part) for part in first["loc"])
        option = next((o for f, o in OPTIONS.items() if at == f or at.startswith(f + ".")), at)
        shown = repr(first.get("input"))
        value = f" {shown[:40]}{'…' if len(shown) > 40 else ''}" \
            if isinstance(first.get("input"), int | float | str) else ""
        raise BadOption(f"{option}{value}: {first['msg']}") from None


def _fields(args: argparse.Namespace) -> dict[str, Any]:
    """The options given, as the API's body (only those given: an update changes just them)."""
    given: dict[str, Any] = {}
    for option, field in (("name", "name"), ("owner", "owner"), ("rpm", "requests_per_minute"),
                          ("tpm", "tokens_per_minute"), ("concurrency", "max_concurrent")):
        if getattr(args, option, None) is not None:
            given[field] = getattr(args, option)
    if args.models is not None:
        given["models"] = [m.strip() for m in args.models.split(",") if m.strip()] or None
    if args.budget_tokens is not None or args.budget_cost is not None:
        given["budget"] = {"period": args.budget_period, "tokens": args.budget_tokens,
                           "cost": args.budget_cost}
    if args.price:
        given["prices"] = {spec.partition("=")[0]: _price(spec) for spec in args.price}
    if args.expires_days is not None:
        given["expires_at"] = _expires_at(args.expires_days)
    if args.meta:
        given["metadata"] = dict(m.partition("=")[::2] for m in args.meta)
    return given


def _line(key: dict[str, Any]) -> str:
    limits = ", ".join(f"{label} {key[f]}" for f, label in (
        ("requests_per_minute", "rpm"), ("tokens_per_minute", "tpm"), ("max_concurrent", "concurrent"))
        if key.get(f))
    budget = key.get("budget")
    spend = f"budget {budget.get('tokens') or budget.get('cost')}/{budget['period']}" if budget else ""
    return "  ".join(p for p in (key["id"], key["hint"], key["status"], key["name"], key.get("owner") or "",
                                 limits, spend) if p)


async def _run(args: argparse.Namespace) -> int:
    body: KeyFields | None = None
    if args.action == "create":
        body = _body(KeyCreate, {"name": args.name, **_fields(args)})
    elif args.action == "update":
        body = _body(KeyFields, _fields(args))
    try:
        cfg = load_config(args.config)
    except OSError as exc:
        raise BadOption(config_problem(args.config, exc)) from None
    stores = await open_stores(cfg.store.path, cfg.store.url)
    store = stores.accounts
    try:
        secret = None
        if args.action == "create":
            assert isinstance(body, KeyCreate)
            shown, secret = await create_key(store, body)
        elif args.action == "list":
            keys = [view(r) for r in await store.list_keys()]
            print(orjson.dumps(keys).decode() if args.json else "\n".join(_line(k) for k in keys))
            return 0
        elif args.action == "show":
            record = await store.get_key(args.key_id)
            if record is None:
                print(f"No API key with id {args.key_id!r}.", file=sys.stderr)
                return 1
            shown = view(record)
        elif args.action == "update":
            assert body is not None
            shown = await update_key(store, args.key_id, body)
        elif args.action == "revoke":
            shown = await revoke_key(store, args.key_id)
        else:
            shown, secret, _ = await rotate_key(store, args.key_id)
    finally:
        await stores.close()
    if args.json:
        print(orjson.dumps({**shown, **({"secret": secret} if secret else {})}).decode())
    else:
        print(_line(shown))
        if secret:
            print(f"secret (shown once): {secret}")
    return 0


def run(argv: list[str]) -> int:
    return execute(_parser().parse_args(argv))


def execute(args: argparse.Namespace) -> int:
    """Run the parsed ``keys`` command; the exit status."""
    try:
        return asyncio.run(_run(args))
    except BadOption as exc:
        print(f"ocm-gateway keys: {exc}", file=sys.stderr)
        return 2
    except (GatewayError, ValidationError, ValueError) as exc:
        message = exc.message if isinstance(exc, GatewayError) else str(exc)
        print(f"ocm-gateway keys: {message}", file=sys.stderr)
        return 1
