"""Drive the app at the ASGI level with one POST whose client can leave at any moment: the
disconnect is exactly the ``http.disconnect`` message a server sends (``leave_after``: once
that many body chunks arrived; :meth:`AsgiPost.until_gone` runs it to then)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

Message = dict[str, Any]


class AsgiPost:
    def __init__(self, path: str, payload: dict[str, Any],
                 on_send: Callable[[AsgiPost, Message], None] | None = None,
                 leave_after: int | None = None) -> None:
        self.body = json.dumps(payload).encode()
        self.scope: Message = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
            "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
            "root_path": "", "client": ("127.0.0.1", 5555), "server": ("gateway", 80),
            "headers": [(b"content-type", b"application/json"),
                        (b"content-length", str(len(self.body)).encode())]}
        self.gone = asyncio.Event()  # set it to make the client disconnect
        self.sent: list[Message] = []
        self.body_chunks = 0
        self._on_send = on_send
        self._leave_after = leave_after
        self._delivered = False

    async def receive(self) -> Message:
        if not self._delivered:
            self._delivered = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        self.sent.append(message)
        if message["type"] == "http.response.body" and message.get("body"):
            self.body_chunks += 1
        if self._leave_after is not None and self.body_chunks >= self._leave_after:
            self.gone.set()
        if self._on_send is not None:
            self._on_send(self, message)

    def start(self, app: Any) -> asyncio.Future[None]:
        return asyncio.ensure_future(app(self.scope, self.receive, self.send))

    async def until_gone(self, app: Any, seconds: float = 5) -> float:
        """Run the request until its client has left and the app has finished with it (each
        within ``seconds``); when the client left (``time.monotonic``)."""
        task = self.start(app)
        await asyncio.wait_for(self.gone.wait(), timeout=seconds)
        left = time.monotonic()
        await asyncio.wait_for(task, timeout=seconds)
        return left


async def eventually(condition: Callable[[], object], seconds: float = 0.5) -> None:
    """Wait until ``condition()`` is true (polled every 5 ms), at most ``seconds``; the caller
    asserts afterwards, so a timeout shows up as that assertion."""
    for _ in range(int(seconds / 0.005)):
        if condition():
            return
        await asyncio.sleep(0.005)
