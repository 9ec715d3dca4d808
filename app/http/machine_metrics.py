"""``/metrics`` for the whole machine with ``serve --workers N``: a scrape answered by any worker
shows every worker's counts (issue 40).

Mechanism: a per-scrape fan-out through a *relay* (:mod:`app.http.metrics_relay`) in the
machine service's process (the one ``serve`` starts for per-key limits and the signal hub,
:mod:`app.http.machine_counters`), on a socket of its own (``metrics.sock`` in the same 0700
directory, path in ``OCMGW_METRICS_SOCKET``).  Every worker keeps one connection to it
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
  :data:`~app.http.metrics_relay.MAX_LINE`; a worker whose snapshot is bigger sends none and
  is not reporting) and retired totals of at most
  :data:`~app.http.metrics_relay.RETIRED_SAMPLES` samples (beyond that a dead worker's counts
  are dropped, with a warning).
* With one worker there is no relay and ``/metrics`` is exactly the registry, as before.  With
  Redis between replicas each replica is its own scrape target; its workers still merge
  (``serve`` starts the machine service for the relay alone then).

* *Views* ride the same fan-out: :meth:`MachineMetrics.view` gathers every worker's rows of a
  named view (``views["runs"]``: the runs in flight, :func:`run_rows`, for the console's live
  runs), with the same deadline; nothing is cached for them.

The wire (one JSON array a line, :mod:`app.core.json_lines`) is described with the relay,
:mod:`app.http.metrics_relay`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from app.core.json_lines import Dial, LineClient
from app.http.metrics_relay import MAX_LINE, Snapshot
from app.http.metrics_relay import listen as listen  # the relay's side, where it used to be
from app.metrics import Fixed, merge, snapshot

if TYPE_CHECKING:
    from app.engine.engine import Engine

log = logging.getLogger("ocm_gateway")
METRICS_ENV = "OCMGW_METRICS_SOCKET"
DEADLINE = 0.5  # the relay waits this long for the other workers' snapshots
TIMEOUT = 1.0  # a worker waits this long for the relay's answer


class _Link(LineClient):
    """A worker's connection to the relay: answers to its scrapes and views matched by id; the
    relay's asks for this worker's snapshot or rows answered (a malformed line: reconnect)."""

    max_line = MAX_LINE * 64  # an answer carries every worker's snapshot
    name = "metrics (the machine's metrics relay)"

    def __init__(self, owner: MachineMetrics) -> None:
        super().__init__()
        self.owner = owner

    def heard(self, msg: list[Any]) -> None:
        if msg[0] == "q":  # the relay wants this worker's snapshot for another's scrape
            own = self.owner.own_line()
            if own is not None:
                self.send(b'["s",' + orjson.dumps(int(msg[1])) + b"," + own + b"]\n")
        elif msg[0] == "v":  # ... or its rows of a view (the console's runs)
            self.send(orjson.dumps(["w", int(msg[1]), self.owner.rows(str(msg[2]))]) + b"\n")


class MachineMetrics:
    """A worker's side: answers the relay with its registry's snapshot, and renders a scrape
    of the whole machine (see the module docstring)."""

    def __init__(self, path: str, registry: CollectorRegistry, *, deadline: float = DEADLINE,
                 timeout: float = TIMEOUT) -> None:
        self.path, self.registry = path, registry
        self.deadline, self.timeout = deadline, timeout
        self._dial = Dial(path, lambda: _Link(self), timeout)
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
        return await self._dial()

    async def run(self) -> None:
        """Keep the connection open (reconnecting every 50 ms, then up to every second) until
        cancelled, so the other workers' scrapes reach this one."""
        await self._dial.keep()

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
        link = self._dial.current
        if link is not None and link.transport is not None and link.alive:
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
