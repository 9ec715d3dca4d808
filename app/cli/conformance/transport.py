"""How the runner talks to a server: JSON and SSE over httpx, and a small WebSocket client.

The WebSocket client (RFC 6455, text frames, client-side masking, ping / close handling) is
enough for the Open Responses WebSocket mode and keeps the command free of a WebSocket
dependency.  A server without WebSocket mode answers the upgrade with an HTTP status, which
:class:`WebSocketUnavailable` carries.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import socket
import ssl
import struct
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

Json = dict[str, Any]
WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


@dataclass
class Exchange:
    """One HTTP request and what came back (``body``: parsed JSON, or None)."""

    status: int
    body: Any
    text: str
    content_type: str = ""


@dataclass
class Stream:
    """A streamed answer: its data payloads in order (and the SSE names), or the HTTP error."""

    status: int
    events: list[Json] = field(default_factory=list)
    sse_names: list[str | None] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # undecodable data lines, missing [DONE]
    done_marker: bool = False  # a ``data: [DONE]`` line was seen
    text: str = ""  # body of a non-2xx or non-SSE answer
    content_type: str = ""


class Client:
    """The server under test: ``base_url`` is its API root (``http://host:port/v1``)."""

    def __init__(self, base_url: str, api_key: str | None, timeout: float) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(timeout=timeout, headers=headers)

    def close(self) -> None:
        self.http.close()

    def post(self, path: str, body: Any) -> Exchange:
        r = self.http.post(self.base_url + path, json=body)
        try:
            parsed: Any = r.json()
        except ValueError:
            parsed = None
        return Exchange(r.status_code, parsed, r.text, r.headers.get("content-type", ""))

    def stream(self, path: str, body: Any) -> Stream:
        with self.http.stream("POST", self.base_url + path, json=body) as r:
            ctype = r.headers.get("content-type", "")
            if r.status_code >= 300 or "text/event-stream" not in ctype:
                r.read()
                out = Stream(r.status_code, text=r.text, content_type=ctype)
                if r.status_code < 300:
                    out.problems.append(f"content-type {ctype!r}, expected text/event-stream")
                return out
            out = Stream(r.status_code, content_type=ctype)
            name: str | None = None
            data: list[str] = []
            for line in [*r.iter_lines(), ""]:
                if line == "":
                    if data:
                        _add_payload(out, name, "\n".join(data))
                    name, data = None, []
                elif line.startswith("event:"):
                    name = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].removeprefix(" "))
            return out


def _add_payload(out: Stream, name: str | None, payload: str) -> None:
    if out.done_marker:
        out.problems.append(f"data after [DONE]: {payload[:60]!r}")
    if payload == "[DONE]":
        out.done_marker = True
        return
    try:
        event = json.loads(payload)
    except ValueError:
        out.problems.append(f"undecodable data line {payload[:60]!r}")
        return
    if not isinstance(event, dict):
        out.problems.append(f"data is not a JSON object: {payload[:60]!r}")
        return
    out.events.append(event)
    out.sse_names.append(name)


class WebSocketUnavailable(Exception):
    """The server did not switch protocols (``status``: its HTTP answer, 0: no connection)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"no WebSocket mode: HTTP {status} on upgrade {detail}".strip())
        self.status = status


class WebSocket:
    """A blocking client connection (text messages only)."""

    def __init__(self, url: str, api_key: str | None, timeout: float) -> None:
        parts = urlsplit(url)
        secure = parts.scheme in ("https", "wss")
        host = parts.hostname or "127.0.0.1"
        port = parts.port or (443 if secure else 80)
        try:
            raw = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise WebSocketUnavailable(0, str(exc)) from exc
        self.sock: socket.socket = (ssl.create_default_context().wrap_socket(raw, server_hostname=host)
                                    if secure else raw)
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [f"GET {parts.path or '/'} HTTP/1.1", f"Host: {parts.netloc}", "Upgrade: websocket",
                 "Connection: Upgrade", f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13"]
        if api_key:
            lines.append(f"Authorization: Bearer {api_key}")
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                break
            head += chunk
        head_text, _, self.buffer = head.partition(b"\r\n\r\n")
        status_line, *header_lines = head_text.decode("latin-1").split("\r\n")
        status = int(status_line.split()[1]) if len(status_line.split()) > 1 else 0
        if status != 101:
            self.sock.close()
            raise WebSocketUnavailable(status, f"({status_line.strip()})")
        headers = {h.split(":", 1)[0].strip().lower(): h.split(":", 1)[1].strip()
                   for h in header_lines if ":" in h}
        accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
        if headers.get("sec-websocket-accept") != accept:
            self.sock.close()
            raise WebSocketUnavailable(status, "(bad Sec-WebSocket-Accept)")

    def _read(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("WebSocket closed by the server")
            self.buffer += chunk
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def _send_frame(self, opcode: int, payload: bytes) -> None:
        n = len(payload)
        head = bytes([0x80 | opcode])
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 65536:
            head += bytes([0x80 | 126]) + struct.pack("!H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack("!Q", n)
        mask = os.urandom(4)
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def send(self, message: Json) -> None:
        self._send_frame(0x1, json.dumps(message).encode())

    def recv(self) -> str | None:
        """The next text message; None when the server closed the connection."""
        parts: list[bytes] = []
        while True:
            b0, b1 = self._read(2)
            opcode, n = b0 & 0x0F, b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._read(8))[0]
            mask = self._read(4) if b1 & 0x80 else b""
            payload = self._read(n)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            if opcode == 0x8:
                return None
            if opcode == 0x9:
                self._send_frame(0xA, payload)
                continue
            if opcode in (0x0, 0x1, 0x2):
                parts.append(payload)
                if b0 & 0x80:
                    return b"".join(parts).decode("utf-8", errors="replace")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._send_frame(0x8, struct.pack("!H", 1000))
        self.sock.close()


def websocket_url(base_url: str) -> str:
    return base_url.rstrip("/").replace("https://", "wss://", 1).replace("http://", "ws://", 1) + "/responses"
