"""Content checks every renderer shares."""

from __future__ import annotations

from app.core.conversation import Message, TextPart, part_param
from app.core.errors import InvalidRequest


def text_only(msg: Message, index: int, what: str) -> str:
    """The message's text; a non-text part is refused naming ``what`` cannot take it."""
    for j, part in enumerate(msg.content):
        if not isinstance(part, TextPart):
            raise InvalidRequest(f"{what} accepts text only; content part of type {part.type!r} "
                                 "is not supported.", param=part_param(msg, index, j),
                                 code="unsupported_content_type")
    return msg.text
