"""Incremental Server-Sent Events decoder (bytes in, ``data`` payloads out).

Modelled on httpx's incremental decoders: :meth:`SSEDecoder.decode` takes any
slice of the byte stream and returns the complete events it closed;
:meth:`SSEDecoder.flush` returns a final event left without a trailing blank line.
Only the ``data`` field matters to the backends we talk to; ``event``, ``id``,
``retry`` and comments are parsed and dropped.
"""

from __future__ import annotations

import re

_EOL = re.compile(rb"\r\n|\r|\n")


class SSEDecoder:
    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[bytes] = []

    def decode(self, chunk: bytes) -> list[str]:
        self._buffer += chunk
        events: list[str] = []
        while True:
            cut = self._next_line_end()
            if cut is None:
                break
            end, skip = cut
            line = self._buffer[:end]
            self._buffer = self._buffer[end + skip:]
            event = self._line(line)
            if event is not None:
                events.append(event)
        return events

    def flush(self) -> list[str]:
        events: list[str] = []
        if self._buffer:
            line, self._buffer = self._buffer, b""
            self._line(line)
        if self._data:
            events.append(self._dispatch())
        return events

    def _next_line_end(self) -> tuple[int, int] | None:
        match = _EOL.search(self._buffer)
        if match is None:
            return None
        if match.group() == b"\r" and match.end() == len(self._buffer):
            return None  # this \r may be the first half of \r\n
        return match.start(), match.end() - match.start()

    def _line(self, line: bytes) -> str | None:
        if not line:
            return self._dispatch() if self._data else None
        if line.startswith(b":"):
            return None
        name, _, value = line.partition(b":")
        if value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            self._data.append(value)
        return None

    def _dispatch(self) -> str:
        # Invalid UTF-8 from a backend must not end the stream: the bytes become U+FFFD (token
        # ids, not this text, carry the answer for token-level backends).
        data = b"\n".join(self._data).decode("utf-8", errors="replace")
        self._data = []
        return data
