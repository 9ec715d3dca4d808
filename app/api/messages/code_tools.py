"""Anthropic's ``code_execution_20250825`` server tool (name ``code_execution``) on the gateway's
sandbox (``[tools.code_interpreter]``, one fresh container per message): its two sub-tools, as
the model calls them and as the ``server_tool_use`` blocks name them,

* ``bash_code_execution`` ``{"command"}`` → ``bash -c`` in the container's ``/work``; the
  result block is ``bash_code_execution_tool_result`` with a ``bash_code_execution_result``
  (``stdout``, ``stderr``, ``return_code``, ``content: []``);
* ``text_editor_code_execution`` ``{"command": "view" | "create" | "str_replace", "path",
  "file_text", "old_str", "new_str"}`` → the file in the container; the result block is
  ``text_editor_code_execution_tool_result`` with a ``..._view_result`` (``file_type: "text"``,
  ``content``, ``num_lines``, ``start_line``, ``total_lines``), ``..._create_result``
  (``is_file_update``) or ``..._str_replace_result`` (``old_start``, ``old_lines``,
  ``new_start``, ``new_lines``, ``lines`` as a diff), or the error (``file_not_found``,
  ``invalid_tool_input``).

Both run as Python in the sandbox (its isolation and limits unchanged): a fixed program whose
only input is the call's arguments, passed as a JSON string literal (never spliced into code),
prints one JSON record that :meth:`SandboxShellToolbox.call` reads back.  A sandbox failure is
``unavailable``, a call past ``max_uses`` ``too_many_requests`` (the codes these blocks have).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import orjson

from app.core.conversation import FunctionTool
from app.tools import code
from app.tools.base import ToolOutcome
from app.tools.code import CodeToolbox

BASH, EDITOR = "bash_code_execution", "text_editor_code_execution"
TYPES = ("code_execution_20250825",)
MARK = "\x1eocm-result:"  # a line of its own (split on "\n": str.splitlines also splits at \x1e)
FUNCTIONS = (
    FunctionTool(BASH, "Run a bash command in the sandbox's working directory /work (files persist "
                       "between calls in this message; no network access).",
                 {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}),
    FunctionTool(EDITOR, "View, create or edit a text file in the sandbox: command view (path), create "
                         "(path, file_text) or str_replace (path, old_str, new_str; old_str must occur "
                         "exactly once).",
                 {"type": "object", "properties": {
                     "command": {"type": "string", "enum": ["view", "create", "str_replace"]},
                     "path": {"type": "string"}, "file_text": {"type": "string"},
                     "old_str": {"type": "string"}, "new_str": {"type": "string"}},
                  "required": ["command", "path"]}),
)

_COMMON = f"""import json, os, subprocess
args = json.loads(ARGS)
LIMIT = LIMIT_CHARS
def out(record):
    print({MARK!r} + json.dumps(record))
def error(code, message):
    out({{"type": KIND + "_tool_result_error", "error_code": code, "error_message": message}})
"""
_BASH = """command = args.get("command") if isinstance(args, dict) else None
if not isinstance(command, str) or not command:
    error("invalid_tool_input", "command is required")
else:
    r = subprocess.run(["bash", "-c", command], capture_output=True, text=True, cwd="/work", errors="replace")
    out({"type": "bash_code_execution_result", "stdout": r.stdout[:LIMIT], "stderr": r.stderr[:LIMIT],
         "return_code": r.returncode, "content": []})
"""
_EDITOR = """command, path = args.get("command"), args.get("path")
path = path if not isinstance(path, str) or os.path.isabs(path) else os.path.join("/work", path)
if not isinstance(path, str) or not path:
    error("invalid_tool_input", "path is required")
elif command == "view":
    if not os.path.isfile(path):
        error("file_not_found", "no file at " + path)
    else:
        lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
        out({"type": "text_editor_code_execution_view_result", "file_type": "text",
             "content": "\\n".join(lines)[:LIMIT], "num_lines": len(lines), "start_line": 1,
             "total_lines": len(lines)})
