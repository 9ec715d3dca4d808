"""Per-key limits shared by the workers of one machine without Redis (``serve --workers N``).

``serve`` with more than one worker and no ``[redis] url`` starts this module as a process of
its own (:mod:`app.cli.limits_service`): a counter service on a Unix socket in a private (0700)
directory, whose path the workers find in ``OCMGW_COUNTERS_SOCKET``.  Its state is one
:class:`~app.http.counters.LocalCounters` (the same decisions, refusals and Retry-After as one
process), changed by one event loop, so every decision is atomic: two workers never both take
the last slot.  :class:`MachineCounters` is the workers' side, the same calls as
``LocalCounters`` / ``RedisCounters``.

Contract:

* The wire: one JSON array a line (:mod:`app.core.json_lines`: a line over 64 KiB, or one
  that does not parse, closes its connection).
  ``["a", id, who, rpm, tpm, concurrent, generation, lease]`` is answered
  ``[id, kind, retry_after]`` (kind 0: admitted, 1-3: refused as
  :class:`~app.http.counters.LocalCounters` says, -1: not deciding yet); ``["r", who, lease, tokens]``
  (release) and ``["h", who, lease]`` (hold: re-register a slot) are not answered.  Lines
  arrive in order on a worker's one connection, so a release never overtakes its admission.
* A request no limit applies to (:func:`~app.http.counters.unlimited`) never reaches the
  service: no round trip for keys without limits, nor without auth and without [limits].
* Slots: a worker's slots are freed as soon as its connection closes (a worker killed
  mid-request), and any slot after ``lease_seconds`` (``[redis] lease_seconds``) in any case.
* The service unreachable, or silent for ``timeout`` (1 s): the request gets a 503
  ``limits_unavailable`` with ``Retry-After: 1`` (closed, not open: a key's limits bound what
  it costs, and the supervisor restarts the service at once).  A worker holding slots
  reconnects every 50 ms and re-registers them; a restarted service answers 503 for its first
  ``grace`` seconds (0.5) so that they are back before it decides.  The per-minute windows
  start empty after a restart (a key may get up to one more minute's requests then).
* The service exits when the process that started it (``parent``) is gone.
* The same process serves the machine's signal hub (:mod:`app.engine.signal_hub`: cancels,
  upstream cooldowns, background runs' live events) on a socket of its own, when given one,
  and the workers' ``/metrics`` relay (:mod:`app.http.metrics_relay`) on a third, and the
  machine's replica gates (:mod:`app.engine.gate_hub`: llama.cpp's slots, ``[models.X]
  max_inflight``, one bound for all the workers) on a fourth.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import sys
import time
import uuid
from collections.abc import Callable

from app.core.json_lines import LineClient, LinePeer, close_unix, count, listen_unix
from app.core.json_lines import text as _text
from app.engine import gate_hub, signal_hub
from app.http import metrics_relay
from app.http.counters import Budget, CountersUnavailable, LocalCounters, RateLimited, _refusal, unlimited

log = logging.getLogger("ocm_gateway")
SOCKET_ENV = "OCMGW_COUNTERS_SOCKET"


# --- the service ---------------------------------------------------------------------------

class _Peer(LinePeer):
    """One worker's connection: its lines decided in arrival order (the answers to one read
    in one write); its slots freed when it closes.  A line over 64 KiB, or a malformed one,
    closes it (:class:`~app.core.json_lines.LinePeer`)."""

    name = "limits service"

    def __init__(self, counters: LocalCounters, grace_until: float = 0.0) -> None:
        super().__init__()
        self.counters = counters
        self.grace_until = grace_until  # a restarted service: workers re-register their slots first
        self.held: dict[str, str] = {}  # lease -> who, slots taken through this connection

    def handle(self, msg: list[object]) -> None:
        op = msg[0]
        if op == "a":
            _, ident, who, rpm, tpm, concurrent, generation, lease = msg
            if self.grace_until and time.monotonic() < self.grace_until:
                self.send_message([ident, -1, 0])  # not deciding yet: a 503
                return
            budget = Budget(_limit(rpm), _limit(tpm), _limit(concurrent))
            decided = self.counters.decide(_text(who), budget, bool(generation), _text(lease))
            if decided is None:
                if generation:
                    self.held[_text(lease)] = _text(who)
                self.send_message([ident, 0, 0])
            else:
                self.send_message([ident, decided[0], decided[1]])
        elif op == "r":
            _, who, lease, tokens = msg
            self.held.pop(_text(lease), None)
            self.counters.release(_text(who), _text(lease), _limit(tokens) or 0)
        elif op == "h":
            _, who, lease = msg
            self.held[_text(lease)] = _text(who)
            self.counters.hold(_text(who), _text(lease))
        else:
            raise ValueError(op)

    def connection_lost(self, exc: Exception | None) -> None:
        for lease, who in self.held.items():  # a worker gone (killed) gives its slots back
            self.counters.release(who, lease, 0)
        self.held.clear()


def _limit(value: object) -> int | None:
    return count(value) or None  # 0: no limit


async def serve(path: str, lease_seconds: float, parent: int | None = None, grace: float = 0.0,
                ready: Callable[[], None] | None = None, signals: str | None = None,
                metrics: str | None = None, gates: str | None = None) -> None:
    """Serve the counters on ``path`` until cancelled or ``parent`` has exited; for the first
    ``grace`` seconds (a restart) admissions are answered "unavailable" while the workers,
    which reconnect at once, re-register the slots they hold.  With ``signals``, the machine's
    signal hub (:mod:`app.engine.signal_hub`) listens there too, first (the counters' socket
    accepting means both are up)."""
    counters = LocalCounters(lease_seconds)
    hub_server, hub = await signal_hub.listen(signals) if signals else (None, None)
    relay_server = (await metrics_relay.listen(metrics))[0] if metrics else None  # /metrics
    gates_server = (await gate_hub.listen(gates, grace))[0] if gates else None  # replica slots
    until = time.monotonic() + grace if grace > 0 else 0.0
    server = await listen_unix(path, lambda: _Peer(counters, until))
    if ready is not None:
        ready()
    try:
        for tick in itertools.count(1):
            if parent is not None and os.getppid() != parent:
                break
            await asyncio.sleep(0.5)
            if hub is not None:
                hub.sweep(time.monotonic())
            if tick % 60 == 0:
                counters.sweep(time.monotonic())
    finally:
        close_unix(server, path)
        close_unix(gates_server, gates)
        close_unix(relay_server, metrics)
        close_unix(hub_server, signals)


# --- the workers' side ---------------------------------------------------------------------

class _Connection(LineClient):
    """A worker's connection: answers ``[id, kind, retry_after]`` matched to admissions."""

    name = "limits (the counter service's connection)"

    def __init__(self, lost: Callable[[], None]) -> None:
        super().__init__()
        self.lost = lost

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.lost()


