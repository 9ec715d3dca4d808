"""Diff splitting, markers, lenient JSON, workarounds and the ``template analyze`` CLI."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from app.cli.template import run
from app.formats.template.analysis.analysis import analyze
from app.formats.template.analysis.diff import (
    diff_split,
    segmentize,
    until_common_prefix,
    until_common_suffix,
)
from app.formats.template.analysis.jsonish import ValueScanner, decode_prefix, loads_lenient
from app.formats.template.analysis.markers import Marker, Status, earliest
from app.formats.template.analysis.result import ReasoningAnalysis, ReasoningMode
from app.formats.template.analysis.workarounds import apply_workarounds
from tests.unit.formats.template.analysis.roundtrip import TEMPLATES


def test_diff_split_moves_cut_markers_out_of_prefix_and_suffix() -> None:
    d = diff_split("<think>x</think>", "<thunk>x</think>")
    assert (d.prefix, d.left, d.right, d.suffix) == ("", "<think>", "<thunk>", "x</think>")
    d = diff_split("<a>X</a>", "<a>YY</a>")
    assert (d.prefix, d.left, d.right, d.suffix) == ("<a>", "X", "YY", "</a>")
    d = diff_split("[TOOL_CALLS]a", "[TOOL_ARGS]a")
    assert d.prefix == "" and d.left == "[TOOL_CALLS]"
    assert until_common_prefix("<fun=a>", "<fun=b>") == ("", "<fun=a>", "<fun=b>")
    assert until_common_suffix("\n</x>", ">\n</x>") == ("", ">", "\n</x>")


def test_segmentize() -> None:
    assert segmentize("a<b>c[D]<e") == [("a", False), ("<b>", True), ("c", False), ("[D]", True),
                                          ("<e", False)]


def test_markers_match_partially_across_whitespace_and_digits() -> None:
    mk = Marker("</arg_key>\n<arg_value>")
    assert mk.match_ws("  </arg_key> <arg_value>x").status is Status.MATCH
    assert mk.match_ws("</arg_key>\n").status is Status.PARTIAL
    assert mk.match_ws("</arg_key>x").status is Status.FAIL
    assert mk.match_ws("</arg_key>\n", final=True).status is Status.FAIL
    digits = Marker(":0<|sep|>", digits=True)
    assert digits.match(":12<|sep|>", 0).end == 10
    assert Marker("<tool_call>").find("text <tool").start == 5  # hold back from here
    got, mk2 = earliest("a <x> b <y>", [Marker("<y>"), Marker("<x>")])
    assert got.start == 2 and mk2 is not None and mk2.text == "<x>"
    assert not Marker("  ")


def test_lenient_json() -> None:
    assert loads_lenient("{'a': 'it\\'s', 'b': True, 'c': None}") == {"a": "it's", "b": True, "c": None}
    assert decode_prefix('xx{"a": [1, "]"]} tail', 2) == ({"a": [1, "]"]}, 17)
    scanner = ValueScanner()
    assert scanner.feed('{"a": "}') == -1 and scanner.feed('"}') == 2
    assert ValueScanner().feed("abc") == -2
    with pytest.raises(ValueError):
        loads_lenient("{nope")


def test_each_workaround_applies_only_when_needed() -> None:
    qwq = (TEMPLATES / "Qwen-QwQ-32B.jinja").read_text()
    r1 = analyze((TEMPLATES / "llama-cpp-deepseek-r1.jinja").read_text())
    assert r1.workarounds == ("think-split",)
    assert (r1.reasoning.mode, r1.reasoning.start, r1.reasoning.end) == (ReasoningMode.FORCED_OPEN, "<think>",
                                                                          "</think>")
    # the analysis of QwQ already found the markers, so the patch leaves it alone
    assert analyze(qwq).workarounds == ()
    blank = replace(analyze(qwq), reasoning=ReasoningAnalysis())
    patched = apply_workarounds(qwq, blank)
    assert patched.reasoning.mode is ReasoningMode.FORCED_OPEN and patched.workarounds == ("think-split",)
    assert apply_workarounds("no split here", blank) == blank


def test_cli(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert run(["analyze", str(TEMPLATES / "GLM-4.6.jinja")]) == 0
    out = capsys.readouterr().out
    assert "reasoning.mode: TAG_BASED\n" in out and 'tools.arg_name_prefix: "<arg_key>"' in out
    assert run([str(TEMPLATES / "Qwen3-Coder.jinja"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tools.format"] == "TAG_WITH_TAGGED"
    assert run([str(tmp_path / "missing.jinja")]) == 2
    assert "cannot read" in capsys.readouterr().err
