"""Prometheus metrics and the per-request stats the pipeline fills in.

The HTTP middleware (:mod:`app.http.observe`) opens a :class:`RequestStats` for
every request in a context variable; the pipeline records model, time to first
token, upstream time, tokens and backend errors into it, without knowing HTTP.
Metrics live in their own registry so several apps (tests) can coexist in a process.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

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
