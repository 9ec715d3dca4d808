"""Events → Anthropic's message object and its stream events.

Mapping: reasoning → a ``thinking`` block whose ``signature`` is the gateway's sealed copy of
that reasoning (:mod:`app.items.sealing`; sent back, it is re-rendered as the model's real chain
of thought), its ``thinking`` text left empty when the request asked for ``display: "omitted"``
(no ``thinking_delta``; the signature still carries it); preambles and answer text → ``text``
blocks; tool calls → ``tool_use`` blocks (``input_json_delta`` as the arguments are generated).
Blocks come in the model's order, one open at a time.  The stream: ``message_start``, one
``ping`` (as Anthropic's; the route adds a ``ping`` whenever the stream idles), per block
``content_block_start`` / ``content_block_delta`` / ``content_block_stop``, then
``message_delta`` (the stop reason — ``stop_sequence``, named in ``stop_sequence``, when a
client stop string ended the answer — and usage) and ``message_stop``; a failure is one
``error`` event and nothing after it.  ``refusal`` is the stop reason when the backend declined
(a ``content_filter`` finish: an upstream's content filter, or an OpenAI-compatible model's
``refusal``, whose text is the answer): as on Anthropic's API the text so far stays and no
message is added.  The gateway's own models (Harmony, templates) have no classifier, so they
never stop with it.  The non-streaming message is the fold of the same events.

Server tools the gateway ran (:mod:`app.api.messages.server_blocks`): the call is a
``server_tool_use`` block (its ``input`` as one ``input_json_delta`` once the model's
arguments are complete), its result a ``web_search_tool_result`` /
``code_execution_tool_result`` block sent whole in its ``content_block_start``; usage carries
``server_tool_use``; a response the agentic loop ended at one of its bounds (rounds, deadline)
stops with ``pause_turn``.

``wire=True`` (the streamed route): the deltas (``text_delta``, ``thinking_delta``,
``input_json_delta``) and the ``ping`` leave as :class:`~app.api.messages.wire.Wire` frames, made
from a per-block prefix and suffix and the piece's JSON string (:mod:`app.api.messages.wire`),
byte for byte what the dicts encode to; a block's deltas after its first join one
:class:`~app.api.messages.wire.Deltas` payload while it waits for the SSE sender.  Every other
event stays a dict.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from app.api.messages.server_blocks import ServerBlocks
from app.api.messages.wire import DELTA_FIELDS, Cut, Deltas, Wire, delta_frame
from app.api.messages.wire import PING as PING_FRAME
from app.core import events as ev
from app.core.errors import anthropic_event
from app.core.output import Usage

Json = dict[str, Any]

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                "content_filter": "refusal"}
PING: Json = {"type": "ping"}
_HOSTED_CALLS = ("server_tool_use", "mcp_tool_use")  # blocks whose input is sent once complete
_PIECES = (ev.TextDelta, ev.PreambleDelta, ev.ReasoningDelta)


def usage_dict(usage: Usage) -> Json:
    """Anthropic's usage: ``input_tokens`` excludes the prompt tokens read from cache."""
    return {"input_tokens": max(0, usage.prompt_tokens - usage.cached_tokens),
            "output_tokens": usage.completion_tokens,
            "cache_read_input_tokens": usage.cached_tokens,
            "cache_creation_input_tokens": 0}


@dataclass(slots=True)
class _Block:
    # "thinking" | "text" | "tool_use" | "server_tool_use" | "mcp_tool_use" | "result" (a server tool's)
    kind: str
    pieces: list[str] = field(default_factory=list)  # text, thinking, or the input's JSON
    id: str = ""
    name: str = ""
    signature: str = ""
    arguments: str | None = None  # a finished call's arguments (ToolCallDone)
    whole: Json | None = None  # a server tool's result block, as it is sent
    function: str = ""  # a server_tool_use's model-facing function (browser__search, python)
    server_name: str = ""  # an mcp_tool_use's server
    frame: Cut | None = None  # wire: its delta frame cut around the piece's JSON string

    def body(self, show_thinking: bool = True) -> Json:
        if self.kind == "thinking":
            return {"type": "thinking", "thinking": "".join(self.pieces) if show_thinking else "",
                    "signature": self.signature}
        if self.kind == "text":
            return {"type": "text", "text": "".join(self.pieces)}
        if self.whole is not None:
            return self.whole
        if self.kind == "server_tool_use":
            return {"type": "server_tool_use", "id": self.id, "name": self.name, "input": _input(self.json)}
        if self.kind == "mcp_tool_use":
            return {"type": "mcp_tool_use", "id": self.id, "name": self.name, "server_name": self.server_name,
                    "input": _input(self.json)}
        return {"type": "tool_use", "id": self.id, "name": self.name, "input": _input(self.json)}

    @property
    def json(self) -> str:
        return self.arguments if self.arguments is not None else "".join(self.pieces)