class MachineCounters:
    """The :class:`~app.http.counters.Counters` of a worker: each counted request asks the
    machine's counter service (one round trip on a Unix socket; see the module docstring)."""

    def __init__(self, path: str, *, timeout: float = 1.0, lease_seconds: float = 900.0) -> None:
        self.path = path
        self.timeout = timeout
        self.refresh = max(0.05, min(60.0, lease_seconds / 3))  # an open WebSocket's place, kept
        self._sockets: dict[str, str] = {}  # lease -> who: WebSocket places held
        self._refresher: asyncio.Task[None] | None = None
        self._conn: _Connection | None = None
        self._lock = asyncio.Lock()
        self._held: dict[str, str] = {}  # lease -> who: slots this worker holds in the service
        self._ids = itertools.count(1)
        self._rejoining: asyncio.Task[None] | None = None

    async def _connection(self) -> _Connection:
        conn = self._conn
        if conn is not None and conn.alive:
            return conn
        async with self._lock:
            if self._conn is None or not self._conn.alive:
                _, fresh = await asyncio.get_running_loop().create_unix_connection(
                    lambda: _Connection(self._lost), self.path)
                for lease, who in self._held.items():  # the service may have restarted
                    fresh.send_message(["h", who, lease])
                self._conn = fresh
            return self._conn

    def _lost(self) -> None:
        """The connection closed: while this worker holds slots, reconnect at once (every
        50 ms until the service is back) and re-register them, within the service's grace."""
        if self._held and self._rejoining is None:
            self._rejoining = asyncio.get_running_loop().create_task(self._rejoin())

    async def _rejoin(self) -> None:
        try:
            for _ in range(1200):  # a minute; then the next request reconnects
                if not self._held:
                    return
                try:
                    await self._connection()
                    return
                except OSError:
                    await asyncio.sleep(0.05)
        finally:
            self._rejoining = None

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()  # the service frees this connection's slots; re-held on reconnect
            self._conn = None

    async def admit(self, who: str, budget: Budget, *, generation: bool, lease: str) -> RateLimited | None:
        if unlimited(budget, generation):
            return None
        ident = next(self._ids)
        conn: _Connection | None = None
        try:
            async with asyncio.timeout(self.timeout):
                conn = await self._connection()
                waiter = conn.expect(ident)
                conn.send_message(["a", ident, who, budget.rpm or 0, budget.tpm or 0,
                                   budget.concurrent or 0, 1 if generation else 0, lease])
                _, kind, retry = await waiter
        except asyncio.CancelledError:
            if conn is not None:  # a slot the admission may have taken is given back (after it:
                conn.waiting.pop(ident, None)  # one connection keeps the order; a no-op if none)
                if generation and conn.alive:
                    conn.send_message(["r", who, lease, 0])
            raise
        except (OSError, TimeoutError, ValueError) as exc:  # ValueError: an answer not [id, kind, retry]
            self._drop()
            log.warning("limits: the machine's counter service is unavailable (%s); refusing with 503",
                        type(exc).__name__)
            raise CountersUnavailable("The per-key limits service of this machine is unavailable.",
                                      retry_after=1.0) from None
        if kind < 0:  # a restarted service, still taking back the workers' slots
            raise CountersUnavailable("The per-key limits service of this machine is restarting.",
                                      retry_after=1.0)
        if kind == 0:
            if generation:
                self._held[lease] = who
            return None
        return _refusal(kind, budget, retry)

    def release(self, who: str, lease: str, tokens: int) -> None:
        if self._held.pop(lease, None) is None:  # never counted (no limit applied)
            return
        conn = self._conn
        if conn is not None and conn.alive:
            conn.send_message(["r", who, lease, tokens])
        # else: the service freed the slot when the connection closed; these tokens go uncharged

    async def open_socket(self, who: str, cap: int) -> str | None:
        """One of ``who``'s ``cap`` open WebSockets for the whole machine (``[limits]
        max_websockets``): a concurrency slot of its own name (``ws`` + ``who``), held like a
        generation's (freed when this worker's connection closes, taken back after a restart)
        and refreshed while open, so it never expires under a long session.  Its lease, or None
        when every place is taken; :class:`CountersUnavailable` when the service is."""
        lease = uuid.uuid4().hex
        name = f"ws {who}"
        if await self.admit(name, Budget(None, None, cap), generation=True, lease=lease) is not None:
            return None
        self._sockets[lease] = name
        if self._refresher is None:
            self._refresher = asyncio.get_running_loop().create_task(self._keep_sockets())
        return lease

    def close_socket(self, lease: str) -> None:
        name = self._sockets.pop(lease, None)
        if name is not None:
            self.release(name, lease, 0)

    async def _keep_sockets(self) -> None:
        try:
            while self._sockets:
                await asyncio.sleep(self.refresh)
                conn = self._conn
                if conn is not None and conn.alive:
                    for lease, name in self._sockets.items():
                        conn.send_message(["h", name, lease])
        finally:
            self._refresher = None

    async def aclose(self) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
        self._drop()


