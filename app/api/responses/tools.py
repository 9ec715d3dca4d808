"""The tools of an Open Responses request: every tool type OpenAI defines, and what the model sees.

* ``function`` → a :class:`FunctionTool` of the same name.
* ``namespace`` (``{"type": "namespace", "name": "multi_agent_v1", "tools": [...]}``) → each
  of its function / custom tools as a prefixed function ``NAMESPACE__NAME`` (the form every
  prompt format can carry; Harmony shows it in a namespace of its own and the model calls
  ``NAMESPACE.NAME``); calls come back with ``namespace`` and ``name`` as separate
  fields, as OpenAI returns them (Codex routes by them and rejects flattened names).
* ``custom`` (freeform input) → a function taking ``{"input": string}``; its description tells
  the model the grammar when ``format`` has one.  The call comes back as a
  ``custom_tool_call`` item whose ``input`` is that string.  The grammar is shown to the
  model, not enforced by the backend (a documented gap: docs/api/responses.md).
* ``mcp``: run by the gateway (:mod:`app.api.responses.hosted`, :mod:`app.tools.mcp`); its
  tools reach the model like a namespace's.
* ``web_search`` / ``web_search_preview`` when the operator configured a search provider
  (``[tools.web_search]``): run by the gateway (:mod:`app.tools.web`), shown to the model as
  the ``browser`` namespace; without a provider it follows the policy below.
* ``code_interpreter`` when the operator configured the sandbox (``[tools.code_interpreter]``):
  run by the gateway (:mod:`app.tools.code`), shown as a ``python`` function.
* ``file_search`` when the gateway has vector stores (the knowledge facade): run by the gateway
  (:mod:`app.tools.file_search`), shown as the ``file_search`` namespace (``msearch``).
* other hosted tools (``web_search`` / ``code_interpreter`` / ``file_search`` without their service,
  ``image_generation``, ``computer_use_preview``, ``local_shell``, ``shell``, ``apply_patch``,
  ``tool_search``): this gateway runs none of them yet.  Policy: the tool is accepted, echoed
  in the response's ``tools``, **not shown to the model**, and reported in the response as
  ``"ocm:tools_not_run"``; forcing one with ``tool_choice`` is a 400 naming it (the answer
  could not honour it).  A client such as Codex, which always sends ``web_search``, works.

:class:`RequestTools` is the one reading of a request's ``tools``: the model-facing tools,
the map from a model-facing name back to the wire shape of its calls (:class:`WireTool`,
used by the encoder and by input items), and the echo.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from app.core.conversation import FunctionTool, ToolChoice
from app.core.errors import InvalidRequest
from app.items.names import model_name
from app.items.validate import check_function_name, check_json_schema
from schemas import responses as wire
from schemas.responses import McpToolParam

Json = dict[str, Any]
_CUSTOM_PARAMETERS: Json = {"type": "object", "properties": {"input": {"type": "string"}},
                            "required": ["input"], "additionalProperties": False}


@dataclass(frozen=True, slots=True)
class WireTool:
    """How a call of one model-facing tool looks on the wire."""

    # mcp / mcp_approval: a hosted MCP tool (namespace: its server), run / awaiting approval;
    # web_search: one of the browser functions of app/tools/web.py; code_interpreter: python;
    # file_search: msearch of app/tools/file_search.py
    kind: Literal["function", "custom", "mcp", "mcp_approval", "web_search", "code_interpreter",
                  "file_search"]
    name: str
    namespace: str | None = None


def _custom_description(tool: wire.CustomToolParam) -> str:
    text = tool.description or ""
    fmt = tool.format
    if isinstance(fmt, wire.CustomToolFormatGrammar):
        kind = "Lark grammar" if fmt.syntax == "lark" else "regular expression"
        text += f"\n\nThe input must match this {kind}:\n{fmt.definition}"
    return (text + "\n\nPut the freeform input in the `input` string.").strip()


@dataclass(frozen=True)
class RequestTools:
    tools: tuple[FunctionTool, ...]
    wire: Mapping[str, WireTool]
    not_run: tuple[str, ...]  # hosted tool types, in request order (the policy above)
    echo: tuple[Json, ...]
    mcp: tuple[McpToolParam, ...] = ()  # run by the gateway (app/api/responses/hosted.py)
    web_search: Json | None = None  # the request's web_search tool, when the gateway runs it
    code_interpreter: Json | None = None  # likewise its code_interpreter tool
    file_search: Json | None = None  # and its file_search tool

    def name_of(self, name: str, namespace: str | None, kind: str = "function") -> str | None:
        """The model-facing name of a tool the request offers, or None."""
        found = model_name(name, namespace)
        tool = self.wire.get(found)
        return found if tool is not None and tool.kind == kind else None


def _function(t: wire.FunctionToolParam, namespace: str | None, where: str) -> tuple[FunctionTool, Json]:
    check_function_name(t.name, f"{where}.name")
    if t.parameters is not None:
        check_json_schema(t.parameters, f"{where}.parameters")
    strict = t.strict if t.strict is not None else True  # Open Responses: strict unless said otherwise
    tool = FunctionTool(model_name(t.name, namespace), t.description, t.parameters, strict, namespace)
    return tool, {"type": "function", "name": t.name, "description": t.description,
                  "parameters": t.parameters, "strict": strict}


def _custom(t: wire.CustomToolParam, namespace: str | None, where: str) -> tuple[FunctionTool, Json]:
    check_function_name(t.name, f"{where}.name")
    tool = FunctionTool(model_name(t.name, namespace), _custom_description(t), _CUSTOM_PARAMETERS, True,
                        namespace)
    return tool, t.model_dump(exclude_none=True)


WEB_SEARCH_TYPES = ("web_search", "web_search_preview", "web_search_2025_08_26",
                    "web_search_preview_2025_03_11")


def request_tools(tools: Sequence[Any] | None, runs: frozenset[str] = frozenset()) -> RequestTools:
    """``runs``: the hosted tools this gateway runs (``web_search`` with a search provider,
    ``code_interpreter`` with a sandbox, ``file_search`` with vector stores)."""
    out: list[FunctionTool] = []
    table: dict[str, WireTool] = {}
    not_run: list[str] = []
    echo: list[Json] = []
    mcp: list[wire.McpToolParam] = []
    web_search: Json | None = None
    code: Json | None = None
    files: Json | None = None

    def add(tool: FunctionTool, kind: Literal["function", "custom"], name: str, namespace: str | None,
            where: str) -> None:
        if tool.name in table:
            raise InvalidRequest(f"Duplicate tool name {tool.name!r}.", param=f"{where}.name")
        table[tool.name] = WireTool(kind, name, namespace)
        out.append(tool)

    for i, t in enumerate(tools or []):
        where = f"tools[{i}]"
        if isinstance(t, wire.FunctionToolParam):
            tool, shown = _function(t, None, where)
            add(tool, "function", t.name, None, where)
            echo.append(shown)
        elif isinstance(t, wire.CustomToolParam):
            tool, shown = _custom(t, None, where)
            add(tool, "custom", t.name, None, where)
            echo.append(shown)
        elif isinstance(t, wire.NamespaceToolParam):
            check_function_name(t.name, f"{where}.name")
            inner: list[Json] = []
            for j, member in enumerate(t.tools):
                at = f"{where}.tools[{j}]"
                if isinstance(member, wire.FunctionToolParam):
                    tool, shown = _function(member, t.name, at)
                    add(tool, "function", member.name, t.name, at)
                else:
                    tool, shown = _custom(member, t.name, at)
                    add(tool, "custom", member.name, t.name, at)
                inner.append(shown)
            echo.append({"type": "namespace", "name": t.name, "description": t.description, "tools": inner})
        elif isinstance(t, wire.McpToolParam):
            mcp.append(t)  # headers and authorization are secrets: never echoed
            echo.append(t.model_dump(exclude_none=True, exclude={"headers", "authorization"}))
        elif "web_search" in runs and t.type in WEB_SEARCH_TYPES:
            if web_search is not None:
                raise InvalidRequest("Offer web_search once.", param=f"{where}.type")
            web_search = t.model_dump(exclude_none=True)
            echo.append(web_search)
        elif "code_interpreter" in runs and t.type == "code_interpreter":
            if code is not None:
                raise InvalidRequest("Offer code_interpreter once.", param=f"{where}.type")
            code = t.model_dump(exclude_none=True)
            container = code.get("container", {"type": "auto"})
            if not isinstance(container, dict) or container.get("type") != "auto":
                raise InvalidRequest("container must be {\"type\": \"auto\"}: each response gets a fresh "
                                     "container of its own.", param=f"{where}.container",
                                     code="unsupported_parameter")
            echo.append(code)
        elif "file_search" in runs and t.type == "file_search":
            if files is not None:
                raise InvalidRequest("Offer file_search once (it searches all its vector_store_ids).",
                                     param=f"{where}.type")
            files = t.model_dump(exclude_none=True)
            echo.append(files)
        else:
            not_run.append(t.type)
            echo.append(t.model_dump(exclude_none=True))
    return RequestTools(tuple(out), table, tuple(dict.fromkeys(not_run)), tuple(echo), tuple(mcp),
                        web_search, code, files)


HOSTED = "hosted:"  # an allowed_tools entry naming a hosted tool, expanded once it is open


def expand_hosted(choice: ToolChoice, forced: Any) -> ToolChoice:
    """``choice`` with its hosted entries (``HOSTED`` + the wire entry) replaced by the
    model-facing names ``forced(entry)`` gives."""
    if choice.allowed is None or not any(n.startswith(HOSTED) for n in choice.allowed):
        return choice
    names: list[str] = []
    for name in choice.allowed:
        if name.startswith(HOSTED):
            names += forced(wire.SpecificHosted.model_validate(json.loads(name[len(HOSTED):])))
        else:
            names.append(name)
    return ToolChoice(choice.mode, tuple(dict.fromkeys(names)))


def runs_hosted(choice: Any, tools: RequestTools) -> bool:
    """Whether a hosted ``tool_choice`` names a tool this request has the gateway run."""
    kind = getattr(choice, "type", None)
    if kind in WEB_SEARCH_TYPES:
        return tools.web_search is not None
    if kind == "code_interpreter":
        return tools.code_interpreter is not None
    if kind == "file_search":
        return tools.file_search is not None
    if kind == "mcp":
        label = getattr(choice, "server_label", None)
        return any(m.server_label == label for m in tools.mcp)
    return False


def _named(choice: Any, tools: RequestTools, param: str) -> str | None:
    """The model-facing name a named choice (function / custom) points at; None for a hosted one."""
    if isinstance(choice, wire.SpecificHosted):
        return None
    kind = "custom" if isinstance(choice, wire.SpecificCustom) else "function"
    found = tools.name_of(choice.name, choice.namespace, kind)
    if found is None:
        raise InvalidRequest(f"{param} names the {kind} tool {choice.name!r}, which is not in tools.",
                             param=f"{param}.name")
    return found


def tool_choice(choice: Any, tools: RequestTools) -> ToolChoice:
    if choice is None:
        return ToolChoice("auto")
    if isinstance(choice, wire.SpecificHosted):
        if runs_hosted(choice, tools):  # its model-facing names are known once it is open
            return ToolChoice("required", ())
        raise InvalidRequest(f"tool_choice forces {choice.type!r}, a hosted tool this request does "
                             "not have the gateway run (not offered, or no provider is configured); "
                             "offer it, or force a function.",
                             param="tool_choice.type", code="unsupported_tool_choice")
    if isinstance(choice, wire.SpecificFunction | wire.SpecificCustom):
        name = _named(choice, tools, "tool_choice")
        assert name is not None
        return ToolChoice("required", (name,))
    if isinstance(choice, wire.AllowedTools):
        names: list[str | None] = []
        for i, t in enumerate(choice.tools):
            if isinstance(t, wire.SpecificHosted) and runs_hosted(t, tools):
                names.append(HOSTED + json.dumps(t.model_dump(), sort_keys=True))
            else:
                names.append(_named(t, tools, f"tool_choice.tools[{i}]"))
        allowed = tuple(dict.fromkeys(n for n in names if n is not None))  # hosted ones not run: dropped
        if choice.mode == "required" and not allowed:
            raise InvalidRequest("allowed_tools in required mode lists only hosted tools this request "
                                 "does not have the gateway run.", param="tool_choice.tools",
                                 code="unsupported_tool_choice")
        return ToolChoice(choice.mode, allowed)
    hosted = (tools.mcp or tools.web_search is not None or tools.code_interpreter is not None
              or tools.file_search is not None)
    if choice == "required" and not tools.tools and not hosted:
        raise InvalidRequest("tool_choice 'required' needs at least one tool the model can call "
                             "(hosted tools are not run by this gateway).", param="tool_choice")
    return ToolChoice(choice)
