"""Ask every other worker of ``serve --workers N`` to do something, and wait until they have:
the signal hub's ``f`` message (:mod:`app.engine.signal_hub`, worker side
:meth:`app.engine.machine_signals.MachineSignals.everywhere`).  Used where "at once on every
worker" is promised: a key revoked, rotated or changed through ``/admin/keys`` is refused by
every worker before the admin call returns (:mod:`app.http.keys`), and ``/admin/usage`` reads
the store after every worker has flushed its counts.

The wire, on the signal hub's connections (one JSON array a line):

* worker → hub ``["f", id, deadline_ms, what]``: ``what`` is a JSON array whose first element
  names the handler (``["keys", [digest, ...]]``, ``["usage"]``);
* hub → every other worker ``["f", tag, what]``; each answers ``["F", tag]`` once its handler
  is done (a handler it does not have: at once, so nobody waits for a worker that cannot help);
* hub → asker ``[id, answered, asked]`` when every worker asked has answered, or at the
  deadline (at most :data:`MAX_DEADLINE_MS`) with those that had; a worker whose connection
  closes is no longer waited for nor counted (it forgets what it held when it reconnects:
  :attr:`WorkerAsks.on_link`).

Bounded: an ask lives until its deadline at most; a worker's handler failing still answers
(the asker learns "answered", not "succeeded": each handler logs its own failure).
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import orjson

log = logging.getLogger("ocm_gateway")
MAX_DEADLINE_MS = 10_000
Handler = Callable[[list[Any]], Awaitable[None] | None]


class Sender(Protocol):
    def send(self, data: bytes) -> None: ...


class _Ask:
    __slots__ = ("asked", "asker", "handle", "ident", "waiting")

    def __init__(self, asker: Sender, ident: int, waiting: set[Sender]) -> None:
        self.asker, self.ident, self.waiting = asker, ident, waiting
        self.asked = len(waiting)
        self.handle: asyncio.TimerHandle | None = None


class HubAsks:
    """The hub's side: the asks waiting for their workers' answers."""

    def __init__(self) -> None:
        self.pending: dict[int, _Ask] = {}
        self._tags = itertools.count(1)

    def ask(self, asker: Sender, peers: set[Any], ident: int, deadline_ms: int, what: list[Any]) -> None:
        if not isinstance(what, list) or not what or not isinstance(what[0], str):
            raise TypeError(what)
        others = {p for p in peers if p is not asker}
        tag = next(self._tags)
        job = self.pending[tag] = _Ask(asker, ident, others)
        line = orjson.dumps(["f", tag, what]) + b"\n"
        for peer in others:
            peer.send(line)
        if not others:
            self._answer(tag)
            return
        job.handle = asyncio.get_running_loop().call_later(
            min(deadline_ms, MAX_DEADLINE_MS) / 1000, self._answer, tag)

    def answered(self, peer: Sender, tag: int) -> None:
        job = self.pending.get(tag)
        if job is not None and peer in job.waiting:
            job.waiting.discard(peer)
            if not job.waiting:
                self._answer(tag)

    def _answer(self, tag: int) -> None:
        job = self.pending.pop(tag, None)
        if job is None:
            return
        if job.handle is not None:
            job.handle.cancel()
        job.asker.send(orjson.dumps([job.ident, job.asked - len(job.waiting), job.asked]) + b"\n")

    def lost(self, peer: Sender) -> None:
        """A connection closed: its asks are dropped, nobody waits for its answers."""
        for tag, job in list(self.pending.items()):
            if job.asker is peer:
                self.pending.pop(tag)
                if job.handle is not None:
                    job.handle.cancel()
            elif peer in job.waiting:
                job.asked -= 1  # not answered, and no longer asked
                job.waiting.discard(peer)
                if not job.waiting:
                    self._answer(tag)


class WorkerAsks:
    """A worker's side: its handlers by name, and what to do when its connection to the hub is
    made (again): what was asked while it was away was not heard (:attr:`on_link`)."""

    def __init__(self) -> None:
        self.handlers: dict[str, Handler] = {}
        self.on_link: list[Callable[[], None]] = []
        self._running: set[asyncio.Task[None]] = set()

    def linked(self) -> None:
        for hook in self.on_link:
            hook()

    def heard(self, tag: int, what: list[Any], reply: Callable[[bytes], None]) -> None:
        """Run the handler ``what`` names and answer ``["F", tag]`` through ``reply`` when it is
        done (at once for a plain function or a handler this worker does not have)."""
        done = orjson.dumps(["F", int(tag)]) + b"\n"
        handler = self.handlers.get(what[0]) if what and isinstance(what[0], str) else None
        try:
            result = handler(list(what[1:])) if handler is not None else None
        except Exception as exc:  # a handler's fault is its own: the asker is still answered
            log.warning("machine ask %r failed here (%s)", what[0], type(exc).__name__)
            result = None
        if not inspect.isawaitable(result):
            reply(done)
            return

        async def finish(pending: Awaitable[None]) -> None:
            try:
                await pending
            except Exception as exc:
                log.warning("machine ask %r failed here (%s)", what[0], type(exc).__name__)
            reply(done)

        task = asyncio.get_running_loop().create_task(finish(result))
        self._running.add(task)
        task.add_done_callback(self._running.discard)
