"""The hosted-tool seam: what :mod:`app.engine.loop` needs from any tool the gateway runs.

Contract (every implementation: MCP servers today; search and the sandbox behind the same
protocol):

* A :class:`Toolbox` belongs to **one response**.  It is opened while the request is planned
  (so a server that cannot be reached is the request's error, before any output) and closed
  exactly once with the response, whatever ends it (:meth:`Toolbox.aclose`); it owns every
  session it opened.
* :attr:`Toolbox.functions` is what the model is shown: :class:`FunctionTool` s whose names
  never collide with the client's functions or another server's tools.
* :meth:`Toolbox.call` runs one call.  A tool's failure never raises: a timeout, an error of
  the tool, arguments that are not JSON, a server that went away are all a
  :class:`ToolOutcome` with ``error`` set, and that text goes back to the model.  Only
  cancellation (client gone, cancel, shutdown) propagates, and it stops the call.
* Outputs are plain text.  The prompt formats render a tool's output as text, so whatever it
  contains (control tokens included) stays inert; outputs are cut to the toolbox's bound.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from app.core.conversation import FunctionTool


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    output: str
    error: str | None = None
    detail: Mapping[str, Any] | None = None  # what the item shows beyond the text (search: sources)


class Toolbox(Protocol):
    functions: tuple[FunctionTool, ...]

    def owns(self, name: str) -> bool:
        """Whether model-facing tool ``name`` is run by this toolbox."""
        ...

    def needs_approval(self, name: str) -> bool:
        """Whether a call of ``name`` waits for the client's approval before it runs."""
        ...

    async def call(self, name: str, arguments: str) -> ToolOutcome: ...

    async def aclose(self) -> None: ...


def clip(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[output truncated: {len(text) - limit} more characters]"


class Toolboxes:
    """Several toolboxes (MCP servers, web search, ...) as one: names are disjoint by
    construction (each toolbox prefixes its own)."""

    def __init__(self, boxes: Sequence[Toolbox]) -> None:
        self._boxes = tuple(boxes)
        self.functions: tuple[FunctionTool, ...] = tuple(f for b in self._boxes for f in b.functions)

    def _box(self, name: str) -> Toolbox:
        return next(b for b in self._boxes if b.owns(name))

    def owns(self, name: str) -> bool:
        return any(b.owns(name) for b in self._boxes)

    def needs_approval(self, name: str) -> bool:
        return self._box(name).needs_approval(name)

    async def call(self, name: str, arguments: str) -> ToolOutcome:
        return await self._box(name).call(name, arguments)

    async def aclose(self) -> None:
        await asyncio.gather(*(b.aclose() for b in self._boxes), return_exceptions=True)
