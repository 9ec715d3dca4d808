"""``ocm-gateway keys create|list|show|update|revoke|rotate``: API keys in the gateway's store.

Works on the store the config names (``--config`` / ``OCMGW_CONFIG``: the SQLite file at
``[store] path``, or PostgreSQL at ``[store] url``), so it needs no running gateway and no
admin key; running gateways see a change within ``[auth] key_cache_seconds``.  The same
functions back ``/admin/keys`` (:mod:`app.api.admin.keys`).  A new or rotated secret is
printed once.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

import orjson
from pydantic import ValidationError

from app.api.admin.keys import KeyCreate, KeyFields, create_key, revoke_key, rotate_key, update_key, view
from app.config import load_config
from app.core.errors import GatewayError
from app.stores import open_stores


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ocm-gateway keys", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", help="gateway config file (default: $OCMGW_CONFIG)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    sub = parser.add_subparsers(dest="action", required=True)

    def limits(p: argparse.ArgumentParser) -> None:
        p.add_argument("--owner", help="owner or team")
        p.add_argument("--models", help="comma-separated model allow-list (default: every model)")
        p.add_argument("--rpm", type=int, help="requests per minute")
        p.add_argument("--tpm", type=int, help="tokens per minute")
        p.add_argument("--concurrency", type=int, help="generations in flight")
        p.add_argument("--budget-tokens", type=int, help="token budget per period")
        p.add_argument("--budget-cost", type=float, help="cost budget per period (with --price)")
        p.add_argument("--budget-period", choices=["day", "month", "total"], default="month")
        p.add_argument("--price", action="append", default=[], metavar="MODEL=IN,OUT",
                       help="price per million input, output tokens of a model (repeatable)")
        p.add_argument("--expires-days", type=float, help="expires this many days from now")
        p.add_argument("--meta", action="append", default=[], metavar="K=V", help="metadata (repeatable)")

    create = sub.add_parser("create", help="make a key (prints its secret, once)")
    create.add_argument("name")
    limits(create)
    sub.add_parser("list", help="list keys")
    for name, text in (("show", "show a key"), ("revoke", "revoke a key"),
                       ("rotate", "give a key a new secret (prints it, once)")):
        sub.add_parser(name, help=text).add_argument("key_id")
    update = sub.add_parser("update", help="change a key's name, limits, budget, expiry, metadata")
    update.add_argument("key_id")
    update.add_argument("--name")
    limits(update)
    return parser


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
        prices = {}
        for spec in args.price:
            model, _, pair = spec.partition("=")
            inp, _, out = pair.partition(",")
            prices[model] = {"input": float(inp or 0), "output": float(out or 0)}
        given["prices"] = prices
    if args.expires_days is not None:
        given["expires_at"] = int(time.time() + args.expires_days * 86400)
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
    cfg = load_config(args.config)
    stores = await open_stores(cfg.store.path, cfg.store.url)
    store = stores.accounts
    try:
        secret = None
        if args.action == "create":
            shown, secret = await create_key(store, KeyCreate.model_validate(
                {"name": args.name, **_fields(args)}, strict=False))
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
            fields = KeyFields.model_validate(_fields(args), strict=False)
            shown = await update_key(store, args.key_id, fields)
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
    args = _parser().parse_args(argv)
    try:
        return asyncio.run(_run(args))
    except (GatewayError, ValidationError, ValueError) as exc:
        message = exc.message if isinstance(exc, GatewayError) else str(exc)
        print(f"ocm-gateway keys: {message}", file=sys.stderr)
        return 1