elif command == "create":
    text = args.get("file_text")
    if not isinstance(text, str):
        error("invalid_tool_input", "file_text is required")
    else:
        existed = os.path.exists(path)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        out({"type": "text_editor_code_execution_create_result", "is_file_update": existed})
elif command == "str_replace":
    old, new = args.get("old_str"), args.get("new_str", "")
    if not os.path.isfile(path):
        error("file_not_found", "no file at " + path)
    elif not isinstance(old, str) or not old or not isinstance(new, str):
        error("invalid_tool_input", "old_str (non-empty) and new_str are required")
    else:
        text = open(path, encoding="utf-8").read()
        if text.count(old) != 1:
            error("invalid_tool_input", "old_str occurs %d times, not once" % text.count(old))
        else:
            start = text[:text.index(old)].count("\\n") + 1
            with open(path, "w", encoding="utf-8") as f:
                f.write(text.replace(old, new, 1))
            out({"type": "text_editor_code_execution_str_replace_result", "old_start": start,
                 "old_lines": old.count("\\n") + 1, "new_start": start, "new_lines": new.count("\\n") + 1,
                 "lines": ["-" + l for l in old.splitlines()] + ["+" + l for l in new.splitlines()]})
else:
    error("invalid_tool_input", "command must be view, create or str_replace")
"""


def program(name: str, arguments: str, limit: int) -> str:
    """The Python the sandbox runs for a call of sub-tool ``name`` with ``arguments`` (JSON
    text, passed as a string literal)."""
    body = _BASH if name == BASH else _EDITOR
    head = _COMMON.replace("LIMIT_CHARS", str(limit))
    return f"ARGS = {json.dumps(arguments)}\nKIND = {json.dumps(name)}\n{head}{body}"


def said(record: dict[str, Any]) -> str:
    """What the model reads of a result record."""
    kind = record.get("type", "")
    if kind == "bash_code_execution_result":
        err = f"\nstderr:\n{record['stderr']}" if record.get("stderr") else ""
        return f"{record.get('stdout', '')}{err}\n[exit code {record.get('return_code')}]"
    if kind.endswith("_view_result"):
        return str(record.get("content", ""))
    if kind.endswith("_create_result"):
        return "File updated." if record.get("is_file_update") else "File created."
    if kind.endswith("_str_replace_result"):
        return "\n".join(record.get("lines") or []) or "Replaced."
    return f"Error: {record.get('error_code')}: {record.get('error_message') or ''}"


@dataclass
class SandboxShellToolbox:
    """The two sub-tools over one sandbox container (a :class:`CodeToolbox`)."""

    inner: CodeToolbox
    max_chars: int = 32_768
    functions: tuple[FunctionTool, ...] = field(default=FUNCTIONS, init=False)

    def owns(self, name: str) -> bool:
        return name in (BASH, EDITOR)

    def needs_approval(self, name: str) -> bool:
        return False

    async def call(self, name: str, arguments: str) -> ToolOutcome:
        run = await self.inner.call(code.NAME, orjson.dumps(
            {"code": program(name, arguments, self.max_chars // 2)}).decode())
        line = next((x for x in reversed(run.output.split("\n")) if x.startswith(MARK)), None)
        record: Any = None
        if line is not None:
            try:
                record = json.loads(line[len(MARK):])
            except ValueError:
                record = None
        if not isinstance(record, dict) or run.error is not None:
            why = run.error or "the sandbox's answer was not readable"
            unavailable = {"type": f"{name}_tool_result_error", "error_code": "unavailable"}
            return ToolOutcome("", f"Not run: {why}", {"result": unavailable})
        if record.get("type", "").endswith("_tool_result_error"):
            return ToolOutcome("", said(record), {"result": record})
        return ToolOutcome(said(record), None, {"result": record})

    async def aclose(self) -> None:
        await self.inner.aclose()
