"""OpenTelemetry setup from the standard `OTEL_*` variables only.

`OTEL_TRACES_EXPORTER` picks `otlp` (HTTP, `OTEL_EXPORTER_OTLP_ENDPOINT`), `console`, or `none`
(the default, so nothing is exported unless asked). `OTEL_SERVICE_NAME` overrides the name.

With nothing to export, no SDK provider is installed: OpenTelemetry's API then hands out
non-recording spans that carry their parent's context, so trace headers still name each
job's trace (its id is the job's: `rota.tracing`), and a service that does export joins the
same traces. Recording spans only to drop them cost about a tenth of every service's CPU.
"""

from __future__ import annotations

import os

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

from rota.tracing import JobIdGenerator

_configured = False


def _exporter(kind: str) -> SpanExporter | None:
    if kind == "console":
        return ConsoleSpanExporter()
    if kind == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    return None


def setup_tracing(service: str) -> TracerProvider | None:
    """Idempotent. The provider installed, or None when no exporter is asked for."""
    global _configured
    provider = trace.get_tracer_provider()
    if _configured and isinstance(provider, TracerProvider):
        return provider
    kinds = os.environ.get("OTEL_TRACES_EXPORTER", "none").split(",")
    exporters = [e for e in (_exporter(kind.strip()) for kind in kinds) if e is not None]
    if not exporters:
        return None
    name = os.environ.get("OTEL_SERVICE_NAME", f"rota-{service}")
    # Job-derived ids for each job's root span: see `rota.tracing`.
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: name}),
                              id_generator=JobIdGenerator())
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    _configured = True
    return provider


def flush_tracing(timeout_s: float = 2.0) -> None:
    """Export what is still batched; a service calls it on its way out. Bounded, because a
    collector that is away must not eat the service's stop budget."""
    provider = trace.get_tracer_provider()
    if _configured and isinstance(provider, TracerProvider):
        provider.force_flush(timeout_millis=int(timeout_s * 1000))


def tracer(name: str) -> trace.Tracer:
    return trace.get_tracer(name)
