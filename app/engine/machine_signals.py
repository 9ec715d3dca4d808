"""The :class:`~app.engine.signals.Signals` of a worker of ``serve --workers N`` without Redis:
the same signals as :class:`~app.engine.signals.RedisSignals`, through the machine's signal hub
(:mod:`app.engine.signal_hub`, in the counter service's process; its socket path in
``OCMGW_SIGNALS_SOCKET``, set by ``serve``).

Design: one Unix-socket connection per worker, kept open by :meth:`MachineSignals.listen`
(reconnecting every 50 ms, then up to every second, while the hub is away).  On it:

* a cancel goes to the run's owner at once (the hub knows which worker opened a background
  run's copy; any other run's cancel goes to every other worker) and
  :meth:`~MachineSignals.cancel` returns once the hub has passed it on, as a Redis publish
  does; the hub unreachable is :class:`~app.engine.signals.SignalsUnavailable`, which sends the
  caller (:func:`app.api.responses.following.cancel_elsewhere`) through the store instead;
* upstream cooldowns go to every other worker (best effort: each learns on its own too);
* :meth:`MachineSignals.everywhere` has every other worker run a handler of :attr:`asks`
  and returns once they have (:mod:`app.engine.machine_asks`: a revoked key, usage flushed);
* a background run's payloads are copied in order (:class:`MachineMirror`, written once per
  event-loop turn), then an end marker; another worker's follower (:class:`MachineReader`)
  pulls them by position, so it joins at any point with no gap and no duplicate.

The hub going away (killed, restarted by ``serve``) loses the copies in flight: a mirror whose
connection closed stops copying (as :class:`~app.engine.signals.RedisMirror` does when Redis
fails), and a reader whose reads fail, or whom the hub says it cannot serve (state 2: trimmed,
given up), goes on from the store alone (:class:`~app.engine.signals.Settle`): it ends with
the stored payloads it has not sent, the terminal last, exactly as
:class:`~app.engine.signals.RemoteReader` does when Redis goes.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
from collections.abc import Callable
from typing import Any

import orjson

from app.core.json_lines import Dial, LineClient
from app.engine.machine_asks import WorkerAsks
from app.engine.signal_hub import MAX_LINE, SIGNALS_ENV
from app.engine.signals import RemoteReader, Settle, SignalsUnavailable

log = logging.getLogger("ocm_gateway")
Json = dict[str, Any]


class _Link(LineClient):
    """The worker's connection to the hub: lines out (written once per loop turn, in order),
    answers matched to their requests, cancels and cooldowns handed to ``signals``."""

    max_line = MAX_LINE
    name = "run signals (the signal hub's connection)"

    def __init__(self, signals: MachineSignals) -> None:
        super().__init__()
        self.signals = signals
        self.pending: list[bytes] = []

    def write(self, line: bytes) -> None:
        if not self.alive:
            return
        if not self.pending:
            asyncio.get_running_loop().call_soon(self.flush)
        self.pending.append(line)

    def flush(self) -> None:
        if self.pending and self.transport is not None and self.alive:
            self.transport.write(b"".join(self.pending))
        self.pending.clear()

    def heard(self, msg: list[Any]) -> None:
        self.signals._heard(msg)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.pending.clear()


class MachineSignals:
    """Signals between the workers of one machine (see the module docstring)."""

    shared = True

    def __init__(self, path: str, *, timeout: float = 1.0) -> None:
        self.path = path
        self.timeout = timeout
        self._dial = Dial(path, lambda: _Link(self), timeout)
        self._ids = itertools.count(1)
        self._on_cancel: Callable[[str], None] | None = None
        self._on_cooldown: Callable[[str, float], None] | None = None
        self._pending: set[asyncio.Task[None]] = set()
        self.asks = WorkerAsks()  # handlers for the other workers' "f" asks

    @property
    def _link(self) -> _Link | None:
        return self._dial.current

    async def link(self) -> _Link:
        """The connection to the hub (made now if there is none); OSError / TimeoutError."""
        return await self._dial()

    def _heard(self, msg: list[Any]) -> None:
        if msg[0] == "c" and self._on_cancel is not None:
            self._on_cancel(str(msg[1]))
        elif msg[0] == "k" and self._on_cooldown is not None:
            self._on_cooldown(str(msg[1]), float(msg[2]))
        elif msg[0] == "f" and self._link is not None:
            self.asks.heard(int(msg[1]), list(msg[2]), self._link.send)

    async def everywhere(self, what: list[Any], within: float = 1.0) -> tuple[int, int]:
        """Have every other worker run its handler ``what[0]`` (with ``what[1:]``); once all
        have, or after ``within`` seconds: (how many did, how many were asked).  The hub
        unreachable: OSError / TimeoutError."""
        ident = next(self._ids)
        link = await self.link()
        answer = await link.request(["f", ident, int(within * 1000), what], ident, within + self.timeout)
        return int(answer[1]), int(answer[2])

    async def cancel(self, run_id: str) -> None:
        ident = next(self._ids)
        try:
            link = await self.link()
            answer = await link.request(["c", ident, run_id], ident, self.timeout)
        except (OSError, TimeoutError) as exc:
            raise SignalsUnavailable(f"The cancel cannot reach the worker running {run_id!r}: the "
                                     f"machine's signal service is unavailable ({type(exc).__name__})."
                                     ) from None
        del answer  # [id, 1]: handed to the run's owner; [id, 0]: to every other worker

    def cooldown(self, url: str, seconds: float) -> None:
        """Tell the other workers (called where a request is failing over: never waits)."""
        line = orjson.dumps(["k", url, seconds]) + b"\n"
        link = self._link
        if link is not None and link.alive:
            link.send(line)
            return

        async def later() -> None:
            with contextlib.suppress(OSError, TimeoutError):  # best effort
                (await self.link()).send(line)

        task = asyncio.get_running_loop().create_task(later())
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    def mirror(self, run_id: str) -> MachineMirror:
        return MachineMirror(self._link, run_id)

    def follow(self, run_id: str, after: int | None, settle: Settle) -> RemoteReader:
        return MachineReader(self, run_id, after, settle)

    async def listen(self, on_cancel: Callable[[str], None],
                     on_cooldown: Callable[[str, float], None] | None = None) -> None:
        """Keep the connection open until cancelled, handing every cancel and cooldown heard
        to the callbacks."""
        self._on_cancel, self._on_cooldown = on_cancel, on_cooldown
        # (re)connected: what was asked meanwhile was not heard here
        await self._dial.keep(up=lambda: self.asks.linked(), down=_unavailable)

    def close(self) -> None:
        """Close the connection once what is written on it has been sent (shutdown)."""
        link = self._link
        if link is not None and link.transport is not None and link.alive:
            link.flush()
            link.transport.close()


class MachineMirror:
    """A background run's payloads copied to the hub on ``link`` (the worker's connection when
    the run started).  That connection closing ends the copy: the rest is not sent anywhere
    (readers learn the end from the store)."""

    def __init__(self, link: _Link | None, run_id: str) -> None:
        self._link = link if link is not None and link.alive else None
        self._id = run_id
        if self._link is not None:
            self._link.send(orjson.dumps(["o", run_id]) + b"\n")

    def push(self, payload: Json) -> None:
        link = self._link
        if link is None:
            return
        try:
            line = orjson.dumps(["e", self._id, payload]) + b"\n"
        except TypeError:  # not JSON (never expected): the copy ends, readers use the store
            line = b""
        if not line or len(line) > MAX_LINE:
            link.send(orjson.dumps(["x", self._id]) + b"\n")
            self._link = None
            return
        link.send(line)

    def end(self) -> None:
        if self._link is not None:
            self._link.send(orjson.dumps(["z", self._id]) + b"\n")
            self._link = None


class MachineReader(RemoteReader):
    """Follow another worker's run from the hub's copy: :class:`~app.engine.signals.RemoteReader`
    with the hub in Redis's place.  Once the hub fails or cannot serve what follows, the reader
    reads only the store (every half second) until it records the end."""

    def __init__(self, signals: MachineSignals, run_id: str, after: int | None, settle: Settle, *,
                 check_seconds: float = 1.0, give_up_seconds: float = 60.0) -> None:
        super().__init__(None, run_id, after, settle, check_seconds=check_seconds,
                         give_up_seconds=give_up_seconds)
        self._signals = signals
        self._run = run_id
        self._pos = 0  # the next position in the hub's copy
        self._hub = True  # False: the hub cannot give the rest (the store will)

    async def _read(self) -> tuple[list[Json], bool]:
        if not self._hub:
            return [], False
        ident = next(self._signals._ids)
        block = max(1, int(self._check * 1000))
        try:
            link = await self._signals.link()
            answer = await link.request(["r", ident, self._run, self._pos, block], ident,
                                        self._check + self._signals.timeout)
        except (OSError, TimeoutError) as exc:
            log.warning("run events: following %s through the machine's signal service failed (%s); "
                        "reading the store", self._run, type(exc).__name__)
            self._hub = False
            return [], False
        _, state, self._pos, payloads = answer
        batch: list[Json] = []
        for payload in payloads:
            seq = payload.get("sequence_number")
            if self._after is None or not isinstance(seq, int) or seq > self._after:
                batch.append(payload)
                if isinstance(seq, int):
                    self._after = seq
        if state == 1:
            self._done = True
        elif state == 2:
            self._hub = False  # trimmed or lost: what follows comes from the store
        return batch, True


def _unavailable(exc: Exception) -> None:
    log.warning("run signals: the machine's signal service is unavailable (%s); retrying",
                type(exc).__name__)


def from_environment() -> MachineSignals | None:
    """The worker's signals when ``serve`` started the machine's service, else None."""
    path = os.environ.get(SIGNALS_ENV)
    return MachineSignals(path) if path else None
