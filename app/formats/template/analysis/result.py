"""What the analysis of a chat template finds: reasoning, content and tool-call modes and markers."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from app.formats.template.analysis.tools import ToolAnalysis
from app.formats.template.env import RenderCaps


class ReasoningMode(StrEnum):
    NONE = "NONE"
    TAG_BASED = "TAG_BASED"
    DELIMITER = "DELIMITER"
    FORCED_OPEN = "FORCED_OPEN"
    FORCED_CLOSED = "FORCED_CLOSED"
    TOOLS_ONLY = "TOOLS_ONLY"


class ContentMode(StrEnum):
    PLAIN = "PLAIN"
    ALWAYS_WRAPPED = "ALWAYS_WRAPPED"
    WRAPPED_WITH_REASONING = "WRAPPED_WITH_REASONING"


@dataclass(frozen=True, slots=True)
class ReasoningAnalysis:
    mode: ReasoningMode = ReasoningMode.NONE
    start: str = ""
    end: str = ""


@dataclass(frozen=True, slots=True)
class ContentAnalysis:
    mode: ContentMode = ContentMode.PLAIN
    start: str = ""
    end: str = ""


@dataclass(frozen=True, slots=True)
class TemplateAnalysis:
    caps: RenderCaps
    reasoning: ReasoningAnalysis
    content: ContentAnalysis
    tools: ToolAnalysis
    turn_end: str = ""  # stripped end-of-turn text: a stop marker when the model writes it
    turn_end_is_eos: bool = False  # the template ends turns with its ``eos_token`` variable
    workarounds: tuple[str, ...] = ()
    preserved: tuple[str, ...] = field(default=())

    def describe(self) -> dict[str, object]:
        """A flat, printable summary (what ``template analyze`` shows)."""
        out: dict[str, object] = {
            "reasoning.mode": str(self.reasoning.mode), "reasoning.start": self.reasoning.start,
            "reasoning.end": self.reasoning.end, "content.mode": str(self.content.mode),
            "content.start": self.content.start, "content.end": self.content.end,
            "turn_end": "{eos_token}" if self.turn_end_is_eos else self.turn_end,
        }
        out.update({f"tools.{k}": v for k, v in self.tools.describe().items()})
        out["caps"] = (f"tools={self.caps.supports_tools} parallel={self.caps.supports_parallel_calls} "
                       f"object_arguments={self.caps.object_arguments} flat_tools={self.caps.flat_tools}")
        out["workarounds"] = ", ".join(self.workarounds) or "-"
        return out
