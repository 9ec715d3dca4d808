"""Incremental newline-delimited JSON decoder (bytes in, one string per line out).

The same ``decode()`` / ``flush()`` shape as :class:`adapters.sse.SSEDecoder`, so the
transport picks one by the backend's framing.  Blank lines are skipped; a line with
invalid UTF-8 keeps going with U+FFFD, like SSE.
"""

from __future__ import annotations


class NDJSONDecoder:
    def __init__(self) -> None:
        self._buffer = b""

    def decode(self, chunk: bytes) -> list[str]:
        self._buffer += chunk
        if b"\n" not in chunk:
            return []
        *lines, self._buffer = self._buffer.split(b"\n")
        return [line.decode("utf-8", "replace") for line in lines if line.strip()]

    def flush(self) -> list[str]:
        line, self._buffer = self._buffer, b""
        return [line.decode("utf-8", "replace")] if line.strip() else []
