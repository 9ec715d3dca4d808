"""The ``code_interpreter`` hosted tool: Python in the project's sandbox service
(:mod:`app.sandbox.server`, its own process; the gateway only calls it over HTTP).

The model is shown one function, ``python(code)`` (on Harmony, gpt-oss's built-in ``python``
tool in the system message: the model sends the code itself, not JSON): a stateful session
(variables and files persist between the calls of one response), no network.  One
:class:`CodeToolbox` per response owns one sandbox container (``cntr_...``), deleted when the
response ends, whatever ends it.  A call's outcome is what the code printed (cut by the
sandbox), and its error when it raised, timed out or hit a limit; a sandbox that cannot be
reached is an error outcome too, never a failure of the response.  Cancelling the call
closes its HTTP request, which stops the run inside the sandbox.

The files a run writes come back with its result (within the sandbox's budget): pictures become
``image`` outputs of the item, and every file is listed in the item's ``ocm:files``
(:func:`written_files`); the model reads their names and sizes after the printed output.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import mimetypes
from dataclasses import dataclass
from typing import Any

import httpx

from app.core.conversation import FunctionTool
from app.tools.base import ToolOutcome, clip

NAME = "python"
IMAGES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
FUNCTIONS = (FunctionTool(
    NAME, "Run Python code in a stateful sandbox (variables and files persist between calls; no "
          "network access). Returns what the code prints and the value of a final expression.",
    {"type": "object", "properties": {"code": {"type": "string", "description": "The Python code."}},
     "required": ["code"]}, False, None, "python"),)


@dataclass(frozen=True)
class Sandbox:
    """The sandbox service, shared by every response: its URL, token and HTTP client."""

    url: str
    client: httpx.AsyncClient
    token: str | None = None

    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.token}"} if self.token else {}


def written_files(written: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The sandbox's ``written`` (:mod:`app.sandbox.files`) as a ``code_interpreter_call``'s
    ``outputs`` (an ``image``, OpenAI's type, for each picture whose contents came back, as a
    data URL) and its ``ocm:files`` (every file: name, media type, size, and for the others
    their contents as a data URL when they came back)."""
    images: list[dict[str, Any]] = []
    files: list[dict[str, Any]] = []
    for entry in written if isinstance(written, list) else []:
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            continue
        size, data = entry.get("bytes"), entry.get("data")
        media = mimetypes.guess_type(entry["path"], strict=False)[0] or "application/octet-stream"
        file: dict[str, Any] = {"filename": entry["path"], "mime_type": media,
                                "bytes": size if isinstance(size, int) else 0}
        if isinstance(data, str):
            url = f"data:{media};base64,{data}"
            if media in IMAGES:
                images.append({"type": "image", "url": url})
            else:
                file["url"] = url
        files.append(file)
    return images, files


def files_note(files: Any) -> str:
    """What the model reads of the files a run wrote: their names and sizes, not contents."""
    names = [f"{f.get('filename')} ({f.get('bytes')} bytes)" for f in files or ()]
    return f"\n[files written: {', '.join(names)}]" if names else ""


def code_of(arguments: str) -> str:
    """The code of a call (``{"code": "..."}``; text that is not that JSON is the code itself)."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    if isinstance(value, dict) and isinstance(value.get("code"), str):
        return str(value["code"])
    return arguments


class CodeToolbox:
    """``code_interpreter`` for one response (a :class:`~app.tools.base.Toolbox`)."""

    functions: tuple[FunctionTool, ...] = FUNCTIONS

    def __init__(self, sandbox: Sandbox, container_id: str, max_output_chars: int = 32_768) -> None:
        self.sandbox, self.container_id, self._max = sandbox, container_id, max_output_chars
        self._used = False

    def owns(self, name: str) -> bool:
        return name == NAME

    def needs_approval(self, name: str) -> bool:
        return False

    async def call(self, name: str, arguments: str) -> ToolOutcome:
        code = code_of(arguments)
        detail: dict[str, Any] = {"code": code, "container_id": self.container_id, "outputs": []}
        self._used = True
        try:
            r = await self.sandbox.client.post(f"{self.sandbox.url}/v1/containers/{self.container_id}/run",
                                               json={"code": code}, headers=self.sandbox.headers())
        except httpx.HTTPError as exc:
            return ToolOutcome("", f"The code interpreter is unavailable ({type(exc).__name__}).", detail)
        if r.status_code != 200:
            return ToolOutcome("", f"The code interpreter refused the run (HTTP {r.status_code}).", detail)
        try:
            result = r.json()
            output = str(result.get("output") or "")
        except (ValueError, AttributeError):
            return ToolOutcome("", "The code interpreter's answer was not readable.", detail)
        if result.get("truncated"):
            output += f"\n[output truncated: {result['truncated']} more characters]"
        output = clip(output, self._max)
        images, files = written_files(result.get("written"))
        detail["outputs"] = ([{"type": "logs", "logs": output}] if output else []) + images
        if files:
            detail["files"] = files
        error = result.get("error")
        return ToolOutcome(output + files_note(files), str(error) if error else None, detail)

    async def aclose(self) -> None:
        if not self._used:
            return
        with contextlib.suppress(httpx.HTTPError, asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.sandbox.client.delete(
                f"{self.sandbox.url}/v1/containers/{self.container_id}", headers=self.sandbox.headers())), 5)
