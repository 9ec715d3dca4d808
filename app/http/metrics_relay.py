"""The machine's ``/metrics`` relay, the service side of :mod:`app.http.machine_metrics`: it runs
in the machine service's process (:mod:`app.http.machine_counters`) on a socket of its own
(``metrics.sock``, path in ``OCMGW_METRICS_SOCKET``), one connection per worker.

Contract (the mechanism and the guarantees are described in :mod:`app.http.machine_metrics`):

* A scrape ``["g", id, deadline_ms, snapshot]`` from one worker: its snapshot is kept, every
  other connected worker is asked ``["q", tag]`` and answers ``["s", tag, snapshot]``; the
  asker gets ``[id, workers, [fresh snapshot, ...], [stale snapshot, ...]]`` when all have
  answered, or at the deadline (at most 10 s) with what it has: the others' last snapshots
  and the retired totals count as stale (their counters and histograms are added, not their
  gauges).  ``["s", 0, snapshot]`` unasked: a worker's final snapshot at shutdown.
* A view ``["v", id, deadline_ms, name]``: fanned out as ``["v", tag, name]``, answered
  ``["w", tag, rows]``, and to the asker ``[id, workers, [rows, ...], []]``; nothing kept.
* A worker's connection closing: its gauges go; its counters and histograms, as of its last
  snapshot, join the *retired* totals (at most :data:`RETIRED_SAMPLES` samples: beyond that
  a dead worker's counts are dropped, with a warning), so the machine's counters never go
  backwards; a scrape waiting for that worker is answered without it.
* A line over :data:`MAX_LINE` or one that does not parse closes its connection
  (:class:`~app.core.json_lines.LinePeer`).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any

import orjson
from prometheus_client.core import Metric

from app.core.json_lines import LinePeer, listen_unix
from app.metrics import merge

log = logging.getLogger("ocm_gateway")
MAX_LINE = 8 * 1024 * 1024  # one worker's snapshot line
RETIRED_SAMPLES = 200_000
Snapshot = list[Any]


class _Scrape:
    __slots__ = ("fresh", "handle", "ident", "requester", "view", "waiting")

    def __init__(self, requester: _Worker, ident: int, waiting: set[_Worker], view: bool) -> None:
        self.requester, self.ident, self.waiting, self.view = requester, ident, waiting, view
        self.fresh: list[Snapshot] = []
        self.handle: asyncio.TimerHandle | None = None


class Relay:
    """The relay's state, shared by every worker's connection."""

    def __init__(self) -> None:
        self.workers: dict[_Worker, Snapshot | None] = {}  # connected: the last snapshot heard
        self.retired: Snapshot = []  # counters and histograms of workers gone
        self.scrapes: dict[int, _Scrape] = {}
        self.tags = itertools.count(1)

    def protocol(self) -> _Worker:
        return _Worker(self)

    def scrape(self, requester: _Worker, ident: int, deadline_ms: int, own: Snapshot | None,
               view: str | None = None) -> None:
        """Ask every other worker for its snapshot (``view`` None) or its rows of ``view``."""
        if view is None:
            self.workers[requester] = own
        others = {w for w in self.workers if w is not requester}
        tag = next(self.tags)
        job = self.scrapes[tag] = _Scrape(requester, ident, others, view is not None)
        if not others:
            self._answer(tag)
            return
        line = orjson.dumps(["q", tag] if view is None else ["v", tag, view]) + b"\n"
        for worker in others:
            worker.send(line)
        job.handle = asyncio.get_running_loop().call_later(
            max(0.0, min(deadline_ms, 10_000) / 1000), self._answer, tag)

    def heard(self, worker: _Worker, tag: int, snap: Snapshot, view: bool = False) -> None:
        if worker in self.workers and not view:
            self.workers[worker] = snap
        job = self.scrapes.get(tag)
        if job is not None and worker in job.waiting:
            job.waiting.discard(worker)
            job.fresh.append(snap)
            if not job.waiting:
                self._answer(tag)

    def _answer(self, tag: int) -> None:
        job = self.scrapes.pop(tag, None)
        if job is None:
            return
        if job.handle is not None:
            job.handle.cancel()
        stale = [s for w, s in self.workers.items() if w in job.waiting and s is not None and not job.view]
        if self.retired and not job.view:
            stale.append(self.retired)
        job.requester.send(orjson.dumps([job.ident, len(self.workers), job.fresh, stale]) + b"\n")

    def lost(self, worker: _Worker) -> None:
        """A worker's connection closed: its gauges go, its counters join the retired totals."""
        last = self.workers.pop(worker, None)
        if last:  # first: a scrape waiting for this worker is answered with its counts
            retired = _families(merge([], [self.retired, last]))
            if sum(len(f[3]) for f in retired) > RETIRED_SAMPLES:
                log.warning("metrics relay: too many retired samples; a dead worker's counts are dropped")
            else:
                self.retired = retired
        for tag, job in list(self.scrapes.items()):
            if job.requester is worker:
                self.scrapes.pop(tag)
                if job.handle is not None:
                    job.handle.cancel()
            elif worker in job.waiting:
                job.waiting.discard(worker)
                if not job.waiting:
                    self._answer(tag)


def _families(metrics: list[Metric]) -> Snapshot:
    return [[m.name, m.type, m.documentation, [[s.name, s.labels, s.value] for s in m.samples]]
            for m in metrics]


class _Worker(LinePeer):
    """One worker's connection to the relay."""

    max_line = MAX_LINE
    name = "metrics relay"

    def __init__(self, relay: Relay) -> None:
        super().__init__()
        self.relay = relay

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.relay.workers[self] = None

    def handle(self, msg: list[Any]) -> None:
        if msg[0] == "g" and isinstance(msg[1], int) and isinstance(msg[2], int) and isinstance(msg[3], list):
            self.relay.scrape(self, msg[1], msg[2], msg[3])
        elif msg[0] in ("s", "w") and isinstance(msg[1], int) and isinstance(msg[2], list):
            self.relay.heard(self, msg[1], msg[2], view=msg[0] == "w")
        elif msg[0] == "v" and isinstance(msg[1], int) and isinstance(msg[2], int):
            self.relay.scrape(self, msg[1], msg[2], None, str(msg[3]))
        else:
            raise ValueError(msg[0])

    def connection_lost(self, exc: Exception | None) -> None:
        self.relay.lost(self)
        self.transport = None


async def listen(path: str) -> tuple[asyncio.Server, Relay]:
    """A relay listening on ``path`` (mode 0600)."""
    relay = Relay()
    return await listen_unix(path, relay.protocol), relay
