"""Incremental newline-delimited JSON decoder (bytes in, one string per line out).

The same ``decode()`` / ``flush()`` shape as :class:`adapters.sse.SSEDecoder`, so the
transport picks one by the backend's framing.  Blank lines are skipped; a line with
invalid UTF-8 keeps going with U+FFFD, like SSE.
"""

from __future__ import annotations


class NDJSONDecoder:
    def __init__(self) -> None:
        self._parts: list[bytes] = []  # the unfinished line's reads, joined once it ends

    def decode(self, chunk: bytes) -> list[str]:
        """Linear in the bytes received: a read that ends no line is kept apart (appending it
        to one growing buffer copied a long line once per read: quadratic)."""
        if b"\n" not in chunk:
            if chunk:
                self._parts.append(chunk)
            return []
        buf = b"".join((*self._parts, chunk)) if self._parts else chunk
        *lines, rest = buf.split(b"\n")
        self._parts = [rest] if rest else []
        return [line.decode("utf-8", "replace") for line in lines if line.strip()]

    def flush(self) -> list[str]:
        line, self._parts = b"".join(self._parts), []
        return [line.decode("utf-8", "replace")] if line.strip() else []
