"""A reasoning item's summary in the Responses stream (``reasoning.summary``): its events.

:class:`~app.api.responses.encode.ResponsesEncoder` calls these with its numbered-event
factory (``event(type, **fields)``: the next ``sequence_number``), so the summary's events take
their place in the one numbering of the stream.  ``auto`` and ``detailed`` stream the reasoning
itself as its summary (:func:`part_added` when its first delta comes, then one
``response.reasoning_summary_text.delta`` per reasoning delta, the encoder's); ``concise`` sends
one bounded excerpt (:func:`concise`) when the reasoning ends.  Either way :func:`done` closes
the part once the reasoning is whole and sets the item's ``summary``; no second generation is
made.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Json = dict[str, Any]
EventFactory = Callable[..., Json]  # (type, **fields) -> the next numbered event

CONCISE_CHARS = 400


def concise(text: str) -> str:
    """A bounded excerpt of a reasoning: its opening sentences up to :data:`CONCISE_CHARS`."""
    text = " ".join(text.split())
    if len(text) <= CONCISE_CHARS:
        return text
    cut = text[:CONCISE_CHARS]
    end = max(cut.rfind(". "), cut.rfind("! "), cut.rfind("? "))
    return (cut[:end + 1] if end >= CONCISE_CHARS // 4 else cut.rsplit(" ", 1)[0]) + " …"


def part_added(event: EventFactory, item: Json, index: int) -> Json:
    """``response.reasoning_summary_part.added`` of reasoning item ``item`` (output ``index``)."""
    return event("response.reasoning_summary_part.added", item_id=item["id"], output_index=index,
                 summary_index=0, part={"type": "summary_text", "text": ""})


def done(event: EventFactory, mode: str | None, item: Json, index: int, text: str) -> list[Json]:
    """The summary's closing events once the reasoning ``text`` is whole (``concise``: its
    part and its one delta first); sets ``item["summary"]``."""
    events: list[Json] = []
    if mode == "concise":
        text = concise(text)
        events.append(part_added(event, item, index))
        events.append(event("response.reasoning_summary_text.delta", item_id=item["id"],
                            output_index=index, summary_index=0, delta=text))
    part = {"type": "summary_text", "text": text}
    item["summary"] = [part]
    return [*events,
            event("response.reasoning_summary_text.done", item_id=item["id"], output_index=index,
                  summary_index=0, text=text),
            event("response.reasoning_summary_part.done", item_id=item["id"], output_index=index,
                  summary_index=0, part=part)]