def _input(arguments: str) -> Any:
    try:
        value = orjson.loads(arguments) if arguments.strip() else {}
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


class MessagesEncoder:
    """One message: each event becomes zero or more stream events (when ``stream``), and
    every event is folded, so :meth:`result` is the message the same stream amounts to."""

    def __init__(self, message_id: str, model: str, seal: Callable[[str], str], *,
                 stream: bool = True, show_thinking: bool = True,
                 server: ServerBlocks | None = None, wire: bool = False) -> None:
        self._id = message_id
        self._model = model
        self._seal = seal
        self._stream = stream
        self._show_thinking = show_thinking
        self._server = server
        self._blocks: list[_Block] = []
        self._open: _Block | None = None
        self._stop_reason: str | None = None
        self._stop_sequence: str | None = None
        self._usage = Usage()
        self._wire = wire
        self._pending: Deltas | None = None  # wire: the open block's deltas not yet taken (wire.py)
        self.terminal = False

    def _message(self, content: list[Json], stop_reason: str | None, usage: Usage) -> Json:
        return {"id": self._id, "type": "message", "role": "assistant", "model": self._model,
                "content": content, "stop_reason": stop_reason, "stop_sequence": self._stop_sequence,
                "usage": self._usage_dict(usage)}

    def _usage_dict(self, usage: Usage) -> Json:
        out = usage_dict(usage)
        if self._server is not None:
            out["server_tool_use"] = self._server.usage()
        return out

    def start(self) -> list[Json]:
        return [{"type": "message_start", "message": self._message([], None, Usage())},
                PING_FRAME if self._wire else PING]

    def encode(self, event: ev.Event) -> list[Json]:
        if self.terminal:
            return []
        if isinstance(event, ev.TERMINAL):
            self.terminal = True
        if not self._stream:
            self._fold(event)
            return []
        if self._wire:  # a token of the open block: its frame, joined to the deltas not yet taken
            block = self._open
            if isinstance(event, _PIECES):
                text = event.text
                if not text:
                    return []
                kind = "thinking" if type(event) is ev.ReasoningDelta else "text"
                if block is None or block.kind != kind:
                    self._pending = None
                    return self._delta(kind, text)
            elif type(event) is ev.ToolCallArgumentsDelta and block is not None and block.kind == "tool_use":
                text = event.delta
                if not text:
                    return []
            else:
                self._pending = None
                return self._events(event)
            block.pieces.append(text)
            if block.frame is None:  # thinking kept for the signature, not shown
                return []
            pending = self._pending
            if pending is not None and pending.cut is block.frame and not pending.taken:
                pending.pieces.append(orjson.dumps(text))
                return []
            self._pending = Deltas(block.frame, orjson.dumps(text))
            return [self._pending]
        return self._events(event)

    def cancel(self) -> list[Json]:
        """The client is gone: nothing more to say."""
        self.terminal = True
        return []

    def result(self) -> Json:
        return self._message([b.body(self._show_thinking) for b in self._blocks], self._stop_reason,
                             self._usage)

    # -- blocks --------------------------------------------------------------------------------

    def _close(self) -> list[Json]:
        block, self._open = self._open, None
        if block is None:
            return []
        index = len(self._blocks) - 1
        out: list[Json] = []
        if block.kind == "thinking":
            block.signature = self._seal("".join(block.pieces))
            out.append({"type": "content_block_delta", "index": index,
                        "delta": {"type": "signature_delta", "signature": block.signature}})
        out.append({"type": "content_block_stop", "index": index})
        return out

    def _opened(self, block: _Block) -> list[Json]:
        out = self._close()
        self._blocks.append(block)
        self._open = block
        if self._wire and block.kind in DELTA_FIELDS and (block.kind != "thinking" or self._show_thinking):
            block.frame = delta_frame(len(self._blocks) - 1, block.kind)
        start: Json
        if block.kind == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
        elif block.kind == "text":
            start = {"type": "text", "text": ""}
        elif block.whole is not None:
            start = block.whole
        elif block.kind == "server_tool_use":
            start = {"type": "server_tool_use", "id": block.id, "name": block.name, "input": {}}
        elif block.kind == "mcp_tool_use":
            start = {"type": "mcp_tool_use", "id": block.id, "name": block.name,
                     "server_name": block.server_name, "input": {}}
        else:
            start = {"type": "tool_use", "id": block.id, "name": block.name, "input": {}}
        out.append({"type": "content_block_start", "index": len(self._blocks) - 1,
                    "content_block": start})
        return out

    def _delta(self, kind: str, text: str) -> list[Json]:
        out = [] if self._open is not None and self._open.kind == kind else self._opened(_Block(kind))
        assert self._open is not None
        self._open.pieces.append(text)
        if kind == "thinking" and not self._show_thinking:
            return out  # kept for the signature, not shown
        out.append(self._piece(self._open, text))
        return out

    def _piece(self, block: _Block, text: str) -> Json:
        """The open ``block``'s delta carrying ``text`` (its frame, on the wire)."""
        if block.frame is not None:
            before, _, after = block.frame
            return Wire(before + orjson.dumps(text) + after)
        delta_type, name = DELTA_FIELDS[block.kind]
        return {"type": "content_block_delta", "index": len(self._blocks) - 1,
                "delta": {"type": delta_type, name: text}}

    def _fold(self, event: ev.Event) -> None:
        """A non-streamed message: the text, thinking and argument pieces go straight to their
        block, without the stream event nobody reads; every other event (a block opens or
        closes, a call ends, the finish) goes through :meth:`_events`, so both views keep the
        same blocks."""
        if isinstance(event, _PIECES):
            text, block = event.text, self._open
            if not text:
                return
            want = "thinking" if type(event) is ev.ReasoningDelta else "text"
            if block is not None and block.kind == want:
                block.pieces.append(text)
            else:
                self._delta(want, text)
        elif isinstance(event, ev.ToolCallArgumentsDelta):
            block, delta = self._open, event.delta
            if block is not None and (block.kind in _HOSTED_CALLS or (block.kind == "tool_use" and delta)):
                block.pieces.append(delta)
        else:
            self._events(event)

    def _events(self, event: ev.Event) -> list[Json]:
        if isinstance(event, ev.ReasoningDelta):
            return self._delta("thinking", event.text) if event.text else []
        if isinstance(event, ev.PreambleDelta | ev.TextDelta):
            return self._delta("text", event.text) if event.text else []
        if isinstance(event, ev.PartDone):
            kind = "thinking" if event.kind == "reasoning" else "text"
            return self._close() if self._open is not None and self._open.kind == kind else []
        server = self._server
        if isinstance(event, ev.ToolCallStarted):
            if server is not None and event.name in server.mcp:
                server.started(event.call_id, event.name)
                label, tool = server.mcp[event.name]
                return self._opened(_Block("mcp_tool_use", id=event.call_id, name=tool, server_name=label,
                                           function=event.name))
            if server is not None and event.name in server.names:
                name = server.started(event.call_id, event.name)
                return self._opened(_Block("server_tool_use", id=event.call_id, name=name,
                                           function=event.name))
            return self._opened(_Block("tool_use", id=event.call_id, name=event.name))
        if isinstance(event, ev.ToolCallArgumentsDelta):
            if self._open is not None and self._open.kind in ("server_tool_use", "mcp_tool_use"):
                self._open.pieces.append(event.delta)  # sent as Anthropic's input once complete
                return []
            if self._open is None or self._open.kind != "tool_use" or not event.delta:
                return []
            self._open.pieces.append(event.delta)
            return [self._piece(self._open, event.delta)]
        if isinstance(event, ev.ToolCallDone):
            return self._call_done(event)
        if isinstance(event, ev.HostedCallDone):
            whole = server.result(event) if server is not None else None
            if whole is None:
                return []
            out = self._opened(_Block("result", whole=whole))
            return out + self._close()
        if isinstance(event, ev.Finished):
            out = self._close()
            self._stop_reason = STOP_REASONS.get(event.reason, "end_turn")
            if event.limit in ("max_rounds", "deadline", "max_tool_calls"):  # the loop's bounds
                self._stop_reason = "pause_turn"
            if event.reason == "stop" and event.stop_sequence is not None:
                self._stop_reason, self._stop_sequence = "stop_sequence", event.stop_sequence
            self._usage = event.usage
            out.append({"type": "message_delta",
                        "delta": {"stop_reason": self._stop_reason, "stop_sequence": self._stop_sequence},
                        "usage": self._usage_dict(event.usage)})
            out.append({"type": "message_stop"})
            return out
        if isinstance(event, ev.Error):
            return [anthropic_event(event)]
        return []

    def _call_done(self, event: ev.ToolCallDone) -> list[Json]:
        block = self._open
        hosted = block is not None and block.kind in ("server_tool_use", "mcp_tool_use")
        if block is not None and hosted and block.id == event.call_id:
            assert self._server is not None
            block.arguments = orjson.dumps(self._server.input_of(block.function, event.arguments)).decode()
            return [self._piece(block, block.arguments), *self._close()]
        if block is None or block.kind != "tool_use" or block.id != event.call_id:
            return []
        out: list[Json] = []
        streamed = "".join(block.pieces)
        if event.arguments != streamed:  # the final arguments differ (repaired): send the rest
            block.arguments = event.arguments
            if event.arguments.startswith(streamed) and len(event.arguments) > len(streamed):
                out.append(self._piece(block, event.arguments[len(streamed):]))
        return out + self._close()
