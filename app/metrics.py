"""Prometheus metrics and the per-request stats the pipeline fills in.

The HTTP middleware (:mod:`app.http.observe`) opens a :class:`RequestStats` for
every request in a context variable; the pipeline records model, time to first
token, upstream time, tokens and backend errors into it, without knowing HTTP.
Metrics live in their own registry so several apps (tests) can coexist in a process.

With ``serve --workers N``, ``/metrics`` shows the whole machine: :func:`snapshot` turns a
registry into plain JSON-able families (``[name, type, help, [[sample, labels, value], ...]]``)
that the workers exchange (:mod:`app.http.machine_metrics`), and :func:`merge` adds them up:
every sample of a label set is the sum over the workers (counters, histograms' buckets, sums
and counts, and gauges, which are per-worker quantities: in flight, queued, open streams,
a replica's waiting), except a counter's or histogram's ``_created`` (the earliest) and
:data:`MAX_FAMILIES` (the largest: ``ocm_replica_bound`` is the bound of the replica, which
each worker reports the same with the machine-wide slot gate).  A worker known only from an
older snapshot (``stale``) adds its counters and histograms (never less than it reported
before) but not its gauges (what it holds now is unknown).
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.samples import Sample

from adapters.routing import Replica, ReplicaPool

if TYPE_CHECKING:  # the engine uses this module: no import of it at run time
    from app.engine.admission import Admission

_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_OVERHEAD = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("ocm_requests", "HTTP requests by route, model and status",
                                ["route", "model", "status"], registry=r)
        self.ttft = Histogram("ocm_time_to_first_token_seconds", "Time to the first upstream chunk",
                              ["model"], buckets=_LATENCY, registry=r)
        self.tokens = Counter("ocm_tokens", "Tokens in (prompt) and out (completion)",
                              ["model", "direction"], registry=r)
        # per API key (its configured name, never the key; "-" with auth off): who used what
        self.key_tokens = Counter("ocm_key_tokens", "Tokens by API key name, model and direction",
                                  ["key", "model", "direction"], registry=r)
        self.key_requests = Counter("ocm_key_requests", "Requests by API key name and status",
                                    ["key", "status"], registry=r)
        self.upstream = Histogram("ocm_upstream_seconds", "Time spent waiting on the backend",
                                  ["model"], buckets=_LATENCY, registry=r)
        self.overhead = Histogram("ocm_gateway_overhead_seconds",
                                  "Request time not spent waiting on the backend", ["route"],
                                  buckets=_OVERHEAD, registry=r)
        self.open_streams = Gauge("ocm_open_streams", "Generations in flight", registry=r)
        self.backend_errors = Counter("ocm_backend_errors", "Backend / model errors by code",
                                      ["model", "code"], registry=r)
        self.inflight = Gauge("ocm_generations_inflight", "Generations holding an admission slot",
                              registry=r)
        self.queued = Gauge("ocm_generations_queued", "Requests waiting for an admission slot",
                            registry=r)
        self.rejected = Counter("ocm_admission_rejected", "Requests refused at capacity (503)",
                                registry=r)

        self.replicas = ReplicaQueues()
        r.register(self.replicas)

    def watch_admission(self, admission: Admission) -> None:
        self.inflight.set_function(lambda: admission.inflight)
        self.queued.set_function(lambda: admission.queued)
        admission.on_reject = self.rejected.inc

    def watch_replicas(self, routes: Mapping[str, object]) -> None:
        """Show the bounded replicas (their gates) of ``routes`` (model name → route with a
        ``backend``; the registry's) on ``/metrics``."""
        self.replicas.routes = routes


class ReplicaQueues:
    """The upstream replicas' gates (``[models.X] max_inflight``, llama.cpp's slots), per model
    and replica URL: generations in flight to it, requests waiting for one of its slots, its
    bound (absent while unknown), and how many left while waiting or were refused.  Read from
    the replicas when ``/metrics`` is scraped: nothing is done per request for it."""

    LABELS = ("model", "replica")

    def __init__(self) -> None:
        self.routes: Mapping[str, object] = {}

    def _families(self) -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily,
                                 CounterMetricFamily, CounterMetricFamily]:
        labels = self.LABELS
        return (GaugeMetricFamily("ocm_replica_inflight",
                                  "Generations in flight to a bounded upstream replica", labels=labels),
                GaugeMetricFamily("ocm_replica_waiting",
                                  "Requests waiting for a slot of a bounded upstream replica", labels=labels),
                GaugeMetricFamily("ocm_replica_bound",
                                  "Generations a bounded upstream replica is sent at most", labels=labels),
                CounterMetricFamily("ocm_replica_gave_up",
                                    "Requests whose client left while waiting for a replica slot",
                                    labels=labels),
                CounterMetricFamily("ocm_replica_refused",
                                    "Requests a replica's queue refused (full, or no slot in time: 503)",
                                    labels=labels))

    def _gated(self) -> Iterator[tuple[str, Replica]]:
        for model, route in self.routes.items():
            pool = getattr(getattr(route, "backend", None), "pool", None)
            if isinstance(pool, ReplicaPool):
                for replica in pool.replicas:
                    if replica.gate is not None:
                        yield model, replica

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        inflight, waiting, bound, gave_up, refused = families = self._families()
        for model, replica in self._gated():
            labels = [model, replica.url]
            inflight.add_metric(labels, max(0, replica.outstanding - replica.waiting))
            waiting.add_metric(labels, replica.waiting)
            limit = getattr(replica.gate, "bound", None)
            if isinstance(limit, int):
                bound.add_metric(labels, limit)
            gave_up.add_metric(labels, replica.gave_up)
            refused.add_metric(labels, replica.refused)
        yield from families


