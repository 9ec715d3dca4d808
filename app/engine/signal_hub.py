"""The machine's signal hub: what Redis carries between replicas, carried between the workers
of one machine without Redis (``serve --workers N``).

It runs inside the machine's counter service process (:mod:`app.http.machine_counters`), on a
socket of its own beside the counters' one (``signals.sock`` in the same 0700 directory, path
in ``OCMGW_SIGNALS_SOCKET``): one process and one event loop for the machine, so nothing else
to start, restart or watch, and a fault on one socket's protocol never touches the other's.
Each worker keeps one connection (:class:`~app.engine.machine_signals.MachineSignals`).

The wire: one JSON array a line, in order on each connection (:mod:`app.core.json_lines`).

* ``["c", id, run_id]`` cancel: sent at once to the run's owner (the connection that opened
  its copy) and answered ``[id, 1]``; owner unknown (not a background run, or its copy was
  lost): sent to every other connection and answered ``[id, 0]``.  Delivered as
  ``["c", run_id]``; the caller confirms the effect in the store, as with Redis.
* ``["k", url, seconds]`` an upstream cooldown: sent to every other connection as it came.
* ``["f", id, deadline_ms, what]`` / ``["F", tag]``: ask every other worker to run a handler
  and answer once all have (a key revoked, ``/admin/usage``'s flush): :mod:`app.engine.machine_asks`.
* ``["o", run_id]`` / ``["e", run_id, payload]`` / ``["z", run_id]`` / ``["x", run_id]``: the
  owner opens a background run's copy, adds a payload, ends it, or gives it up (the rest will
  only be in the store).  Not answered.
* ``["r", id, run_id, pos, block_ms]`` read: the payloads from position ``pos`` (0: the run's
  first), answered ``[id, state, next_pos, [payload, ...]]`` as soon as there is one, or empty
  after ``block_ms``.  ``state`` 0: more may come; 1: the copy ended (these are its last);
  2: the hub cannot give what follows ``pos`` (trimmed, given up, its owner's connection
  closed mid-run): the reader goes on from the store.  A run the hub has not heard of yet is
  waited for like a quiet one.

Bounded memory: a run keeps at most :data:`RUN_BYTES` of payloads (the oldest dropped: a
reader behind them gets state 2), the hub :data:`TOTAL_BYTES` over all runs (ended copies
dropped first, oldest first, then the largest running ones, given up); an ended copy is kept
:data:`KEEP_SECONDS` for readers finishing it, then dropped (later readers read the store).
Reads are pulled (one answer per request, at most :data:`ANSWER_BYTES`), so a slow follower
costs the hub nothing but its place in the log; a connection whose unread output passes
:data:`PEER_BUFFER` (a stuck worker) is closed.  A line over :data:`MAX_LINE` or one that does
not parse closes its connection.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import Any

import orjson

from app.core.json_lines import LinePeer, listen_unix
from app.core.json_lines import count as _int
from app.core.json_lines import text as _text
from app.engine.machine_asks import HubAsks

log = logging.getLogger("ocm_gateway")
SIGNALS_ENV = "OCMGW_SIGNALS_SOCKET"
RUN_BYTES = 16 * 1024 * 1024  # a run's copy (a follower further behind reads the store)
TOTAL_BYTES = 256 * 1024 * 1024  # every copy together
KEEP_SECONDS = 60.0  # an ended copy, for readers finishing it
IDLE_SECONDS = 600.0  # a copy no owner opened (asked for by a reader, never heard of)
ANSWER_BYTES = 256 * 1024  # one read's answer (at least one payload)
ANSWER_COUNT = 512
PEER_BUFFER = 64 * 1024 * 1024  # unread output of one connection
MAX_LINE = RUN_BYTES + 4096


class _Log:
    """One background run's copy: payloads at positions ``base`` .. ``base + len(events)``."""

    __slots__ = ("base", "ended", "events", "gone", "owner", "size", "touched", "waiting")

    def __init__(self, now: float) -> None:
        self.events: collections.deque[bytes] = collections.deque()
        self.base = 0
        self.size = 0
        self.ended = False
        self.gone = False  # what follows is not here (given up, trimmed, owner lost)
        self.owner: _Peer | None = None
        self.touched = now  # opened, or ended
        self.waiting: list[tuple[_Peer, int, int, asyncio.TimerHandle]] = []

    def drop(self) -> None:
        self.base += len(self.events)
        self.events.clear()
        self.size = 0


