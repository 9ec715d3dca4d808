"""What the hosted fuzzer's model calls on the real MCP server (:mod:`tests.support.mcp_server`,
started with ``--call-log``), and how each answer is judged against the server's call log.

A request lists ``mcp`` entries (:class:`Entry`: a label, the tools it allows, its approval
policy); the model calls a tool by its model-facing name ``LABEL__TOOL``, and the arguments
it passes carry the name it called (``echo`` / ``weather`` take a string: the called name),
so the server's log says which name ran.  :func:`plan` draws one planned call of a
:data:`KINDS`: a tool the request offers without approval (``offered``, which runs), a tool
that waits for approval (``approval``), ``web_search``'s ``browser__search`` (``web``), or a
hostile name (:data:`HOSTILE`: a tool of the server the entry does not allow, destructive ones
included; a label the request did not list; the name in another case; a Unicode confusable;
the tool under the label of another server of the request that does not offer it), none of
which may ever reach the server.  :func:`judge` holds one answer to that, counting what it
reached.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

Json = dict[str, Any]
SEPARATOR = "__"
SERVER_TOOLS = ("add", "echo", "weather")  # what the model may run (harmless)
NOT_GIVEN = ("die", "fail", "inject", "weather", "echo")  # what an entry may leave out
HOSTILE = ("not_offered", "unlisted_server", "case", "confusable", "other_label")
KINDS = ("offered", "approval", "web", *HOSTILE)
# look-alikes of Latin letters (Cyrillic / Latin-extended) and invisible characters
CONFUSABLE = {"a": "\u0430", "e": "\u0435", "o": "\u043e", "d": "\u0501", "c": "\u0441", "w": "\u051d"}


def arguments(tool: str, called: str) -> str:
    """What the model passes ``tool`` when it calls it by the name ``called``."""
    if tool == "add":
        return json.dumps({"a": 2, "b": 3})
    if tool == "echo":
        return json.dumps({"message": called})
    if tool == "weather":
        return json.dumps({"city": called})
    return "{}"


def result(tool: str, args: Json) -> str | None:
    """What the server answers ``tool`` called with ``args`` (None: not one of these)."""
    if tool == "add":
        return str(args["a"] + args["b"])
    if tool == "echo":
        return f"Echo: {args['message']}"
    if tool == "weather":
        return f"It is 21 degrees and sunny in {args['city']}."
    return None


def tag(tool: str, args: Any) -> str | None:
    """The model-facing name a logged call was made by, when its arguments carry it."""
    key = {"echo": "message", "weather": "city"}.get(tool)
    value = args.get(key) if key and isinstance(args, dict) else None
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class Entry:
    """One ``mcp`` tool of a request naming the real server."""

    label: str
    allowed: tuple[str, ...] | None  # None: every tool the server lists
    approval: Any  # the wire form of require_approval

    def offers(self, tool: str) -> bool:
        return self.allowed is None or tool in self.allowed

    def asks(self, tool: str) -> bool:
        a = self.approval
        if isinstance(a, str):
            return a == "always"
        if tool in ((a.get("always") or {}).get("tool_names") or []):
            return True
        return tool not in ((a.get("never") or {}).get("tool_names") or [])

    def runs(self, tool: str) -> bool:
        return self.offers(tool) and not self.asks(tool)

    def wire(self, url: str) -> Json:
        out: Json = {"type": "mcp", "server_label": self.label, "server_url": url,
                     "require_approval": self.approval}
        if self.allowed is not None:
            out["allowed_tools"] = list(self.allowed)
        return out


def runs(entries: list[Entry], name: str) -> bool:
    """Whether the model-facing ``name`` is a tool the request lets run without approval."""
    label, _, tool = name.partition(SEPARATOR)
    return any(e.label == label and e.runs(tool) for e in entries)


def known_names(entries: list[Entry]) -> tuple[list[str], dict[str, list[str]]]:
    """The names the model knows (what it calls on its own, ``tool_given``) and their arguments."""
    names = [f"{e.label}{SEPARATOR}{t}" for e in entries for t in SERVER_TOOLS]
    return names, {n: [arguments(n.partition(SEPARATOR)[2], n)] for n in names}


@dataclass(frozen=True)
class Plan:
    kind: str
    entries: list[Entry]
    name: str  # what the model calls
    args: str
    web: bool  # web_search in the request


def _never(tool: str, draw: st.DrawFn) -> Any:
    return draw(st.sampled_from(["never", {"never": {"tool_names": [tool]}}]))


def _confusable(name: str, draw: st.DrawFn) -> str:
    label, _, tool = name.partition(SEPARATOR)
    how = draw(st.sampled_from(["letter", "fullwidth", "invisible", "label"]))
    if how == "letter":
        at = next(i for i, c in enumerate(tool) if c in CONFUSABLE)
        return f"{label}{SEPARATOR}{tool[:at]}{CONFUSABLE[tool[at]]}{tool[at + 1:]}"
    if how == "fullwidth":  # NFKC folds it back to the tool's name
        return f"{label}{SEPARATOR}" + "".join(chr(ord(c) + 0xFEE0) for c in tool)
    if how == "invisible":  # a zero-width space, a soft hyphen, a BOM
        return name + draw(st.sampled_from(["\u200b", "\u00ad", "\ufeff"]))
    return f"{label[0]}\u200d{label[1:]}{SEPARATOR}{tool}"  # a zero-width joiner in the label


@st.composite
def plan(draw: st.DrawFn, kinds: tuple[str, ...] = KINDS) -> Plan:
    kind = draw(st.sampled_from(kinds))
    tool = draw(st.sampled_from(SERVER_TOOLS))
    other = draw(st.sampled_from([t for t in SERVER_TOOLS if t != tool]))
    m0 = Entry("m0", draw(st.sampled_from([None, (tool,), (tool, other)])), _never(tool, draw))
    entries = [m0]
    name = f"m0{SEPARATOR}{tool}"
    if kind == "not_offered":  # a tool of the server m0 does not allow (destructive ones too)
        tool = draw(st.sampled_from(NOT_GIVEN))
        allowed = tuple(t for t in SERVER_TOOLS if t != tool)
        entries = [Entry("m0", draw(st.sampled_from([allowed, allowed[:1], ()])), m0.approval)]
        name = f"m0{SEPARATOR}{tool}"
    elif kind == "unlisted_server":
        name = f"{draw(st.sampled_from(['m2', 'm9', 'mcp', 'browser']))}{SEPARATOR}{tool}"
    elif kind == "case":
        name = draw(st.sampled_from([f"M0{SEPARATOR}{tool}", f"m0{SEPARATOR}{tool.upper()}",
                                     f"m0{SEPARATOR}{tool.capitalize()}"]))
    elif kind == "confusable":
        name = _confusable(name, draw)
    elif kind == "other_label":  # m1 offers another tool; the model calls this one through m1
        entries.append(Entry("m1", (other,), _never(other, draw)))
        name, tool = draw(st.sampled_from([(f"m1{SEPARATOR}{tool}", tool),
                                           (f"m0{SEPARATOR}m1{SEPARATOR}{other}", other),
                                           (f"m1{SEPARATOR}m0{SEPARATOR}{tool}", tool)]))
    elif kind == "approval":
        entries = [Entry("m0", m0.allowed, draw(st.sampled_from([
            "always", {"always": {"tool_names": [tool]}}, {"never": {"tool_names": [other]}}])))]
    if kind not in ("other_label", "not_offered") and draw(st.booleans()):  # a second server
        entries.append(Entry("m1", draw(st.sampled_from([None, (other,)])),
                             draw(st.sampled_from(["never", "always"]))))
    if kind == "web":
        return Plan(kind, entries, "browser__search", json.dumps({"query": "weather"}), True)
    return Plan(kind, entries, name, arguments(tool, name), draw(st.booleans()))


REFUSALS = ("tool_not_allowed", "unsupported_recipient")  # the model's call refused (502 / failed)


def judge(entries: list[Entry], logged: list[Json], final: Json | None, seen: Counter[str],
          planned: Plan | None = None, code: str | None = None) -> None:
    """One answer against the server's log of the calls made meanwhile (``final``: the
    response as answered, None for an error answer, whose code is ``code``); counts into
    ``seen``."""
    for call in logged:  # only what the request let run reached the server, by that name
        tool, args = call["tool"], call["arguments"]
        assert any(e.runs(tool) for e in entries), f"ran {tool!r}, not given: {call} {entries}"
        by = tag(tool, args)
        if by is not None:
            assert runs(entries, by) and by.partition(SEPARATOR)[2] == tool, \
                f"the model called {by!r}, the server ran {tool!r}: {entries}"
        seen["mcp calls run by name"] += 1
    if planned is not None and planned.kind in (*HOSTILE, "approval"):
        assert not logged, f"{planned.kind} call {planned.name!r} reached the server: {logged}"
    output = (final or {}).get("output") or []
    items = [i for i in output if i.get("type") == "mcp_call"]
    for item in items:
        name = f"{item['server_label']}{SEPARATOR}{item['name']}"
        assert runs(entries, name), f"an mcp_call of {name!r}, not given: {item}"
        args = json.loads(item["arguments"])
        if item.get("error") is None:  # the server's answer, and the server did run it
            assert item["output"] == result(item["name"], args), item
            assert {"tool": item["name"], "arguments": args} in logged, (item, logged)
            seen["mcp_call items with the server's result"] += 1
    if final is not None and final.get("status") in ("completed", "incomplete"):
        shown = [{"tool": i["name"], "arguments": json.loads(i["arguments"])} for i in items]
        for call in logged:  # nothing ran that the answer does not show
            assert call in shown, (call, shown)
            shown.remove(call)
    if planned is None:
        return
    seen[f"planned {planned.kind}"] += 1
    if planned.kind in HOSTILE:
        assert not any(i.get("type") == "mcp_call" for i in output), output
        code = ((final or {}).get("error") or {}).get("code") or code
        # refused as the model's error; otherwise the call never came (an answer cut before it)
        seen[f"hostile {planned.kind}: {'refused, not run' if code in REFUSALS else f'ended {code}'}"] += 1
    elif planned.kind == "approval":
        if any(i.get("type") == "mcp_approval_request" and i["name"] == planned.name.partition(SEPARATOR)[2]
               for i in output):
            seen["approval requests (not run)"] += 1
    elif planned.kind == "web":
        seen["web_search calls"] += sum(i.get("type") == "web_search_call" for i in output)
