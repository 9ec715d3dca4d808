"""OpenTelemetry traces, off by default at no cost, on through the standard ``OTEL_*`` variables.

Tracing is on when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``
is set, or ``OTEL_TRACES_EXPORTER`` names ``otlp`` (and ``OTEL_SDK_DISABLED`` is not
``true``); spans go out as OTLP/HTTP protobuf in batches (``OTEL_BSP_*``), named by
``OTEL_SERVICE_NAME`` (default ``ocm-gateway``), sampled by ``OTEL_TRACES_SAMPLER``.  The
SDK is imported only then (``pip install 'ocm-gateway[otel]'``); off, every hook below is a
flag test.

One trace per request (the server span, a child of the caller's ``traceparent``), with
the GenAI semantic conventions (``gen_ai.operation.name``, ``gen_ai.request.model``,
``gen_ai.usage.input_tokens`` / ``output_tokens``, ``gen_ai.tool.name``, ...).  Its children:
``plan`` (render + tokenize), one ``upstream`` span per attempt (its ``traceparent`` sent to
the backend), ``execute_tool`` per hosted tool call, ``store.*`` per store call.  Spans
never carry secrets: no headers, no request or response bodies.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

log = logging.getLogger("ocm_gateway")
enabled = False
_tracer: Any = None
_provider: Any = None


def wanted(env: Mapping[str, str]) -> bool:
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                or "otlp" in env.get("OTEL_TRACES_EXPORTER", ""))


def configure(env: Mapping[str, str] | None = None, exporter: Any = None) -> bool:
    """Turn tracing on if the environment asks for it (once per process); whether it is on.
    ``exporter`` replaces the OTLP exporter (tests)."""
    global enabled, _tracer, _provider
    env = os.environ if env is None else env
    if enabled or not (exporter is not None or wanted(env)):
        return enabled
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning("OTEL_* asks for traces but the OpenTelemetry SDK is not installed "
                    "(pip install 'ocm-gateway[otel]'); tracing stays off")
        return False
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    resource = Resource.create({"service.name": env.get("OTEL_SERVICE_NAME") or "ocm-gateway"})
    _provider = TracerProvider(resource=resource)
    _provider.add_span_processor(BatchSpanProcessor(exporter))
    _tracer = _provider.get_tracer("ocm_gateway")
    enabled = True
    log.info("tracing: spans exported over OTLP")
    return True


def reset() -> None:
    """Tracing off again (tests that turned it on with their own exporter)."""
    global enabled, _tracer, _provider
    if _provider is not None:
        _provider.shutdown()
    enabled, _tracer, _provider = False, None, None


def flush() -> None:
    if _provider is not None:
        _provider.force_flush(5000)


def start(name: str, attributes: Mapping[str, Any] | None = None, *, kind: str = "INTERNAL",
          carrier: Mapping[str, str] | None = None) -> Any:
    """A started span (not made current; the caller ends it), child of the current span, or of
    the W3C ``traceparent`` in ``carrier`` (incoming request headers)."""
    from opentelemetry import trace
    from opentelemetry.propagate import extract

    context = extract(carrier) if carrier is not None else None
    return _tracer.start_span(name, context=context, kind=getattr(trace.SpanKind, kind),
                              attributes=_clean(attributes))


@contextlib.contextmanager
def current(span: Any) -> Iterator[None]:
    """Make ``span`` the current one in this block (its children find it)."""
    from opentelemetry import trace

    with trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
        yield


@contextlib.contextmanager
def span(name: str, attributes: Mapping[str, Any] | None = None, kind: str = "INTERNAL") -> Iterator[Any]:
    """A span around a block, current inside it; an exception marks it as an error.  Off: nothing."""
    if not enabled:
        yield None
        return
    s = start(name, attributes, kind=kind)
    try:
        with current(s):
            yield s
    except BaseException as exc:
        failed(s, exc)
        raise
    finally:
        s.end()


def failed(s: Any, exc: BaseException | str) -> None:
    from opentelemetry.trace import Status, StatusCode

    kind = exc if isinstance(exc, str) else type(exc).__name__
    code = getattr(exc, "code", None)
    s.set_attribute("error.type", str(code or kind))
    s.set_status(Status(StatusCode.ERROR, str(code or kind)))


def inject(headers: MutableMapping[str, str], s: Any) -> None:
    """Put ``s``'s W3C ``traceparent`` in outgoing ``headers``."""
    from opentelemetry import trace
    from opentelemetry.propagate import inject as _inject

    _inject(headers, context=trace.set_span_in_context(s))


def _clean(attributes: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if attributes is None:
        return None
    return {k: v for k, v in attributes.items() if v is not None}


def traced(store: Any, system: str) -> Any:
    """``store`` with a ``store.<method>`` span around each of its coroutine methods (when on),
    inside a request's trace (heartbeats and retention jobs make none)."""
    return _TracedStore(store, system) if enabled else store


class _TracedStore:
    def __init__(self, inner: Any, system: str) -> None:
        self._inner = inner
        self._system = system

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if name.startswith("_") or not callable(target):
            return target
        import inspect

        if not inspect.iscoroutinefunction(target):
            return target

        async def call(*args: Any, **kwargs: Any) -> Any:
            from opentelemetry import trace

            if not trace.get_current_span().is_recording():  # a background job: no trace of its own
                return await target(*args, **kwargs)
            with span(f"store.{name}", {"db.system.name": self._system, "db.operation.name": name}):
                return await target(*args, **kwargs)

        return call
