"""API keys in the store: ``/admin/keys`` (create, list, show, update, revoke, rotate) and the
functions the CLI (``ocm-gateway keys ...``) shares with it.

A secret (``ocm-`` and 40 random URL-safe characters) is returned once, when a key is made or
rotated; the store keeps its SHA-256 digest and a display hint (its first 8 and last 4
characters).  A key's id (``key_...``) is its tenant: what it stores belongs to it, through
rotations.  Revoked keys are kept (their usage stays attributable) and refused.  A change made
here is in force on every worker of this ``serve`` (and, with ``[redis] url``, every replica)
when the call returns (:meth:`app.http.keys.KeyResolver.changed`); one made by the CLI, or
when that channel is down, within ``[auth] key_cache_seconds``.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from app.api.admin.auth import require_admin
from app.config import Cost, Expiry, KeyBudget, Limit, PerMillion, Price, Tokens
from app.core.errors import NotFound
from app.core.ids import random_id
from app.http.keys import KeyResolver
from app.stores.accounts import AccountStore

Json = dict[str, Any]
Name = Annotated[str, StringConstraints(min_length=1, max_length=100, strip_whitespace=True)]
Label = Annotated[str, StringConstraints(max_length=200)]
Meta = Annotated[dict[Annotated[str, StringConstraints(max_length=64)], Label], Field(max_length=16)]

class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # false is not 0, "5" is not 5


class BudgetBody(_Body, KeyBudget):
    tokens: Tokens | None = None
    cost: Cost | None = None


class PriceBody(_Body, Price):
    input: PerMillion = 0.0
    output: PerMillion = 0.0


class KeyFields(_Body):
    """What an operator sets on a key (every field optional on update; ``null`` clears)."""

    name: Name | None = None
    owner: Name | None = None
    models: Annotated[list[Name], Field(max_length=256)] | None = None  # None: every model
    requests_per_minute: Limit | None = None
    tokens_per_minute: Limit | None = None
    max_concurrent: Limit | None = None
    budget: BudgetBody | None = None
    prices: Annotated[dict[Name, PriceBody], Field(max_length=256)] = {}
    expires_at: Expiry | None = None  # Unix time
    metadata: Meta = {}


class KeyCreate(KeyFields):
    name: Name


_SETTABLE = tuple(KeyFields.model_fields)


def new_secret() -> str:
    return "ocm-" + secrets.token_urlsafe(30)


def view(record: Json) -> Json:
    """A record as the API shows it: never the digest, never the secret."""
    now = time.time()
    status: Literal["active", "revoked", "expired"] = (
        "revoked" if record.get("revoked_at") is not None else
        "expired" if record.get("expires_at") is not None and record["expires_at"] <= now else "active")
    shown = {k: v for k, v in record.items() if k != "sha256"}
    return {"object": "api_key", **shown, "status": status}


async def create_key(store: AccountStore, body: KeyCreate) -> tuple[Json, str]:
    """A new key: its record (as :func:`view` shows it) and its secret, shown only now."""
    secret, now = new_secret(), int(time.time())
    record: Json = {"id": random_id("key_"), **body.model_dump(mode="json"),
                    "sha256": hashlib.sha256(secret.encode()).hexdigest(),
                    "hint": f"{secret[:8]}…{secret[-4:]}", "created_at": now, "updated_at": now,
                    "revoked_at": None}
    await store.put_key(record)
    return view(record), secret


async def _existing(store: AccountStore, key_id: str) -> Json:
    record = await store.get_key(key_id)
    if record is None:
        raise NotFound(f"No API key with id {key_id!r}.", param="key_id")
    return record


async def update_key(store: AccountStore, key_id: str, body: KeyFields) -> Json:
    record = await _existing(store, key_id)
    given = body.model_dump(mode="json", include=body.model_fields_set)
    for field in _SETTABLE:
        if field in given:
            record[field] = given[field] if given[field] is not None or field != "name" else record[field]
    record["updated_at"] = int(time.time())
    await store.put_key(record)
    return view(record)


async def revoke_key(store: AccountStore, key_id: str) -> Json:
    record = await _existing(store, key_id)
    if record.get("revoked_at") is None:
        record["revoked_at"] = record["updated_at"] = int(time.time())
        await store.put_key(record)
    return view(record)


async def rotate_key(store: AccountStore, key_id: str) -> tuple[Json, str, str]:
    """A new secret for the key (the old one stops working); returns the view, the new secret
    and the old digest (for the cache to forget)."""
    record = await _existing(store, key_id)
    if record.get("revoked_at") is not None:
        raise NotFound(f"API key {key_id!r} is revoked; create a new one.", param="key_id")
    secret, old = new_secret(), record["sha256"]
    record.update(sha256=hashlib.sha256(secret.encode()).hexdigest(),
                  hint=f"{secret[:8]}…{secret[-4:]}", updated_at=int(time.time()))
    await store.put_key(record)
    return view(record), secret, old


router = APIRouter(prefix="/admin/keys", tags=["admin"], dependencies=[Depends(require_admin)])


def _store(request: Request) -> AccountStore:
    store: AccountStore = request.app.state.accounts
    return store


async def _changed(request: Request, *digests: str) -> None:
    """Forgotten by every worker's (and replica's) key cache before the call returns."""
    resolver: KeyResolver | None = getattr(request.app.state, "key_resolver", None)
    if resolver is not None:
        await resolver.changed(list(digests))


@router.post("", status_code=201)
async def create(request: Request, body: KeyCreate) -> Json:
    shown, secret = await create_key(_store(request), body)
    return {**shown, "secret": secret}


@router.get("")
async def list_keys(request: Request) -> Json:
    return {"object": "list", "data": [view(r) for r in await _store(request).list_keys()]}


@router.get("/{key_id}")
async def show(request: Request, key_id: str) -> Json:
    return view(await _existing(_store(request), key_id))


@router.post("/{key_id}")
async def update(request: Request, key_id: str, body: KeyFields) -> Json:
    shown = await update_key(_store(request), key_id, body)
    await _changed(request, (await _existing(_store(request), key_id))["sha256"])
    return shown


@router.post("/{key_id}/revoke")
async def revoke(request: Request, key_id: str) -> Json:
    shown = await revoke_key(_store(request), key_id)
    await _changed(request, (await _existing(_store(request), key_id))["sha256"])
    return shown


@router.delete("/{key_id}")
async def delete(request: Request, key_id: str) -> Json:
    """Revokes (the record stays, so its usage keeps a name)."""
    return await revoke(request, key_id)


@router.post("/{key_id}/rotate")
async def rotate(request: Request, key_id: str) -> Json:
    shown, secret, old = await rotate_key(_store(request), key_id)
    await _changed(request, old)
    return {**shown, "secret": secret}
