"""The request's input items as the model will read them, before ingest builds the Conversation.

Three kinds of items carry more than their wire form says; this pass turns each into plain
items, in wire form, which is also what the store keeps (so a ``previous_response_id``
chain never needs the key or the file again):

* a ``reasoning`` item with ``encrypted_content`` (made with ``include:
  ["reasoning.encrypted_content"]``): opened, its chain of thought becomes the item's
  ``reasoning_text`` content (the sealed text wins over any ``content`` sent with it);
* a ``compaction`` item: replaced by the transcript it holds (:mod:`.compact`);
* an ``input_file`` part: replaced by an ``input_text`` part with the file's text
  (:mod:`.files`).

Each resolved item keeps the name of the request parameter it came from (``labels``), so
errors raised later by ingest still point at ``input[i]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.core.errors import InvalidRequest
from app.items import compact, files
from app.items.sealing import CODE, Sealer

Json = dict[str, Any]
REASONING = "reasoning"
INCLUDE = "reasoning.encrypted_content"


@dataclass(frozen=True, slots=True)
class Resolved:
    items: list[Json]
    labels: list[str]  # per item: "previous_response_id" or the input[i] it came from


def seal_reasoning(sealer: Sealer, tenant: str, text: str) -> str:
    return sealer.seal_field("text", text, purpose=REASONING, tenant=tenant)


def open_reasoning(sealer: Sealer, tenant: str, token: object, param: str) -> str:
    text = sealer.open_field(token, "text", purpose=REASONING, tenant=tenant, param=param)
    if not isinstance(text, str):
        raise InvalidRequest(f"{param} does not hold reasoning.", param=param, code=CODE)
    return text


def has_files(items: list[Json]) -> bool:
    return any(isinstance(part, dict) and part.get("type") == "input_file"
               for item in items for key in ("content", "output")
               if isinstance(item.get(key), list) for part in item[key])


def _with_files(item: Json, at: str) -> Json:
    for key in ("content", "output"):
        parts = item.get(key)
        if isinstance(parts, list) and any(isinstance(p, dict) and p.get("type") == "input_file"
                                           for p in parts):
            item = {**item, key: [
                {"type": "input_text", "text": files.extract(p, f"{at}.{key}[{j}]")}
                if isinstance(p, dict) and p.get("type") == "input_file" else p
                for j, p in enumerate(parts)]}
    return item


def resolve(previous: list[Json], new: list[Json], sealer: Sealer, tenant: str) -> Resolved:
    """``previous`` (already resolved when it was stored) + the request's ``new`` input items.
    CPU-bound when there are files (PDF text): call it in a thread then."""
    items: list[Json] = list(previous)
    labels = ["previous_response_id"] * len(previous)
    start = len(items)
    for i, item in enumerate(new):
        at = f"input[{i}]"
        kind = item.get("type", "message")
        if kind == "compaction":
            param = f"{at}.encrypted_content"
            kept = compact.open_items(item.get("encrypted_content"), sealer, tenant, param)
            mine = [(x, label) for x, label in zip(items[start:], labels[start:], strict=True)]
            left = compact.expand([x for x, _ in mine], kept)
            remaining = {id(y) for y in left}  # linear: identity of the items kept
            left_labels = [label for x, label in mine if id(x) in remaining]
            items[start:], labels[start:] = left + kept, left_labels + [at] * len(kept)
            continue
        if kind == "reasoning" and item.get("encrypted_content") is not None:
            text = open_reasoning(sealer, tenant, item["encrypted_content"], f"{at}.encrypted_content")
            item = {**item, "content": [{"type": "reasoning_text", "text": text}]}
        items.append(_with_files(item, at))
        labels.append(at)
    return Resolved(items, labels)
