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

from dataclasses import dataclass
from typing import Protocol

from app.core.conversation import FunctionTool


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    output: str
    error: str | None = None


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
