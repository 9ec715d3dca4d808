"""Wire-order checks of an Open Responses event stream (what the schemas cannot say).

:func:`check_stream` returns every rule a stream breaks (an empty list: a good stream):

* ``sse-name``: an SSE ``event:`` name differs from its payload's ``type``;
* ``seq``: ``sequence_number`` starts at 0 or 1 (the document only says "monotonically
  increasing ... to detect gaps"; its examples start at 1, OpenAI's API at 0) and grows by
  exactly 1 (``start=None`` accepts any start, for later turns of a WebSocket session);
* ``first``: ``response.created`` first, ``queued`` / ``in_progress`` (optional) right after
  it, before any output event; ``terminal``: exactly one terminal event
  (``response.completed | incomplete | failed``, or an ``error`` event), last;
* ``response-id``: every response snapshot has the id of the first;
* ``item``: output items are added at ``output_index`` 0, 1, 2 ... with status
  ``in_progress``, one at a time (an item is added after the previous one is done), every
  event names an open item by its index and ``item_id``, a function call's arguments are done
  before it, each item is
  done once, with the id and type it was added with and a final status;
* ``part``: content (and reasoning summary) parts open at index 0, 1 ... of their item, deltas
  only inside an open part, a part closes after its text is done and before its item;
* ``text``: each ``.done`` text (and function call ``arguments``) is the sum of its deltas;
* ``fold``: the terminal response's ``output`` is the list of done items, and its ``status``
  matches the terminal event.
"""

from __future__ import annotations

import itertools
from typing import Any

Json = dict[str, Any]
TERMINAL = {"response.completed": "completed", "response.incomplete": "incomplete",
            "response.failed": "failed"}
# delta type -> (done type, field of the done text, index field of the part)
TEXT_EVENTS = {
    "response.output_text.delta": ("response.output_text.done", "text", "content_index"),
    "response.refusal.delta": ("response.refusal.done", "refusal", "content_index"),
    "response.reasoning.delta": ("response.reasoning.done", "text", "content_index"),
    "response.reasoning_summary_text.delta": ("response.reasoning_summary_text.done", "text",
                                              "summary_index"),
}
DONE_EVENTS = {done: (delta, field, index) for delta, (done, field, index) in TEXT_EVENTS.items()}
PART_EVENTS = {"response.content_part.added": ("content", "content_index", True),
               "response.content_part.done": ("content", "content_index", False),
               "response.reasoning_summary_part.added": ("summary", "summary_index", True),
               "response.reasoning_summary_part.done": ("summary", "summary_index", False)}
LIFECYCLE = {"response.created", "response.queued", "response.in_progress"}


