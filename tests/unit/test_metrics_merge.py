"""Merging workers' snapshots (app/metrics.py ``snapshot`` / ``merge``): for any workers' counts,
every label set's sample in the merge is exactly the sum over the workers (counters, histograms,
gauges), ``_created`` the earliest, ``ocm_replica_bound`` the largest; a stale snapshot adds its
counters and histograms, never its gauges; and the merge renders as Prometheus text that parses
back to the same numbers."""

from __future__ import annotations

from collections import defaultdict

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from app.metrics import Fixed, Metrics, merge, snapshot

MODELS = ["a", "b", "c"]
STATUS = ["200", "429", "500"]
# one worker's traffic: (model, status, ttft seconds) per request, and its open streams
Traffic = tuple[list[tuple[str, str, float]], int]
traffic = st.tuples(st.lists(st.tuples(st.sampled_from(MODELS), st.sampled_from(STATUS),
                                       st.floats(0, 200, allow_nan=False)), max_size=30),
                    st.integers(0, 50))


def worker(load: Traffic) -> Metrics:
    metrics = Metrics()
    requests, streams = load
    for model, status, ttft in requests:
        metrics.requests.labels("/v1/x", model, status).inc()
        metrics.ttft.labels(model).observe(ttft)
    metrics.open_streams.set(streams)
    return metrics


def wire(metrics: Metrics) -> list[object]:
    loaded: list[object] = orjson.loads(orjson.dumps(snapshot(metrics.registry)))  # as sent
    return loaded


def samples(families: list[object]) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for family in families:
        assert isinstance(family, list)
        for name, labels, value in family[3]:
            if not name.endswith("_created"):
                out[(name, frozenset(labels.items()))] = value
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(traffic, min_size=1, max_size=4), st.lists(traffic, max_size=2))
def test_the_merge_is_the_sum_per_label_set(fresh_loads: list[Traffic], stale_loads: list[Traffic]) -> None:
    fresh = [wire(worker(load)) for load in fresh_loads]
    stale = [wire(worker(load)) for load in stale_loads]
    expected: dict[tuple[str, frozenset[tuple[str, str]]], float] = defaultdict(float)
    for snap in fresh:
        for key, value in samples(snap).items():
            expected[key] += value
    for snap in stale:
        for key, value in samples(snap).items():
            if key[0] != "ocm_open_streams" and not key[0].startswith("ocm_generations_"):
                expected[key] += value
    merged = merge(fresh, stale)
    got = {(s.name, frozenset(s.labels.items())): s.value for m in merged for s in m.samples
           if not s.name.endswith("_created")}
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert got[key] == value, key
    # the request count is the number of requests, whichever worker served them
    total = sum(v for (name, _), v in got.items() if name == "ocm_requests_total")
    assert total == sum(len(load[0]) for load in [*fresh_loads, *stale_loads])
    streams = got[("ocm_open_streams", frozenset())]
    assert streams == sum(load[1] for load in fresh_loads)
    # rendered and parsed back: the same numbers
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed(merged))
    parsed = {(s.name, frozenset(s.labels.items())): s.value
              for f in text_string_to_metric_families(generate_latest(registry).decode())
              for s in f.samples if not s.name.endswith("_created")}
    assert parsed == got


def test_created_is_the_earliest_and_a_bound_the_largest() -> None:
    one = [["ocm_requests", "counter", "h", [["ocm_requests_total", {"m": "x"}, 2],
                                             ["ocm_requests_created", {"m": "x"}, 100.0]]],
           ["ocm_replica_bound", "gauge", "h", [["ocm_replica_bound", {"replica": "r"}, 2]]]]
    two = [["ocm_requests", "counter", "h", [["ocm_requests_total", {"m": "x"}, 3],
                                             ["ocm_requests_created", {"m": "x"}, 50.0]]],
           ["ocm_replica_bound", "gauge", "h", [["ocm_replica_bound", {"replica": "r"}, 4]]]]
    got = {s.name: s.value for m in merge([one, two]) for s in m.samples}
    assert got == {"ocm_requests_total": 5, "ocm_requests_created": 50.0, "ocm_replica_bound": 4}


def test_a_malformed_snapshot_is_skipped_not_fatal() -> None:
    good = [["ocm_requests", "counter", "h", [["ocm_requests_total", {"m": "x"}, 2]]]]
    bad: list[object] = [["ocm_requests", "counter", "h", [["ocm_requests_total", {"m": "x"}, "many"],
                                                            ["ocm_requests_total", {"m": "x"}, True], 7]],
                         ["x", "no-such-type", "h", []], ["short"], ["ocm_requests", "gauge", "h", []]]
    got = {s.name: s.value for m in merge([good, bad]) for s in m.samples}
    assert got == {"ocm_requests_total": 2}
