"""``/metrics`` for the whole machine with ``serve --workers N``: a scrape answered by any worker
shows every worker's counts (issue 40).

Mechanism: a per-scrape fan-out through a *relay* in the machine service's process (the one
``serve`` starts for per-key limits and the signal hub, :mod:`app.http.machine_counters`), on a
socket of its own (``metrics.sock`` in the same 0700 directory, path in
``OCMGW_METRICS_SOCKET``).  Every worker keeps one connection to it
(:meth:`MachineMetrics.run`).  The worker that is scraped sends its own snapshot
(:func:`app.metrics.snapshot`) with the request; the relay asks every other worker for theirs
and answers when all have, or after :data:`DEADLINE` seconds with what it has; the scraped
worker adds them up (:func:`app.metrics.merge`, off the event loop) and renders the text.
Nothing happens between scrapes: no per-request cost, no periodic work.  Prometheus's own
multiprocess mode was not used: it keeps values in mmap'd files per process and cannot hold the
custom collectors (the replica queues) nor ``set_function`` gauges (admission) of
:mod:`app.metrics`.

Contract:

* A scrape never hangs: the relay answers within :data:`DEADLINE` (0.5 s); a worker that did
  not answer by then is left out of ``ocm_workers_reporting`` (``ocm_workers``: the workers
  connected) and its last snapshot adds its counters and histograms (so a machine total never
  goes backwards while its workers live) but not its gauges.  The relay unreachable or silent
  for :data:`TIMEOUT`: the scrape shows this worker alone (``ocm_workers_reporting`` 1,
  ``ocm_workers`` 0).
* A worker that dies (its connection closes) leaves no gauge behind; its counters and
  histograms, as of its last snapshot (a worker shutting down sends a final one), are kept in
  the relay's *retired* totals and added to every scrape, so the machine's counters stay
  monotonic across a worker's restart (Prometheus would read a drop as a reset and a spike).
  The relay restarted (killed), the retired totals start again from zero: one reset.
* Bounded memory: the relay keeps one snapshot per connected worker (each at most
  :data:`MAX_LINE`; a worker whose snapshot is bigger sends none and is not reporting) and
  retired totals of at most :data:`RETIRED_SAMPLES` samples (beyond that a dead worker's counts
  are dropped, with a warning).
* With one worker there is no relay and ``/metrics`` is exactly the registry, as before.  With
  Redis between replicas each replica is its own scrape target; its workers still merge
  (``serve`` starts the machine service for the relay alone then).

* *Views* ride the same fan-out: :meth:`MachineMetrics.view` gathers every worker's rows of a
  named view (``views["runs"]``: the runs in flight, :func:`run_rows`, for the console's live
  runs), with the same deadline; nothing is cached for them.

The wire, one JSON array a line: worker → relay ``["g", id, deadline_ms, snapshot]`` (a scrape),
answered ``[id, workers, [fresh snapshot, ...], [stale snapshot, ...]]``; relay → worker
``["q", tag]``, answered ``["s", tag, snapshot]`` (``tag`` 0: a final snapshot at shutdown);
a view: ``["v", id, deadline_ms, name]``, fanned out as ``["v", tag, name]``, answered
``["w", tag, rows]``, and answered to the asker ``[id, workers, [rows, ...], []]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric

from app.engine.signal_hub import split_lines
from app.metrics import Fixed, merge, snapshot

if TYPE_CHECKING:
    from app.engine.engine import Engine

log = logging.getLogger("ocm_gateway")
METRICS_ENV = "OCMGW_METRICS_SOCKET"
DEADLINE = 0.5  # the relay waits this long for the other workers' snapshots
TIMEOUT = 1.0  # a worker waits this long for the relay's answer
MAX_LINE = 8 * 1024 * 1024
RETIRED_SAMPLES = 200_000
Snapshot = list[Any]


# --- the relay (in the machine service's process) -------------------------------------------

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


class _Worker(asyncio.Protocol):
    """One worker's connection to the relay."""

    def __init__(self, relay: Relay) -> None:
        self.relay = relay
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.relay.workers[self] = None

    def send(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        lines = split_lines(self.buffer, data, MAX_LINE)
        try:
            if lines is None:
                raise ValueError("line too long")
            for line in lines:
                if line:
                    self._handle(orjson.loads(line))
        except (ValueError, TypeError, IndexError):
            log.warning("metrics relay: a malformed line; closing that connection")
            self.transport.abort()

    def _handle(self, msg: list[Any]) -> None:
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
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # a socket left by a service that was killed
    server = await asyncio.get_running_loop().create_unix_server(relay.protocol, path)
    os.chmod(path, 0o600)
    return server, relay


# --- the workers' side ----------------------------------------------------------------------

class _Link(asyncio.Protocol):
    def __init__(self, owner: MachineMetrics) -> None:
        self.owner = owner
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.waiting: dict[int, asyncio.Future[list[Any]]] = {}
        self.closed = asyncio.Event()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def send(self, line: bytes) -> None:
        if self.transport is not None and not self.closed.is_set():
            self.transport.write(line)

    async def request(self, line: bytes, ident: int, within: float) -> list[Any]:
        waiter: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self.waiting[ident] = waiter
        self.send(line + b"\n")
        try:
            async with asyncio.timeout(within):
                return await waiter
        finally:
            self.waiting.pop(ident, None)

    def data_received(self, data: bytes) -> None:
        lines = split_lines(self.buffer, data, MAX_LINE * 64)
        if lines is None:
            self.close()
            return
        try:
            for line in lines:
                if line:
                    self._handle(orjson.loads(line))
        except (ValueError, TypeError, IndexError):
            log.warning("metrics: a malformed line from the machine's metrics relay; reconnecting")
            self.close()

    def _handle(self, msg: list[Any]) -> None:
        if msg[0] == "q":  # the relay wants this worker's snapshot for another's scrape
            own = self.owner.own_line()
            if own is not None:
                self.send(b'["s",' + orjson.dumps(int(msg[1])) + b"," + own + b"]\n")
        elif msg[0] == "v":  # ... or its rows of a view (the console's runs)
            self.send(orjson.dumps(["w", int(msg[1]), self.owner.rows(str(msg[2]))]) + b"\n")
        else:
            waiter = self.waiting.pop(msg[0], None)
            if waiter is not None and not waiter.done():
                waiter.set_result(msg)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()
        for waiter in self.waiting.values():
            if not waiter.done():
                waiter.set_exception(ConnectionResetError("the metrics relay closed the connection"))
        self.waiting.clear()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.abort()


class MachineMetrics:
    """A worker's side: answers the relay with its registry's snapshot, and renders a scrape
    of the whole machine (see the module docstring)."""

    def __init__(self, path: str, registry: CollectorRegistry, *, deadline: float = DEADLINE,
                 timeout: float = TIMEOUT) -> None:
        self.path, self.registry = path, registry
        self.deadline, self.timeout = deadline, timeout
        self._link: _Link | None = None
        self._lock = asyncio.Lock()
        self._ids = itertools.count(1)
        self.views: dict[str, Callable[[], list[Any]]] = {}  # name -> this worker's rows

    def rows(self, view: str) -> list[Any]:
        make = self.views.get(view)
        return make() if make is not None else []

    async def view(self, name: str) -> tuple[list[Any], int, int]:
        """Every worker's rows of view ``name`` (this worker's first), the workers that answered
        within the deadline and the workers connected; the relay away: this worker's alone."""
        own = self.rows(name)
        ident = next(self._ids)
        try:
            link = await self.link()
            line = orjson.dumps(["v", ident, int(self.deadline * 1000), name])
            _, workers, fresh, _ = await link.request(line, ident, self.timeout)
        except (OSError, TimeoutError, ValueError):
            return own, 1, 0
        return [*own, *(row for rows in fresh for row in rows)], 1 + len(fresh), workers

    def own_line(self) -> bytes | None:
        line = orjson.dumps(snapshot(self.registry))
        if len(line) > MAX_LINE - 64:
            log.warning("metrics: this worker's registry is over %d bytes; not sent to the relay", MAX_LINE)
            return None
        return line

    async def link(self) -> _Link:
        link = self._link
        if link is not None and not link.closed.is_set():
            return link
        async with self._lock, asyncio.timeout(self.timeout):
            if self._link is None or self._link.closed.is_set():
                _, self._link = await asyncio.get_running_loop().create_unix_connection(
                    lambda: _Link(self), self.path)
            return self._link

    async def run(self) -> None:
        """Keep the connection open (reconnecting every 50 ms, then up to every second) until
        cancelled, so the other workers' scrapes reach this one."""
        delay = 0.05
        while True:
            try:
                link = await self.link()
            except (OSError, TimeoutError):
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            delay = 0.05
            await link.closed.wait()

    async def gather(self) -> tuple[Snapshot, list[Snapshot], list[Snapshot], int]:
        """(this worker's snapshot, the others' fresh ones, stale ones, workers connected); the
        relay away: no others, 0 workers."""
        own = snapshot(self.registry)
        own_line = orjson.dumps(own)
        ident = next(self._ids)
        try:
            link = await self.link()
            sent = own_line if len(own_line) <= MAX_LINE - 64 else b"[]"
            line = b'["g",' + orjson.dumps([ident, int(self.deadline * 1000)])[1:-1] + b"," + sent + b"]"
            _, workers, fresh, stale = await link.request(line, ident, self.timeout)
        except (OSError, TimeoutError, ValueError) as exc:
            log.warning("metrics: the machine's metrics relay is unavailable (%s); this worker's "
                        "counts only", type(exc).__name__)
            return own, [], [], 0
        return own, fresh, stale, workers

    async def render(self) -> bytes:
        """The text of a scrape of the whole machine."""
        own, fresh, stale, workers = await self.gather()
        return await asyncio.to_thread(_render, [own, *fresh], stale, workers)

    def close(self) -> None:
        """Send a final snapshot and close (shutdown: the relay keeps this worker's counts)."""
        link = self._link
        if link is not None and link.transport is not None and not link.closed.is_set():
            own = self.own_line()
            if own is not None:
                link.send(b'["s",0,' + own + b"]\n")
            link.transport.close()


def _render(fresh: list[Snapshot], stale: list[Snapshot], workers: int) -> bytes:
    metrics = merge(fresh, stale)
    connected = GaugeMetricFamily("ocm_workers", "Workers of this machine connected to its metrics relay")
    connected.add_metric([], workers)
    reporting = GaugeMetricFamily("ocm_workers_reporting",
                                  "Workers whose counts in this scrape are current (others: as last heard)")
    reporting.add_metric([], len(fresh))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed([*metrics, connected, reporting]))
    return generate_latest(registry)


def run_rows(engine: Engine) -> list[dict[str, Any]]:
    """This worker's runs in flight, as the console's live view (``/admin/runs``) lists them."""
    now = time.time()
    return [{"id": run.id, "model": run.model, "key": run.owner.tenant or None, "mode": run.mode,
             "age_seconds": round(now - run.started_at, 1), "tokens_so_far": run.chunks}
            for run in list(engine.runs.values())]


def from_environment(registry: CollectorRegistry) -> MachineMetrics | None:
    """The worker's side when ``serve`` started the machine's relay, else None."""
    path = os.environ.get(METRICS_ENV)
    return MachineMetrics(path, registry) if path else None