def from_environment(lease_seconds: float = 900.0) -> MachineCounters | None:
    """The worker's counters when ``serve`` started the machine's counter service, else None
    (``lease_seconds``: the service's, ``[redis] lease_seconds``)."""
    path = os.environ.get(SOCKET_ENV)
    return MachineCounters(path, lease_seconds=lease_seconds) if path else None


def main(argv: list[str]) -> int:
    """``python -m app.http.machine_counters SOCKET LEASE_SECONDS PARENT_PID [GRACE [SIGNALS [METRICS
    [GATES]]]]`` (SIGNALS or GATES empty: no signal hub, no replica gates)."""
    path, lease_seconds, parent = argv[0], float(argv[1]), int(argv[2])
    grace = float(argv[3]) if len(argv) > 3 else 0.0
    signals = argv[4] if len(argv) > 4 and argv[4] else None
    metrics = argv[5] if len(argv) > 5 and argv[5] else None  # the workers' /metrics relay (metrics_relay)
    gates = argv[6] if len(argv) > 6 and argv[6] else None  # the replica gates (gate_hub)
    logging.basicConfig(level=logging.WARNING, format="ocm-gateway limits service: %(message)s")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(path, lease_seconds, parent, grace, signals=signals, metrics=metrics,
                              gates=gates))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
