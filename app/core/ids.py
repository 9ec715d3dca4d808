"""Identifier generation for responses, tool calls and items."""

from __future__ import annotations

import secrets
import string

_ALPHABET = string.ascii_letters + string.digits


def random_id(prefix: str, length: int = 24) -> str:
    return prefix + "".join(secrets.choice(_ALPHABET) for _ in range(length))
