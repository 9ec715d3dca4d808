"""Large context items stored once, by content: what keeps a conversation's image from being
copied into every response that continues it.

A stored response keeps its whole input context (previous input + previous output + new
input), so a 20-turn ``previous_response_id`` chain with a 2 MB image in its first turn, or an
agent whose tool outputs are 50 KB each, would write the image 20 times and the tool outputs
O(turns²) times.  Instead, :func:`split` turns every context item whose JSON is at least
:data:`BLOB_MIN` bytes into a reference ``{"ocm:blob": "<sha-256 of its JSON>"}`` and hands
back the blobs; a store keeps each blob once per owner (the digest is scoped to the owner:
tenants never share a blob, so storing one tells nothing about another tenant's) and records
which responses reference which blobs.  :func:`join` puts them back on read.

Every store keeps the same rules (``tests/unit/stores/test_contract.py``):

* a response and its blobs are written in one transaction, and read back whole;
* deleting a response deletes the blobs no other response of its owner references, in the same
  transaction (what a user deletes is gone, not left for a later sweep);
* retention (``expire``) deletes the responses' references, then every blob nothing references
  that no write has used for :data:`SWEEP_GRACE` seconds (a write in flight re-marks the blobs it
  uses, so a sweep never removes a blob a response is being stored with).

An item that itself looks like a reference (a dict with the single key ``ocm:blob``: a client
can send one inside an MCP item's schema, say) is always stored as a blob, whatever its size,
so :func:`join` never mistakes it for one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from app.stores.base import StoredResponse

Json = dict[str, Any]
BLOB_MIN = 8192  # bytes of an item's JSON from which it is stored once, by digest
SWEEP_GRACE = 600.0  # seconds an unreferenced blob stays after its last use (retention sweep)
MARK = "ocm:blob"


@dataclass(frozen=True, slots=True)
class Split:
    items: bytes  # the context's JSON array, large items replaced by references
    blobs: dict[str, bytes] = field(default_factory=dict)  # digest -> the item's JSON


def _is_reference(item: Any) -> bool:
    return isinstance(item, dict) and len(item) == 1 and MARK in item


def split(items: list[Json], minimum: int | None = None) -> Split:
    """The context as stored: one JSON array, each item of ``minimum`` (:data:`BLOB_MIN`) bytes
    or more (and every item that looks like a reference) replaced by a reference to its blob."""
    minimum = BLOB_MIN if minimum is None else minimum
    parts: list[bytes] = []
    blobs: dict[str, bytes] = {}
    for item in items:
        raw = orjson.dumps(item)
        if len(raw) >= minimum or _is_reference(item):
            digest = hashlib.sha256(raw).hexdigest()
            blobs[digest] = raw
            raw = b'{"' + MARK.encode() + b'":"' + digest.encode() + b'"}'
        parts.append(raw)
    return Split(b"[" + b",".join(parts) + b"]", blobs)


def references(stored: bytes) -> tuple[list[Any], list[str]]:
    """The stored array parsed, and the digests it references (in order, once each)."""
    items: list[Any] = orjson.loads(stored)
    seen: dict[str, None] = {}
    for item in items:
        if _is_reference(item):
            seen[item[MARK]] = None
    return items, list(seen)


class MissingBlob(LookupError):
    """A stored context references a blob the store does not have (never, if the store keeps
    the rules above)."""


def join(items: list[Any], blobs: Mapping[str, bytes]) -> list[Json]:
    """The context as it was given to :func:`split`."""
    out: list[Json] = []
    for item in items:
        if _is_reference(item):
            raw = blobs.get(item[MARK])
            if raw is None:
                raise MissingBlob(f"The stored context references blob {item[MARK]}, which is missing.")
            item = orjson.loads(raw)
        out.append(item)
    return out


def stored(resource: Json, items: list[Any], found: Mapping[str, bytes],
           updated_at: float) -> StoredResponse | None:
    """The stored response with its context joined, or None when a blob it references is gone:
    blobs go only when no response references them, so the response was deleted between the
    store's two reads (it is read as if the read came after the delete)."""
    try:
        return StoredResponse(resource, join(items, found), updated_at)
    except MissingBlob:
        return None
