"""Checks shared by every ingest path (names that end up in message headers, ...)."""

from __future__ import annotations

import re

from app.errors import InvalidRequest

# OpenAI's rule for function names; it also guarantees that a name can never carry
# whitespace, '<|', or anything else that could alter a Harmony / OpenChatML header.
_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_CALL_ID_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


def check_function_name(name: str, param: str) -> str:
    if not _NAME_RE.fullmatch(name):
        raise InvalidRequest(
            f"Invalid function name {name!r}: must match ^[A-Za-z0-9_-]{{1,64}}$.",
            param=param,
            code="invalid_function_name",
        )
    return name


def check_call_id(call_id: str, param: str) -> str:
    if not _CALL_ID_RE.fullmatch(call_id):
        raise InvalidRequest(
            f"Invalid tool call id {call_id!r}: use 1-128 letters, digits, '_', '-', '.', ':'.",
            param=param,
            code="invalid_tool_call_id",
        )
    return call_id