MAX_FAMILIES = frozenset({"ocm_replica_bound"})
CUMULATIVE = frozenset({"counter", "histogram", "summary"})  # what a stale snapshot still adds
Family = Sequence[object]  # [name, type, help, [[sample name, {label: value}, value], ...]]


def snapshot(registry: CollectorRegistry) -> list[list[object]]:
    """The registry's samples now, as JSON-able families (see the module docstring)."""
    return [[m.name, m.type, m.documentation, [[s.name, s.labels, s.value] for s in m.samples]]
            for m in registry.collect()]


def merge(fresh: Iterable[Sequence[Family]], stale: Iterable[Sequence[Family]] = ()) -> list[Metric]:
    """The families of several workers' snapshots as one (see the module docstring); the order
    is the first snapshot's, then what only later ones have.  A family or sample of an
    unexpected shape is skipped (the snapshots come from another process)."""
    families: dict[str, tuple[Metric, dict[object, list[Any]]]] = {}
    for snaps, cumulative_only in ((fresh, False), (stale, True)):
        for snap in snaps:
            for family in snap:
                _add(families, family, cumulative_only)
    out = []
    for metric, samples in families.values():
        metric.samples = [Sample(n, labels, v) for n, labels, v in samples.values()]
        out.append(metric)
    return out


def _add(families: dict[str, tuple[Metric, dict[object, list[Any]]]], family: Family,
         cumulative_only: bool) -> None:
    if len(family) != 4:
        return
    name, kind, doc, samples = family
    if (not isinstance(name, str) or not isinstance(kind, str) or not isinstance(samples, list)
            or (cumulative_only and kind not in CUMULATIVE)):
        return
    entry = families.get(name)
    if entry is None:
        try:
            entry = families[name] = (Metric(name, str(doc), kind), {})
        except ValueError:  # not a metric type prometheus_client knows
            return
    if entry[0].type != kind:
        return
    merged = entry[1]
    rule = 1 if name in MAX_FAMILIES else 2 if kind in CUMULATIVE else 0
    for sample in samples:
        try:
            sample_name, labels, value = sample
            key = (sample_name, *labels.items())  # one label order: the same code made them all
            seen = merged.get(key)
        except (TypeError, ValueError, AttributeError):
            continue
        if type(value) not in (int, float) or type(sample_name) is not str:
            continue
        if seen is None:
            if all(type(v) is str for v in labels.values()):
                merged[key] = [sample_name, labels, value]
        elif rule == 1:
            seen[2] = max(seen[2], value)
        elif rule == 2 and sample_name.endswith("_created"):
            seen[2] = min(seen[2], value)
        else:
            seen[2] += value


class Fixed:
    """A collector of given families (the merged ones), for ``generate_latest``."""

    def __init__(self, metrics: Iterable[Metric]) -> None:
        self.metrics = list(metrics)

    def collect(self) -> Iterator[Metric]:
        return iter(self.metrics)


@dataclass
class RequestStats:
    metrics: Metrics
    model: str = ""
    upstream_seconds: float = 0.0
    tokens: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    tool_rounds: int = 0  # generations after hosted tools ran (the agentic loop)
    steps: list[dict[str, int]] = field(default_factory=list)  # per agentic-loop step: its usage
    error_code: str | None = None  # a stream's terminal error (HTTP errors: read from the body)


_current: contextvars.ContextVar[RequestStats | None] = contextvars.ContextVar("ocm_stats", default=None)


def current() -> RequestStats | None:
    return _current.get()


def begin(metrics: Metrics) -> tuple[RequestStats, contextvars.Token[RequestStats | None]]:
    stats = RequestStats(metrics)
    return stats, _current.set(stats)


def end(token: contextvars.Token[RequestStats | None]) -> None:
    _current.reset(token)
