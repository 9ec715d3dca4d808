"""The WebSocket connection layer: a shutdown that lets a socket end its response first.

On SIGTERM uvicorn calls every connection's ``shutdown()``, and its WebSocket protocols close
an open socket with 1012 ("service restart") at once: a response streaming on it would end
with no terminal event.  :class:`GracefulWebSocketProtocol` instead sets the event it put in
the connection scope (``scope["extensions"]["ocm.shutdown"]["event"]``), which the socket's
session (:mod:`app.api.responses.websocket`) watches: it stops its response with the
``server_shutdown`` error (``response.failed``) and closes with 1012 itself.  A session that
does not finish within :data:`GRACE_SECONDS` is closed by uvicorn's own shutdown.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

GRACE_SECONDS = 5.0
EXTENSION = "ocm.shutdown"


class GracefulWebSocketProtocol(WebSocketsSansIOProtocol):
    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        self._ocm_shutdown = asyncio.Event()
        # The app task was created above and has not run yet: it sees the extension.
        self.scope["extensions"][EXTENSION] = {"event": self._ocm_shutdown}

    def shutdown(self) -> None:
        signal: asyncio.Event | None = getattr(self, "_ocm_shutdown", None)
        if signal is None or signal.is_set() or not self.handshake_complete or self.close_sent:
            super().shutdown()
            return
        signal.set()
        self.loop.call_later(GRACE_SECONDS, self._late_shutdown)

    def _late_shutdown(self) -> None:
        if not self.transport.is_closing():
            super().shutdown()
