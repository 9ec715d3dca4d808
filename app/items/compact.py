"""``POST /v1/responses/compact``: a long transcript → its user messages + one compaction item.

How the gateway compacts (deterministic, no model call, so it cannot invent or lose what was
said): of the context (``previous_response_id``'s input and output, then ``input``)

* every message is kept verbatim (user, system, developer, and the assistant's answers and
  preambles);
* reasoning items are dropped (the conclusions are in the answers; Harmony models drop
  earlier turns' chain of thought from the prompt anyway);
* tool calls and their outputs are dropped, except those of the latest turn (after the last
  user message), so an agent in the middle of a tool loop can continue: function and custom
  tool calls and outputs, and the hosted tools' items (``mcp_call``, an
  ``mcp_approval_request`` waiting for its answer and the answer, ``web_search_call``,
  ``file_search_call``, ``code_interpreter_call``);
* the latest ``mcp_list_tools`` of each MCP server is kept wherever it is (a server is
  listed once per conversation).

The kept transcript is sealed into the compaction item's ``encrypted_content``
(:mod:`app.items.sealing`, bound to the caller's API key).  The visible ``output``
is, as in OpenAI's API, the user messages followed by the compaction item; sending that
``output`` back as ``input`` (plus new items) continues the conversation: the compaction
item expands to the kept transcript in its place, and the user messages sent with it that it
already holds are not repeated (:func:`expand`).
"""

from __future__ import annotations

import time
from typing import Any

from app.core.errors import InvalidRequest
from app.core.ids import random_id
from app.items.sealing import CODE, Sealer

Json = dict[str, Any]
PURPOSE = "compaction"


LATEST_TURN = frozenset({
    "function_call", "function_call_output", "custom_tool_call", "custom_tool_call_output", "mcp_call",
    "mcp_approval_request", "mcp_approval_response", "web_search_call", "file_search_call",
    "code_interpreter_call"})


def kept_items(context: list[Json]) -> list[Json]:
    """The transcript a compaction keeps (see the module docstring)."""
    users = [i for i, item in enumerate(context)
             if item.get("type", "message") == "message" and item.get("role") == "user"]
    last_user = users[-1] if users else -1
    listings = {str(item.get("server_label")): i for i, item in enumerate(context)
                if item.get("type") == "mcp_list_tools"}
    latest_listing = set(listings.values())
    kept: list[Json] = []
    for i, item in enumerate(context):
        kind = item.get("type", "message")
        if kind == "message" or (kind in LATEST_TURN and i > last_user) or i in latest_listing:
            kept.append(item)
    return kept


def compaction_item(kept: list[Json], sealer: Sealer, tenant: str) -> Json:
    return {"id": random_id("cmp_"), "type": "compaction",
            "encrypted_content": sealer.seal_field("items", kept, purpose=PURPOSE, tenant=tenant)}


def resource(context: list[Json], sealer: Sealer, tenant: str) -> Json:
    """The ``CompactResource`` for ``context`` (usage: no model pass, so no tokens)."""
    kept = kept_items(context)
    users = [{**item, "status": item.get("status") or "completed"} for item in kept
             if item.get("type", "message") == "message" and item.get("role") == "user"]
    return {"id": random_id("resp_"), "object": "response.compaction", "created_at": int(time.time()),
            "output": [*users, compaction_item(kept, sealer, tenant)],
            "usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}}}


def open_items(token: object, sealer: Sealer, tenant: str, param: str) -> list[Json]:
    """The transcript sealed in a compaction item (a 400 naming ``param`` if it does not open)."""
    items = sealer.open_field(token, "items", purpose=PURPOSE, tenant=tenant, param=param)
    if not isinstance(items, list) or not all(isinstance(x, dict) for x in items):
        raise InvalidRequest(f"{param} does not hold a compacted transcript.", param=param, code=CODE)
    return items


def _same_message(a: Json, b: Json) -> bool:
    if a.get("type", "message") != "message" or b.get("type", "message") != "message":
        return False
    if a.get("id") and a.get("id") == b.get("id"):
        return True
    return bool(a.get("role") == b.get("role") and _text(a) == _text(b))


def _text(item: Json) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def expand(before: list[Json], kept: list[Json]) -> list[Json]:
    """``before`` (the request's items ahead of the compaction item) without the messages the
    compaction already holds (the same id, or the same role and text: :func:`_same_message`),
    matched through hashed keys, linear in both lists."""
    messages = [k for k in kept if k.get("type", "message") == "message"]
    ids = {k.get("id") for k in messages if k.get("id")}
    texts = {(k.get("role"), _text(k)) for k in messages}
    return [item for item in before if item.get("type", "message") != "message"
            or not ((item.get("id") and item.get("id") in ids) or (item.get("role"), _text(item)) in texts)]
