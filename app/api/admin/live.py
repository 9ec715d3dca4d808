"""The console's live views for the whole machine with ``serve --workers N`` (issue 40).

Each worker keeps its own recent errors (:data:`app.http.observe.RECENT_ERRORS` of them), its
own replicas' in-flight counts and cooldowns, and its own admission counts.  With more than one
worker the admin routes gather every worker's part through the metrics relay's views
(:meth:`app.http.machine_metrics.MachineMetrics.view`, 0.5 s deadline) and merge them here:

* ``views["errors"]`` (:func:`error_rows`): a worker's recent errors, each text field cut to
  :data:`FIELD_CHARS` (a worker's answer stays far under the relay's 8 MiB line);
  :func:`merge_errors` sorts every worker's by time and keeps the newest ``limit``, as one
  worker's deque does.
* ``views["models"]`` (:func:`model_rows`): per model, each replica's in flight and cooldown,
  and the worker's admission counts; :func:`merge_models` sums in flight and admission across
  workers and keeps a replica's longest cooldown (cooling on any worker: not healthy).

With one worker (no relay) the routes read this process's state directly, as before.  Pure
functions: no I/O, nothing cached.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from app.engine.registry import Registry

Json = dict[str, Any]
FIELD_CHARS = 2000  # a text field of an error row sent through the relay


def error_rows(recent: Iterable[Json]) -> list[Json]:
    """This worker's recent errors, oldest first, text fields bounded."""
    return [{k: (v[:FIELD_CHARS] if isinstance(v, str) else v) for k, v in row.items()}
            for row in list(recent)]


def merge_errors(rows: Iterable[Json], limit: int) -> list[Json]:
    """The newest ``limit`` errors of every worker, newest first."""
    ordered = sorted(rows, key=lambda r: float(r.get("time") or 0.0))
    return ordered[-limit:][::-1]


def model_rows(registry: Registry) -> list[Json]:
    """One row: this worker's replicas (per model: url, in flight, cooldown left) and admission."""
    now = time.monotonic()
    replicas: dict[str, list[list[Any]]] = {}
    for name, route in registry.routes.items():
        pool = getattr(route.backend, "pool", None)
        replicas[name] = [[r.url, r.outstanding, max(0.0, r.cooldown_until - now)]
                          for r in (pool.replicas if pool is not None else [])]
    admission = registry.admission
    return [{"replicas": replicas, "in_flight": admission.inflight, "queued": admission.queued}]


def merge_models(rows: Iterable[Json]) -> tuple[dict[tuple[str, str], tuple[int, float]], Json]:
    """(model, url) -> (in flight summed, longest cooldown), and admission summed."""
    replicas: dict[tuple[str, str], tuple[int, float]] = {}
    admission = {"in_flight": 0, "queued": 0}
    for row in rows:
        admission["in_flight"] += int(row.get("in_flight") or 0)
        admission["queued"] += int(row.get("queued") or 0)
        for model, entries in dict(row.get("replicas") or {}).items():
            for url, in_flight, cooldown in entries:
                held = replicas.get((model, url), (0, 0.0))
                replicas[(model, url)] = (held[0] + int(in_flight), max(held[1], float(cooldown)))
    return replicas, admission