class SignalHub:
    """The hub's state, shared by every connection (one per worker)."""

    def __init__(self) -> None:
        self.peers: set[_Peer] = set()
        self.logs: dict[str, _Log] = {}
        self.total = 0
        self.asks = HubAsks()  # "f": every other worker runs a handler (app/engine/machine_asks.py)

    def protocol(self) -> _Peer:
        return _Peer(self)

    # -- signals ------------------------------------------------------------------
    def cancel(self, sender: _Peer, ident: int, run_id: str) -> None:
        line = orjson.dumps(["c", run_id]) + b"\n"
        entry = self.logs.get(run_id)
        owner = entry.owner if entry is not None and not entry.ended else None
        if owner is not None and owner in self.peers:
            owner.send(line)
        else:
            for peer in self.peers:
                if peer is not sender:
                    peer.send(line)
        sender.send(orjson.dumps([ident, 1 if owner is not None else 0]) + b"\n")

    def broadcast(self, sender: _Peer, line: bytes) -> None:
        for peer in self.peers:
            if peer is not sender:
                peer.send(line + b"\n")

    # -- copies ---------------------------------------------------------------------
    def _log(self, run_id: str) -> _Log:
        entry = self.logs.get(run_id)
        if entry is None:
            entry = self.logs[run_id] = _Log(time.monotonic())
        return entry

    def open(self, peer: _Peer, run_id: str) -> None:
        entry = self._log(run_id)
        entry.owner, entry.touched = peer, time.monotonic()

    def push(self, run_id: str, payload: bytes) -> None:
        entry = self.logs.get(run_id)
        if entry is None or entry.ended or entry.gone:
            return  # dropped (memory) or never opened: its readers read the store
        entry.events.append(payload)
        entry.size += len(payload)
        self.total += len(payload)
        while entry.size > RUN_BYTES and entry.events:  # a follower behind these reads the store
            dropped = entry.events.popleft()
            entry.base += 1
            entry.size -= len(dropped)
            self.total -= len(dropped)
        if self.total > TOTAL_BYTES:
            self._shed()
        self._wake(entry)

    def end(self, run_id: str, gone: bool = False) -> None:
        entry = self.logs.get(run_id)
        if entry is not None and not entry.ended:
            self._finish(entry, gone)

    def _finish(self, entry: _Log, gone: bool) -> None:
        entry.gone = entry.gone or gone
        entry.ended = True
        entry.owner, entry.touched = None, time.monotonic()
        self._wake(entry)

    def read(self, peer: _Peer, ident: int, run_id: str, pos: int, block_ms: int) -> None:
        entry = self._log(run_id)
        answer = self._answer(entry, ident, pos)
        if answer is not None:
            peer.send(answer)
            return
        handle = asyncio.get_running_loop().call_later(
            max(0.0, min(block_ms, 60_000) / 1000), self._expire, entry, peer, ident)
        entry.waiting.append((peer, ident, pos, handle))

    def _answer(self, entry: _Log, ident: int, pos: int) -> bytes | None:
        """The answer to a read at ``pos``, or None while there is nothing to say yet."""
        if pos < entry.base:
            return orjson.dumps([ident, 2, pos, []]) + b"\n"  # trimmed: the store has the rest
        start = pos - entry.base
        if start < len(entry.events):
            chunk: list[bytes] = []
            size = 0
            for i in range(start, min(len(entry.events), start + ANSWER_COUNT)):
                payload = entry.events[i]
                if chunk and size + len(payload) > ANSWER_BYTES:
                    break
                chunk.append(payload)
                size += len(payload)
            nxt = pos + len(chunk)
            last = nxt == entry.base + len(entry.events) and entry.ended and not entry.gone
            head = orjson.dumps([ident, 1 if last else 0, nxt])[:-1]
            return head + b",[" + b",".join(chunk) + b"]]\n"
        if entry.gone:
            return orjson.dumps([ident, 2, pos, []]) + b"\n"
        if entry.ended:
            return orjson.dumps([ident, 1, pos, []]) + b"\n"
        return None

    def _wake(self, entry: _Log) -> None:
        waiting, entry.waiting = entry.waiting, []
        for peer, ident, pos, handle in waiting:
            answer = self._answer(entry, ident, pos)
            if answer is None:
                entry.waiting.append((peer, ident, pos, handle))
            else:
                handle.cancel()
                peer.send(answer)

    def _expire(self, entry: _Log, peer: _Peer, ident: int) -> None:
        for i, (who, number, pos, _) in enumerate(entry.waiting):
            if who is peer and number == ident:
                del entry.waiting[i]
                peer.send(orjson.dumps([ident, 0, pos, []]) + b"\n")
                return

    def _give_up(self, entry: _Log) -> None:
        self.total -= entry.size
        entry.drop()
        entry.gone = True
        self._wake(entry)

    def _shed(self) -> None:
        """Over :data:`TOTAL_BYTES`: ended copies first (oldest first), then the largest
        running ones, given up (their readers read the store)."""
        ended = sorted((e for e in self.logs.values() if e.ended and e.size), key=lambda e: e.touched)
        running = sorted((e for e in self.logs.values() if not e.ended and e.size), key=lambda e: -e.size)
        for entry in [*ended, *running]:
            if self.total <= TOTAL_BYTES * 3 // 4:
                return
            self._give_up(entry)

    def lost(self, peer: _Peer) -> None:
        """A connection closed: its runs' copies end (their readers read the store), its reads
        are forgotten."""
        self.peers.discard(peer)
        self.asks.lost(peer)
        for entry in self.logs.values():
            if entry.waiting:
                for _, _, _, handle in [w for w in entry.waiting if w[0] is peer]:
                    handle.cancel()
                entry.waiting = [w for w in entry.waiting if w[0] is not peer]
            if entry.owner is peer:
                self._finish(entry, gone=True)

    def sweep(self, now: float) -> None:
        """Drop ended copies after :data:`KEEP_SECONDS`, and copies never opened by an owner
        after :data:`IDLE_SECONDS` with nobody waiting."""
        for run_id in list(self.logs):
            entry = self.logs[run_id]
            if entry.waiting:
                continue
            if ((entry.ended and now - entry.touched > KEEP_SECONDS)
                    or (entry.owner is None and not entry.ended and now - entry.touched > IDLE_SECONDS)):
                self.total -= entry.size
                del self.logs[run_id]


