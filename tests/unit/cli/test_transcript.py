"""``transcript validate`` / ``to-json``: the §17 fixtures, §16 examples, the §2 header,
error codes with positions, and the §10 JSON projection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from app.cli.transcript import parse_transcript, parse_yaml_header, run, to_json
from tests.support.paths import FIXTURES

OPENCHATML = FIXTURES / "openchatml"
HEADER = "version: 2.2\nprofiles:\n  harmony:\n    enabled: true\n    require_channels: [final]\n"


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = run(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


VALID = ["c1_legacy_1x.ocml", "c2_channeled_return.ocml", "c3_concurrent_calls.ocml",
         "c4_tool_error.ocml", "c5_literal_start.ocml", "c7_harmony_preamble.ocml",
         "c8_legacy_functions_role.ocml", "spec_16_1_minimal_chat.ocml",
         "spec_16_2_function_call.ocml", "spec_16_3_preamble.ocml",
         "spec_16_4_literal_block.ocml"]


@pytest.mark.parametrize("name", VALID)
def test_valid_fixtures(capsys: pytest.CaptureFixture[str], name: str) -> None:
    code, out, _ = cli(capsys, "validate", str(OPENCHATML / name))
    assert code == 0, out
    assert out.splitlines()[-1].startswith(f"{OPENCHATML / name}: valid OpenChatML ")
    assert "E-" not in out or name == "c4_tool_error.ocml"


def test_17_6_constraint_violation_is_reported_with_its_position(
        capsys: pytest.CaptureFixture[str]) -> None:
    path = OPENCHATML / "c6_constraint_violation.ocml"
    code, out, _ = cli(capsys, "validate", str(path))
    assert code == 1
    assert out.splitlines()[0] == (f"{path}:11:1: E-BODY-CONSTRAINT-VIOLATION: the body is not "
                                   "the JSON its <|constrain|>json declares")
    code, out, err = cli(capsys, "to-json", str(path))
    assert code == 1 and out == "" and "E-BODY-CONSTRAINT-VIOLATION" in err


def test_17_4_tool_error_is_a_note(capsys: pytest.CaptureFixture[str]) -> None:
    path = OPENCHATML / "c4_tool_error.ocml"
    _, out, _ = cli(capsys, "validate", str(path))
    assert f"{path}:12:1: note: tool reply call_id=s1 reports an error: E-TOOL-TIMEOUT" in out


def test_17_1_legacy_is_all_final_and_17_8_legacy_role_is_a_tool(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "to-json", str(OPENCHATML / "c1_legacy_1x.ocml"))
    doc = json.loads(out)
    assert code == 0 and doc["version"] == "1.x"
    assert [(x["role"], x["channel"]) for x in doc["messages"]] == [
        ("system", "final"), ("user", "final"), ("assistant", "final")]
    _, out, _ = cli(capsys, "to-json", str(OPENCHATML / "c8_legacy_functions_role.ocml"))
    reply = json.loads(out)["messages"][2]
    assert reply == {"role": "tool", "channel": "commentary", "name": "functions.lookup_weather",
                     "recipient": "assistant", "content": '{"sunny":true,"temperature":20}',
                     "end": "end"}


def test_to_json_projection_of_calls_preambles_and_literals() -> None:
    t = parse_transcript((OPENCHATML / "c3_concurrent_calls.ocml").read_text(encoding="utf-8"))
    msgs = to_json(t)["messages"]
    assert msgs[1] == {"role": "assistant", "channel": "analysis",
                       "thinking": "Two independent lookups; call both.", "end": "end"}
    assert [x["tool_call"]["id"] for x in msgs[2:4]] == ["call_tokyo", "call_paris"]
    assert [x["call_id"] for x in msgs[4:6]] == ["call_paris", "call_tokyo"]
    assert msgs[6]["end"] == "return"
    t = parse_transcript((OPENCHATML / "c7_harmony_preamble.ocml").read_text(encoding="utf-8"))
    assert to_json(t)["messages"][2]["intent"] == "preamble"
    t = parse_transcript((OPENCHATML / "spec_16_4_literal_block.ocml").read_text(encoding="utf-8"))
    assert to_json(t)["messages"][0]["content"] == (
        "Please print these markers exactly:\n\n<|start|><|channel|><|message|><|end|>\n")


def test_section_2_header_parses_like_yaml() -> None:
    text = (OPENCHATML / "spec_2_document_header.yaml").read_text(encoding="utf-8")
    assert parse_yaml_header(text) == yaml.safe_load(text)
    t = parse_transcript(text + "<|start|>assistant<|message|>hi<|end|>\n")
    assert t.version == "2.2"
    assert [e.code for e in t.errors] == ["E-PARSE-CHANNEL-MISSING"]


@pytest.mark.parametrize(("body", "codes"), [
    ("<|start|>assistant<|message|>hi<|end|>", ["E-PARSE-CHANNEL-MISSING"]),
    ("<|start|>user<|message|>hi<|end|>", []),  # profiles put channels on assistant / tool
    ("<|start|>assistant<|channel|>final<|message|>cut", ["E-STREAM-TRUNCATED"]),
    ("<|start|>assistant<|channel|>nope<|message|>x<|end|>", ["E-PARSE-HEADER"]),
    ("junk<|start|>user<|message|>x<|end|>", ["E-PARSE-HEADER"]),
    ("<|start|>assistant to=functions.f<|channel|>final<|message|>{}<|call|>",
     []),  # a Harmony call without call_id= is accepted (HIP-1): a note and a generated id
    ("<|start|>assistant to=functions.f call_id=a<|channel|>final<|message|>[1]<|call|>",
     ["E-CALL-SCHEMA"]),
    ("<|start|>tool name=functions.f call_id=zz<|channel|>final<|message|>{}<|end|>",
     ["E-PARSE-HEADER"]),  # answers no call
    ("<|start|>tool call_id=a<|channel|>final<|message|>{}<|end|>", ["E-PARSE-HEADER"]),
])
def test_error_codes(body: str, codes: list[str]) -> None:
    assert [e.code for e in parse_transcript(HEADER + body).errors] == codes


def test_positions_are_line_and_column(capsys: pytest.CaptureFixture[str],
                                       tmp_path: Path) -> None:
    path = tmp_path / "t.ocml"
    path.write_text(HEADER + "<|start|>user<|message|>ok<|end|>\n"
                    "  <|start|>assistant<|channel|>final<|message|>x<|end|> stray\n",
                    encoding="utf-8")
    code, out, _ = cli(capsys, "validate", str(path))
    assert code == 1
    assert out.splitlines() == [f"{path}:7:56: E-PARSE-HEADER: text outside a message",
                                f"{path}: invalid (1 error(s))"]


def test_bad_yaml_header_and_usage(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "t.ocml"
    path.write_text("model gpt\n<|start|>user<|message|>ok<|end|>\n", encoding="utf-8")
    code, out, _ = cli(capsys, "validate", str(path))
    assert code == 1 and f"{path}:1:1: E-PARSE-HEADER" in out
    assert cli(capsys, "validate", str(tmp_path / "missing.ocml"))[0] == 2
    assert cli(capsys, "frobnicate", str(path))[0] == 2


def test_validator_edges_versions_headerless_channels_and_harmony_calls() -> None:
    """An unknown major version is an error; channels without a YAML header are not 1.x; a
    Harmony-style call without call_id= is accepted with a generated id and a note (HIP-1)."""
    three = parse_transcript("version: 3.0\n<|start|>user<|message|>hi<|end|>")
    assert [e.code for e in three.errors] == ["E-PARSE-HEADER"] and "3.0" in three.errors[0].message
    bare = parse_transcript("<|start|>assistant<|channel|>final<|message|>hi<|return|>")
    assert bare.errors == [] and bare.version == "2.x" and "YAML header" in bare.notes[0][1]
    assert parse_transcript("<|start|>user<|message|>hi<|end|>").version == "1.x"
    harmony = parse_transcript(
        HEADER + "<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json"
                 "<|message|>{}<|call|>"
                 "<|start|>assistant to=functions.g<|channel|>commentary<|message|>{}<|call|>")
    assert harmony.errors == [] and len(harmony.notes) == 2
    assert [m["tool_call"]["id"] for m in to_json(harmony)["messages"]] == ["call_1", "call_2"]