class _Stream:
    def __init__(self) -> None:
        self.problems: list[str] = []
        self.items: dict[int, Json] = {}  # output_index -> item as added
        self.done: dict[int, Json] = {}
        self.parts: dict[tuple[int, str, int], list[str]] = {}  # open parts -> deltas
        self.part_text: dict[tuple[int, str, int], str | None] = {}  # text done (None: not yet)
        self.closed_parts: set[tuple[int, str, int]] = set()
        self.args: dict[int, list[str]] = {}
        self.args_done: set[int] = set()

    def fail(self, rule: str, event: Json | None, message: str) -> None:
        where = f" (#{event.get('sequence_number')} {event.get('type')})" if event else ""
        self.problems.append(f"{rule}: {message}{where}")

    def open_item(self, e: Json) -> int | None:
        idx = e.get("output_index")
        if not isinstance(idx, int) or idx not in self.items:
            self.fail("item", e, f"output_index {idx!r} names no added item")
            return None
        if idx in self.done:
            self.fail("item", e, f"item {idx} is already done")
            return None
        if "item_id" in e and e["item_id"] != self.items[idx].get("id"):
            self.fail("item", e, f"item_id {e['item_id']!r} is not the id of item {idx}")
        return idx

    def added(self, e: Json) -> None:
        idx, item = e.get("output_index"), e.get("item")
        if idx != len(self.items):
            self.fail("item", e, f"output_index {idx!r}, expected {len(self.items)}")
        if not isinstance(item, dict):
            self.fail("item", e, "no item")
            return
        if item.get("status") != "in_progress":
            self.fail("item", e, f"added item status {item.get('status')!r}, expected 'in_progress'")
        if len(self.done) != len(self.items):
            self.fail("item", e, "an item is added while another is still open (items must not overlap)")
        if any(i.get("id") == item.get("id") for i in self.items.values()):
            self.fail("item", e, f"item id {item.get('id')!r} added twice")
        self.items[len(self.items)] = item

    def part(self, e: Json) -> None:
        kind, index_field, opening = PART_EVENTS[e["type"]]
        idx = self.open_item(e)
        if idx is None:
            return
        key = (idx, kind, e.get(index_field, -1))
        if opening:
            expected = sum(1 for k in (*self.parts, *self.closed_parts) if k[:2] == (idx, kind))
            if key in self.parts or key in self.closed_parts:
                self.fail("part", e, f"{kind} part {key[2]} opened twice")
            elif key[2] != expected:
                self.fail("part", e, f"{index_field} {key[2]}, expected {expected}")
            self.parts[key] = []
            self.part_text[key] = None
            return
        if key not in self.parts:
            self.fail("part", e, f"{kind} part {key[2]} is not open")
            return
        text = self.part_text.get(key)
        if text is None and kind == "content":
            self.fail("part", e, f"content part {key[2]} done before its text is done")
        part = e.get("part")
        got = part.get("text", part.get("refusal")) if isinstance(part, dict) else None
        if text is not None and got is not None and got != text:
            self.fail("text", e, f"part text {str(got)[:40]!r} differs from the done text {text[:40]!r}")
        del self.parts[key]
        self.closed_parts.add(key)

    def delta_or_done(self, e: Json) -> None:
        t = e["type"]
        is_delta = t in TEXT_EVENTS
        field, index_field = (TEXT_EVENTS[t][1:] if is_delta else DONE_EVENTS[t][1:])
        kind = "summary" if index_field == "summary_index" else "content"
        idx = self.open_item(e)
        if idx is None:
            return
        key = (idx, kind, e.get(index_field, -1))
        if key not in self.parts:
            self.fail("part", e, f"{t} outside an open {kind} part ({index_field} {key[2]})")
            return
        if self.part_text.get(key) is not None:
            self.fail("part", e, f"{t} after the text of this part is done")
            return
        if is_delta:
            self.parts[key].append(str(e.get("delta", "")))
            return
        text = e.get(field)
        if "".join(self.parts[key]) != text:
            self.fail("text", e, f"{field} {str(text)[:40]!r} is not the sum of its "
                                 f"{len(self.parts[key])} deltas {''.join(self.parts[key])[:40]!r}")
        self.part_text[key] = text if isinstance(text, str) else ""

    def arguments(self, e: Json) -> None:
        idx = self.open_item(e)
        if idx is None:
            return
        if self.items[idx].get("type") != "function_call":
            self.fail("item", e, f"arguments event for a {self.items[idx].get('type')!r} item")
        if e["type"].endswith(".delta"):
            self.args.setdefault(idx, []).append(str(e.get("delta", "")))
        else:
            if "".join(self.args.get(idx, [])) != e.get("arguments"):
                self.fail("text", e, "arguments are not the sum of their deltas")
            self.args_done.add(idx)

    def item_done(self, e: Json) -> None:
        idx = self.open_item(e)
        if idx is None:
            return
        still_open = [k for k in self.parts if k[0] == idx]
        if still_open:
            self.fail("part", e, f"item done with open parts {[k[1:] for k in still_open]}")
            for k in still_open:
                del self.parts[k]
        item, added = e.get("item"), self.items[idx]
        if not isinstance(item, dict):
            self.fail("item", e, "no item")
            return
        if item.get("id") != added.get("id") or item.get("type") != added.get("type"):
            self.fail("item", e, "done item differs in id or type from the added one")
        if added.get("type") == "function_call" and idx not in self.args_done:
            self.fail("item", e, "function_call done before response.function_call_arguments.done")
        if item.get("status") not in ("completed", "incomplete"):
            self.fail("item", e, f"done item status {item.get('status')!r}")
        self.done[idx] = item


