"""Traces over OTLP, when the standard OpenTelemetry variables ask for them.

A worker traces only where ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) names a collector; the exporter reads those
variables itself, and its headers, timeout and compression ones too. Without them there
is no provider, no exporter thread, nothing printed: Temporal's interceptor is not even
installed, and a model call's span is never made.

The provider is Loopwork's own, not OpenTelemetry's global one: the global provider can
be set only once per process, and a process that builds many workers (the tests) must be
able to shut one down and start another. Temporal's ``TracingInterceptor`` and the
gateway's spans take their tracer from here, so they end up in the same traces.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Tracer
    from temporalio.client import Interceptor
    from temporalio.contrib.opentelemetry import TracingInterceptor

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
SERVICE = "loopwork-worker"
"""The service name unless ``OTEL_SERVICE_NAME`` says another."""

_lock = threading.Lock()
_provider: TracerProvider | None = None


def enabled() -> bool:
    return any(os.environ.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def tracer() -> Tracer | None:
    """The process's tracer, started on first use while tracing is on; None when it is off."""
    global _provider
    with _lock:
        if _provider is None:
            if not enabled():
                return None
            # The SDK and the exporter load only when tracing is on: a worker that exports
            # nothing does not pay for their import at every start.
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import SERVICE_NAME, Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor

            name = os.environ.get("OTEL_SERVICE_NAME", "").strip() or SERVICE
            _provider = TracerProvider(resource=Resource.create({SERVICE_NAME: name}))
            _provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        return _provider.get_tracer("loopwork")


def interceptors() -> list[TracingInterceptor]:
    """Temporal's spans (workflows, activities, client calls) while tracing is on."""
    traced = tracer()
    if traced is None:
        return []
    from temporalio.contrib.opentelemetry import TracingInterceptor  # it loads the SDK

    return [TracingInterceptor(traced)]


def worker_interceptors(on_client: list[Interceptor]) -> list[TracingInterceptor]:
    """What a worker adds: nothing when its client traces already (a worker runs its
    client's worker interceptors too, and twice would make every span twice)."""
    if not enabled():
        return []
    from temporalio.contrib.opentelemetry import TracingInterceptor

    if any(isinstance(i, TracingInterceptor) for i in on_client):
        return []
    return interceptors()


def flush() -> None:
    """Send what is buffered (blocks up to the exporter's timeout)."""
    with _lock:
        provider = _provider
    if provider is not None:
        provider.force_flush()


def shutdown() -> None:
    """Flush and stop the provider; the next ``tracer()`` starts a new one if the
    variables still ask for it."""
    global _provider
    with _lock:
        provider, _provider = _provider, None
    if provider is not None:
        provider.shutdown()
