"""A loopback OTLP/HTTP trace receiver: accepts ``POST /v1/traces`` (protobuf, as the
OpenTelemetry exporter sends it), decodes each ``ExportTraceServiceRequest`` with the
``opentelemetry-proto`` messages and keeps the spans as plain dicts."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.support.http_thread import serving


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


class OtlpReceiver:
    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.requests = 0
        self.lock = threading.Lock()

    def _decode(self, body: bytes) -> None:
        message = ExportTraceServiceRequest.FromString(body)
        for resource in message.resource_spans:
            service = {a.key: _value(a.value) for a in resource.resource.attributes}.get("service.name")
            for scope in resource.scope_spans:
                for s in scope.spans:
                    with self.lock:
                        self.spans.append({
                            "name": s.name, "trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(),
                            "parent_id": s.parent_span_id.hex(), "kind": s.kind, "service": service,
                            "status": s.status.code, "start": s.start_time_unix_nano,
                            "end": s.end_time_unix_nano,
                            "attributes": {a.key: _value(a.value) for a in s.attributes}})

    @contextmanager
    def running(self) -> Iterator[str]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                ok = (self.path == "/v1/traces"
                      and self.headers.get("content-type") == "application/x-protobuf")
                if ok:
                    receiver.requests += 1
                    receiver._decode(body)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if ok else 404)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        with serving(Handler) as url:
            yield url
