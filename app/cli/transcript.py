"""``ocm-gateway transcript``: check and convert OpenChatML 2.2 transcripts.

* ``validate FILE`` — parse the YAML document header (§2) and every message frame
  (§6, §15) and report each problem as ``FILE:LINE:COL: CODE: message`` with its §14
  code; tool replies that report an error (``"ok": false``) are listed as notes.  Exit
  status 0 when valid, 1 when not, 2 on a usage or I/O error.
* ``to-json FILE`` — the §10 JSON interchange: one object per message (``role``,
  ``channel``, ``content`` — ``thinking`` for ``analysis`` —, ``intent``, ``tool_call``
  for an outgoing call, ``name`` / ``call_id`` for a tool reply).

A transcript without a YAML header is a 1.x transcript: valid, and read as all-final
(§13).  Channels are required on assistant and tool messages when an enabled profile
lists ``require_channels`` (Harmony keeps system / developer / user messages
channel-less, seed 002 §5.3).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from app.formats.openchatml.header import (
    CALL,
    CHANNEL,
    CONSTRAIN,
    END,
    ENDLITERAL,
    LITERAL,
    MAX_HEADER_CHARS,
    MESSAGE,
    RETURN,
    START,
    TOKEN_TEXT,
    Header,
    Lexer,
    SpecError,
    is_call,
    parse_header,
)


@dataclass(slots=True)
class Frame:
    header: Header
    body: str
    end: str  # "end" | "return" | "call"
    pos: int
    call_id: str | None = None  # the header's, or one generated for a Harmony call (HIP-1)


@dataclass(slots=True)
class Transcript:
    settings: dict[str, Any]
    version: str
    frames: list[Frame] = field(default_factory=list)
    errors: list[SpecError] = field(default_factory=list)
    notes: list[tuple[int, str]] = field(default_factory=list)


# -- the YAML document header (a small, dependency-free subset) -------------------------
def _scalar(raw: str, pos: int) -> Any:
    raw = raw.strip()
    if raw.startswith("[") and raw.endswith("]"):
        inner = raw[1:-1].strip()
        return [_scalar(x, pos) for x in re.findall(r'"[^"]*"|\'[^\']*\'|[^,]+', inner)
                if x.strip()] if inner else []
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
        return json.loads(raw) if raw[0] == '"' else raw[1:-1]
    if raw in ("true", "false"):
        return raw == "true"
    if raw in ("null", "~", ""):
        return None
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            pass
    return raw


def _strip_comment(line: str) -> str:
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line.rstrip()


def parse_yaml_header(text: str, base: int = 0) -> dict[str, Any]:
    """Block mappings, ``- item`` lists, flow lists and scalars: what §2 uses."""
    root: dict[str, Any] = {}
    stack: list[tuple[int, Any]] = [(-1, root)]
    pending: tuple[int, dict[str, Any], str] | None = None  # a 'key:' awaiting its block
    offset = base
    for line in text.split("\n"):
        pos, offset = offset, offset + len(line) + 1
        body = _strip_comment(line)
        if not body.strip() or body.strip() in ("---", "..."):
            continue
        indent = len(body) - len(body.lstrip(" "))
        item = body.strip()
        if pending is not None:
            p_indent, p_map, p_key = pending
            pending = None
            if indent > p_indent:
                p_map[p_key] = [] if item.startswith("- ") else {}
                stack.append((indent, p_map[p_key]))
        while indent < stack[-1][0]:
            stack.pop()
        container = stack[-1][1]
        if indent != stack[-1][0] and stack[-1][0] >= 0:
            raise SpecError("E-PARSE-HEADER", "bad indentation in the YAML header", pos)
        if isinstance(container, list):
            if not item.startswith("- "):
                raise SpecError("E-PARSE-HEADER", "expected '- item' in the YAML header", pos)
            container.append(_scalar(item[2:], pos))
            continue
        key, colon, value = item.partition(":")
        if not colon or not key.strip() or (value and value[0] not in " \t"):
            raise SpecError("E-PARSE-HEADER", f"expected 'key: value', got {item[:40]!r}", pos)
        if value.strip():
            container[key.strip()] = _scalar(value, pos)
        else:
            container[key.strip()] = None
            pending = (indent, container, key.strip())
    return root


# -- frames --------------------------------------------------------------------------
def parse_transcript(text: str) -> Transcript:
    # The header ends at the first frame: a line starting with <|start|> (the header itself
    # may quote the tokens, as in §2's capabilities.tokens).
    found = re.search(r"^[ \t]*" + re.escape(TOKEN_TEXT[START]), text, re.M)
    first = found.start() if found else -1
    head = text if first < 0 else text[:first]
    settings: dict[str, Any] = {}
    errors: list[SpecError] = []
    try:
        settings = parse_yaml_header(head) if head.strip() else {}
    except SpecError as exc:
        errors.append(exc)
    match = re.search(r"^version:\s*[\"']?([0-9][0-9.]*)", head, re.M)
    version = match.group(1) if match else ("1.x" if not head.strip() else "")
    if head.strip() and not errors and not match:
        errors.append(SpecError("E-PARSE-HEADER", "the YAML header has no 'version'", 0))
    elif match and version.split(".")[0] not in ("1", "2"):
        errors.append(SpecError("E-PARSE-HEADER", f"version {version} is not one this validator "
                                "reads (OpenChatML 1.x and 2.x)", match.start()))
    t = Transcript(settings=settings, version=version, errors=errors)
    _frames(t, text[max(first, 0):] if first >= 0 else "", max(first, 0))
    if version == "1.x" and any(f.header.channel is not None or f.header.recipient is not None
                                or f.header.constrain is not None for f in t.frames):
        # Channels, recipients and constraints are 2.x: not a 1.x transcript, but one without
        # the header §2 asks for (the spec's own §16 examples are written so)
        t.version = "2.x"
        t.notes.append((0, "channels, recipients or <|constrain|> are OpenChatML 2.x, and a 2.x "
                           "transcript begins with a YAML header ('version: 2.2', §2)"))
    _check(t)
    return t


def _frames(t: Transcript, text: str, base: int) -> None:
    lexer = Lexer()
    state, pos, body = "between", 0, ""
    start, channel, constrain = "", None, None  # header parts (see parse_header)
    header: Header | None = None
    for piece in lexer.feed(text) + lexer.flush():
        at, kind = piece.pos + base, piece.kind
        if kind == START and state in ("between", "skip"):
            state, pos, start, channel, constrain = "header", at, "", None, None
        elif state == "skip":
            continue
        elif state == "between":
            if kind != "text" or piece.text.strip():
                t.errors.append(SpecError("E-PARSE-HEADER", "text outside a message", at))
                state = "skip"
        elif state == "header":
            if kind == "text" and at + len(piece.text) - pos > MAX_HEADER_CHARS:
                t.errors.append(SpecError("E-PARSE-HEADER", "message header is too long", pos))
                state = "skip"
            elif kind == "text":
                if constrain is not None:
                    constrain += piece.text
                elif channel is not None:
                    channel += piece.text
                else:
                    start += piece.text
            elif kind == CHANNEL and channel is None and constrain is None:
                channel = ""
            elif kind == CONSTRAIN and constrain is None:
                constrain = ""
            elif kind == MESSAGE:
                try:
                    header = parse_header(start, channel, constrain, pos=pos)
                    state, body = "body", ""
                except SpecError as exc:
                    t.errors.append(exc)
                    state = "skip"
            else:
                t.errors.append(SpecError("E-PARSE-HEADER", f"unexpected {piece.text[:20]!r} "
                                          "in a message header", at))
                state = "skip"
        elif kind in (END, RETURN, CALL):
            assert header is not None
            t.frames.append(Frame(header, body, kind, pos))
            state = "between"
        elif kind not in (LITERAL, ENDLITERAL):
            body += piece.text
    if state in ("header", "body"):
        t.errors.append(SpecError("E-STREAM-TRUNCATED", "the transcript ends inside a "
                                  "message (no <|end|>, <|return|> or <|call|>)", pos))


def _required_channels(settings: dict[str, Any]) -> bool:
    profiles = settings.get("profiles")
    if not isinstance(profiles, dict):
        return False
    return any(isinstance(p, dict) and p.get("enabled") is True and p.get("require_channels")
               for p in profiles.values())


def _check(t: Transcript) -> None:
    channels = _required_channels(t.settings)
    modern = t.version.startswith("2.") and t.version not in ("2.0", "2.1")
    calls: dict[str, str] = {}
    for f in t.frames:
        h = f.header
        tool_reply = h.role == "tool" or h.role.startswith("functions.")
        if channels and h.channel is None and (h.role == "assistant" or tool_reply):
            t.errors.append(SpecError("E-PARSE-CHANNEL-MISSING", f"{h.role} message without a "
                                      "channel; the active profile requires one", f.pos))
        if h.constrain is not None and h.constrain.lower() == "json" and _json(f.body) is _INVALID:
            t.errors.append(SpecError("E-BODY-CONSTRAINT-VIOLATION", "the body is not the "
                                      "JSON its <|constrain|>json declares", f.pos))
        elif h.role == "assistant" and (h.recipient or "").startswith("functions.") \
                and not isinstance(_json(f.body), dict):
            t.errors.append(SpecError("E-CALL-SCHEMA", "tool call arguments are not a JSON "
                                      "object", f.pos))
        if h.role == "assistant" and is_call(h):
            f.call_id = h.call_id
            if h.call_id is None:  # Harmony has no call ids: accepted (HIP-1), one generated
                f.call_id = f"call_{len(calls) + 1}"
                while f.call_id in calls:
                    f.call_id += "_"
                calls[f.call_id] = h.recipient or ""
                if modern:
                    t.notes.append((f.pos, f"a tool call without call_id= (Harmony style, "
                                           f"HIP-1): read as call_id={f.call_id}"))
            elif h.call_id in calls:
                t.errors.append(SpecError("E-PARSE-HEADER", f"call_id={h.call_id} is not "
                                          "unique", f.pos))
            elif h.call_id is not None:
                calls[h.call_id] = h.recipient or ""
        if tool_reply:
            _check_reply(t, f, calls, modern)


def _check_reply(t: Transcript, f: Frame, calls: dict[str, str], modern: bool) -> None:
    h = f.header
    if h.role == "tool" and modern and (h.name is None or h.call_id is None):
        t.errors.append(SpecError("E-PARSE-HEADER", "a tool reply needs name= and call_id=",
                                  f.pos))
    elif h.call_id is not None and h.call_id not in calls:
        t.errors.append(SpecError("E-PARSE-HEADER", f"call_id={h.call_id} answers no earlier "
                                  "tool call", f.pos))
    reply = _json(f.body)
    if isinstance(reply, dict) and reply.get("ok") is False:
        err = reply.get("error")
        code = err.get("code") if isinstance(err, dict) else err
        t.notes.append((f.pos, f"tool reply{f' call_id={h.call_id}' if h.call_id else ''} "
                               f"reports an error: {code}"))


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return _INVALID


_INVALID = object()


# -- §10 JSON interchange ---------------------------------------------------------------
def to_json(t: Transcript) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for f in t.frames:
        h = f.header
        legacy = h.role.startswith("functions.")
        obj: dict[str, Any] = {"role": "tool" if legacy else h.role,
                               "channel": h.channel or "final"}
        if h.role == "assistant" and is_call(h):
            obj["tool_call"] = {"id": f.call_id, "recipient": h.recipient,
                                "content_type": h.constrain or h.content_type,
                                "arguments": f.body}
        elif h.channel == "analysis":
            obj["thinking"] = f.body
        else:
            obj["content"] = f.body
        if legacy or h.name is not None:
            obj["name"] = h.name or h.role
        if h.role != "assistant" and h.call_id is not None:
            obj["call_id"] = h.call_id
        if h.recipient is not None and "tool_call" not in obj:
            obj["recipient"] = h.recipient
        if h.intent is not None:
            obj["intent"] = h.intent
        if (h.constrain or h.content_type) and "tool_call" not in obj:
            obj["content_type"] = h.constrain or h.content_type
        obj["end"] = f.end
        messages.append(obj)
    return {"version": t.version, "header": t.settings, "messages": messages}


# -- CLI ------------------------------------------------------------------------------
def _line_col(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    return line, pos - (text.rfind("\n", 0, pos) + 1) + 1


DESCRIPTION = """\
Check or convert an OpenChatML 2.2 transcript.

  validate FILE   report each problem as FILE:LINE:COL: CODE: message (exit 1 when invalid)
  to-json FILE    print the JSON interchange form, one object per message"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The actions of ``ocm-gateway transcript`` (on ``parser``, from the CLI's tree)."""
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, text in (("validate", "check a transcript: one line per problem, with its spec code"),
                       ("to-json", "convert a transcript to the JSON interchange form")):
        p = sub.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        p.add_argument("file", help="transcript file ('-' for stdin)")


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ocm-gateway transcript", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return 2 if exc.code else 0
    return execute(args)


def execute(args: argparse.Namespace) -> int:
    """Run the parsed ``transcript`` command; the exit status."""
    try:
        if args.file == "-":
            text = sys.stdin.read()
        else:
            with open(args.file, encoding="utf-8") as fh:
                text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        print(f"{args.file}: cannot read: {exc}", file=sys.stderr)
        return 2
    t = parse_transcript(text)
    for e in sorted(t.errors, key=lambda e: e.pos):
        line, col = _line_col(text, e.pos)
        print(f"{args.file}:{line}:{col}: {e.code}: {e.message}",
              file=sys.stdout if args.action == "validate" else sys.stderr)
    if args.action == "to-json":
        if t.errors:
            return 1
        print(json.dumps(to_json(t), ensure_ascii=False, indent=2))
        return 0
    for pos, note in t.notes:
        line, col = _line_col(text, pos)
        print(f"{args.file}:{line}:{col}: note: {note}")
    if t.errors:
        print(f"{args.file}: invalid ({len(t.errors)} error(s))")
        return 1
    print(f"{args.file}: valid OpenChatML {t.version} ({len(t.frames)} message(s))")
    return 0