def check_stream(events: list[Json], sse_names: list[str | None] | None = None, *,
                 start: int | None = -1) -> list[str]:
    """Every wire-order rule ``events`` breaks (see the module docstring).

    ``start``: -1 (default) accepts 0 or 1 as the first sequence number, None any start.
    """
    s = _Stream()
    if not events:
        return ["terminal: empty stream"]
    if sse_names is not None:
        for name, e in zip(sse_names, events, strict=False):
            if name is not None and name != e.get("type"):
                s.fail("sse-name", e, f"SSE event name {name!r} differs from the type")
    seqs = [e.get("sequence_number") for e in events]
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in seqs):
        s.fail("seq", None, "an event has no integer sequence_number")
    else:
        first = seqs[0]
        if start == -1 and first not in (0, 1):
            s.fail("seq", events[0], f"first sequence_number {first}, expected 0 or 1")
        elif start is not None and start != -1 and first != start:
            s.fail("seq", events[0], f"first sequence_number {first}, expected {start}")
        for prev, e in itertools.pairwise(events):
            if e["sequence_number"] != prev["sequence_number"] + 1:
                s.fail("seq", e, f"sequence_number after {prev['sequence_number']}")
    types = [e.get("type") for e in events]
    if types[0] != "response.created":
        s.fail("first", events[0], "the first event is not response.created")
    ends = [i for i, t in enumerate(types) if t in TERMINAL or t == "error"]
    if not ends:
        s.fail("terminal", events[-1], "no terminal event")
    elif ends != [len(events) - 1] and not (
            ends == [len(events) - 2, len(events) - 1] and types[-2:] == ["error", "response.failed"]):
        s.fail("terminal", events[ends[0]], f"{len(ends)} terminal events, or one not last")
    lifecycle = [i for i, t in enumerate(types) if t in LIFECYCLE]
    if lifecycle != list(range(len(lifecycle))):
        s.fail("first", events[lifecycle[-1]], "a created / queued / in_progress event after output events")
    response_id = (events[0].get("response") or {}).get("id") if types[0] == "response.created" else None
    for e in events:
        t = e.get("type")
        if t in LIFECYCLE or t in TERMINAL:
            rid = (e.get("response") or {}).get("id")
            if response_id is not None and rid != response_id:
                s.fail("response-id", e, f"response id {rid!r} differs from {response_id!r}")
            continue
        if t == "error" or not isinstance(t, str):
            continue
        if t == "response.output_item.added":
            s.added(e)
        elif t == "response.output_item.done":
            s.item_done(e)
        elif t in PART_EVENTS:
            s.part(e)
        elif t in TEXT_EVENTS or t in DONE_EVENTS:
            s.delta_or_done(e)
        elif t.startswith("response.function_call_arguments."):
            s.arguments(e)
        elif "output_index" in e:
            s.open_item(e)
    if types[-1] in TERMINAL:
        missing = sorted(set(s.items) - set(s.done))
        if missing:
            s.fail("item", events[-1], f"items {missing} were never done")
        final = events[-1].get("response") or {}
        if final.get("status") != TERMINAL[str(types[-1])]:
            s.fail("fold", events[-1], f"final status {final.get('status')!r}")
        if types[-1] != "response.failed" and final.get("output") != [s.done[i] for i in sorted(s.done)]:
            s.fail("fold", events[-1], "final output is not the list of done items")
    return s.problems
