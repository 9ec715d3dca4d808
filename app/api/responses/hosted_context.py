"""What a response's hosted tools need of its context (previous items + the new input), read
in one pass where the context is built, so that opening the tools never walks the context on
the event loop: :meth:`ResponsesService.create <app.api.responses.service.ResponsesService.create>`
reads it in the worker thread that builds a long conversation (each walk of a 100,000-item
context held the loop several milliseconds, and opening the tools walked it up to five times).

:meth:`HostedContext.of` keeps, in context order:

* the ``mcp_approval_response`` items that approve a call, with their positions (an error
  names ``input[i]``), the ``mcp_approval_request`` items by ``id`` and the
  ``approval_request_id`` of every ``mcp_call`` (what ran already);
* the ``server_label`` of every ``mcp_list_tools`` item without an ``error`` (listed already:
  not listed again);
* the earlier ``web_search_call`` and ``file_search_call`` items (a response's cursors and
  displays go on after theirs: :func:`~app.tools.browser.earlier_cursors`,
  :func:`~app.tools.file_search.earlier_displays`).

Items of any other type, or whose ``type`` is not a string, are passed over.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Json = dict[str, Any]
_KINDS = ("mcp_approval_response", "mcp_approval_request", "mcp_call", "mcp_list_tools",
          "web_search_call", "file_search_call")


@dataclass(frozen=True)
class HostedContext:
    approvals: tuple[tuple[int, Json], ...] = ()  # (position, item) of the approving responses
    requests: Mapping[str, Json] = field(default_factory=dict)  # mcp_approval_request by id
    ran: frozenset[str] = frozenset()  # the approval_request_id of each mcp_call
    listed: frozenset[str] = frozenset()  # server labels listed without an error
    web_calls: tuple[Json, ...] = ()
    file_calls: tuple[Json, ...] = ()

    @classmethod
    def of(cls, context: Sequence[Json]) -> HostedContext:
        """One pass over ``context`` (CPU work in proportion to its length: call it where a long
        context is already off the event loop)."""
        found: dict[str, list[tuple[int, Json]]] = {kind: [] for kind in _KINDS}
        for i, item in enumerate(context):
            kind = item.get("type")
            if isinstance(kind, str) and kind in found:
                found[kind].append((i, item))
        return cls(
            approvals=tuple((i, item) for i, item in found["mcp_approval_response"] if item.get("approve")),
            requests={str(item["id"]): item for _, item in found["mcp_approval_request"] if "id" in item},
            ran=frozenset(str(item.get("approval_request_id")) for _, item in found["mcp_call"]),
            listed=frozenset(str(item.get("server_label")) for _, item in found["mcp_list_tools"]
                             if not item.get("error")),
            web_calls=tuple(item for _, item in found["web_search_call"]),
            file_calls=tuple(item for _, item in found["file_search_call"]))
