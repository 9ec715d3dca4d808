"""Explicit post-analysis patches for templates the differential analysis cannot read.

Each workaround is keyed on a distinctive substring of the template source, only fills
in what the analysis left empty, and records its name in ``TemplateAnalysis.workarounds``
(``template analyze`` prints it; every one has a test).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from app.formats.template.analysis.result import ReasoningAnalysis, ReasoningMode, TemplateAnalysis

Workaround = Callable[[str, TemplateAnalysis], TemplateAnalysis | None]


def _think_split(source: str, a: TemplateAnalysis) -> TemplateAnalysis | None:
    """Old Qwen / DeepSeek thinking templates drop reasoning from history with
    ``content.split('</think>')`` and open ``<think>`` in the generation prompt."""
    if "split('</think>')" not in source or a.reasoning.mode is not ReasoningMode.NONE:
        return None
    return replace(a, reasoning=ReasoningAnalysis(ReasoningMode.FORCED_OPEN, "<think>", "</think>"))


WORKAROUNDS: tuple[tuple[str, Workaround], ...] = (
    ("think-split", _think_split),
)


def apply_workarounds(source: str, analysis: TemplateAnalysis) -> TemplateAnalysis:
    for name, fix in WORKAROUNDS:
        patched = fix(source, analysis)
        if patched is not None:
            analysis = replace(patched, workarounds=(*patched.workarounds, name))
    return analysis