class _Peer(LinePeer):
    """One worker's connection (lines over :data:`MAX_LINE` or malformed: closed)."""

    max_line = MAX_LINE
    name = "signal hub"

    def __init__(self, hub: SignalHub) -> None:
        super().__init__()
        self.hub = hub

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.hub.peers.add(self)

    def write(self, data: bytes) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if transport.get_write_buffer_size() > PEER_BUFFER:
            log.warning("signal hub: a worker does not read its connection; closing it")
            transport.abort()
            return
        transport.write(data)

    def handle(self, msg: list[Any]) -> None:
        op, hub = msg[0], self.hub
        if op == "e":
            hub.push(_text(msg[1]), orjson.dumps(msg[2]))
        elif op == "r":
            hub.read(self, _int(msg[1]), _text(msg[2]), _int(msg[3]), _int(msg[4]))
        elif op == "o":
            hub.open(self, _text(msg[1]))
        elif op in ("z", "x"):
            hub.end(_text(msg[1]), gone=op == "x")
        elif op == "c":
            hub.cancel(self, _int(msg[1]), _text(msg[2]))
        elif op == "k":
            hub.broadcast(self, orjson.dumps(["k", _text(msg[1]), float(msg[2])]))
        elif op == "f":
            hub.asks.ask(self, hub.peers, _int(msg[1]), _int(msg[2]), msg[3])
        elif op == "F":
            hub.asks.answered(self, _int(msg[1]))
        else:
            raise ValueError(op)

    def connection_lost(self, exc: Exception | None) -> None:
        self.hub.lost(self)
        self.transport = None


async def listen(path: str) -> tuple[asyncio.Server, SignalHub]:
    """A hub listening on ``path`` (mode 0600); its owner calls :meth:`SignalHub.sweep` now
    and then (the counter service's half-second tick)."""
    hub = SignalHub()
    return await listen_unix(path, hub.protocol), hub
