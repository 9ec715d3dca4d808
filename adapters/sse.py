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
        self._parts: list[bytes] = []  # reads without a line end, joined when one comes

    def decode(self, chunk: bytes) -> list[str]:
        """Linear in the bytes received: lines are cut at offsets of one buffer, which is
        sliced once per call (not once per line), and reads that end no line are kept apart
        until one does (one 8 MB event in 64 KB reads was copied ~128 times: quadratic).  A
        run of one-line ``data: `` events (what every backend here sends) is cut event by
        event, with no call per line."""
        if b"\n" not in chunk and b"\r" not in chunk and not self._buffer.endswith(b"\r"):
            if chunk:
                self._parts.append(chunk)
            return []
        if self._parts:
            buf = b"".join((self._buffer, *self._parts, chunk))
            self._parts = []
        else:
            buf = self._buffer + chunk if self._buffer else chunk
        events: list[str] = []
        pos = 0
        if b"\r" not in buf:  # the usual case: \n line ends only
            while (end := buf.find(b"\n", pos)) >= 0:
                if not self._data and buf.startswith(b"data: ", pos) \
                        and buf.startswith(b"\n", end + 1):
                    # the commonest event of all, one ``data: `` line and its blank line, taken
                    # whole: what the two calls of ``_line`` would make of it
                    events.append(buf[pos + 6:end].decode("utf-8", errors="replace"))
                    pos = end + 2
                    continue
                event = self._line(buf[pos:end])
                pos = end + 1
                if event is not None:
                    events.append(event)
        else:
            size = len(buf)
            while (match := _EOL.search(buf, pos)) is not None:
                if match.group() == b"\r" and match.end() == size:
                    break  # this \r may be the first half of \r\n
                event = self._line(buf[pos:match.start()])
                pos = match.end()
                if event is not None:
                    events.append(event)
        self._buffer = buf[pos:]
        return events

    def flush(self) -> list[str]:
        events: list[str] = []
        if self._parts:
            self._buffer = b"".join((self._buffer, *self._parts))
            self._parts = []
        if self._buffer:
            line, self._buffer = self._buffer, b""
            self._line(line)
        if self._data:
            events.append(self._dispatch())
        return events

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
