"""One OpenTelemetry trace per job.

A job's trace id *is* its job id (a UUIDv7 is 128 bits, the size of a trace id), and its
root span (the submission) has a span id derived from the job id. So:

- every service can put a span into a job's trace even when the message in hand carries no
  trace context (a job's own acknowledgement, a timer, a replayed event from before tracing
  was on), by parenting it on `job_root_context(job_id)`;
- an SRE finds a job's trace in Jaeger by its id, with the dashes removed.

Trace context still travels in the NATS headers (W3C `traceparent`), so spans nest under the
span that caused them; the derived root is the fallback that keeps the trace in one piece.
A message about job B written while handling job A (a preemption's victims) gets a small
span in B's trace that links to A's: `outbox_headers` does that for every outbox row.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

TRACER = "rota"
TRACE_HEADERS = ("traceparent", "tracestate")

_W3C = TraceContextTextMapPropagator()
_pinned: ContextVar[tuple[int, int] | None] = ContextVar("rota_pinned_ids", default=None)


class JobIdGenerator(RandomIdGenerator):
    """Random ids, except while `start_job_trace` pins the ids of a job's root span."""

    def generate_trace_id(self) -> int:
        pinned = _pinned.get()
        return pinned[0] if pinned else super().generate_trace_id()

    def generate_span_id(self) -> int:
        pinned = _pinned.get()
        return pinned[1] if pinned else super().generate_span_id()


def job_trace_id(job_id: str) -> int:
    try:
        value = uuid.UUID(job_id).int
    except ValueError:  # not a UUID (a foreign producer's id): hash it to the same size
        value = int.from_bytes(hashlib.sha256(job_id.encode()).digest()[:16], "big")
    return value or 1


def job_root_span_id(job_id: str) -> int:
    return int.from_bytes(hashlib.sha256(f"rota-root:{job_id}".encode()).digest()[:8], "big") or 1


def trace_id_hex(job_id: str) -> str:
    """What to paste into Jaeger's trace search."""
    return f"{job_trace_id(job_id):032x}"


def job_root_context(job_id: str) -> Context:
    root = SpanContext(job_trace_id(job_id), job_root_span_id(job_id), is_remote=True,
                       trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return trace.set_span_in_context(NonRecordingSpan(root), Context())


def context_from_headers(headers: Mapping[str, Any] | None) -> Context | None:
    """The W3C trace context in NATS headers, or None when there is none (or it is invalid)."""
    if not headers:
        return None
    carrier = {k: str(headers[k]) for k in TRACE_HEADERS if k in headers}
    if not carrier:
        return None
    ctx = _W3C.extract(carrier)
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def trace_carrier(headers: Mapping[str, Any] | None) -> dict[str, str]:
    """Just the trace headers of a message, to keep beside what it is about."""
    return {k: str(headers[k]) for k in TRACE_HEADERS if headers and k in headers}


def in_job_trace(ctx: Context | None, job_id: str) -> bool:
    span_context = trace.get_current_span(ctx).get_span_context()
    return span_context.is_valid and span_context.trace_id == job_trace_id(job_id)


def job_context(job_id: str, headers: Mapping[str, Any] | None = None) -> Context:
    """The context to parent a span about `job_id` on: the headers', if they are in its trace."""
    ctx = context_from_headers(headers)
    return ctx if ctx is not None and in_job_trace(ctx, job_id) else job_root_context(job_id)


def tracer() -> trace.Tracer:
    return trace.get_tracer(TRACER)


def _attributes(job_id: str | None, extra: Mapping[str, AttributeValue | None] | None
                ) -> dict[str, AttributeValue]:
    attrs: dict[str, AttributeValue] = {"rota.job_id": job_id} if job_id else {}
    # OpenTelemetry attributes cannot be None; leaving a key out says "not applicable".
    attrs.update({k: v for k, v in (extra or {}).items() if v is not None})
    return attrs


@contextmanager
def start_job_trace(name: str, job_id: str, attributes: Mapping[str, AttributeValue | None]
                    | None = None) -> Iterator[Span]:
    """The job's root span, current inside the block. A producer's own trace, if the
    submission came with one, is linked rather than adopted: one trace per job."""
    producer = trace.get_current_span().get_span_context()
    links = [Link(producer)] if producer.is_valid else []
    token = _pinned.set((job_trace_id(job_id), job_root_span_id(job_id)))
    try:
        span = tracer().start_span(name, context=Context(), kind=SpanKind.SERVER,
                                   attributes=_attributes(job_id, attributes), links=links)
    finally:
        _pinned.reset(token)
    with trace.use_span(span, end_on_exit=True):
        yield span


@contextmanager
def job_span(
    name: str,
    job_id: str | None,
    attributes: Mapping[str, AttributeValue | None] | None = None,
    *,
    parent: Context | None = None,
    links: Sequence[Link] = (),
    record_exception: bool = True,
) -> Iterator[Span]:
    """A span in `job_id`'s trace, current inside the block.

    Its parent is `parent`, else the current span, if that is in the job's trace; otherwise
    the job's root, and the current span (another job's, a timer's) becomes a link.
    Without a job it is an ordinary child of the current span. `record_exception=False`
    keeps an exception's text out of the span, for callers whose errors may quote secrets.
    """
    chosen = parent
    all_links = list(links)
    if job_id is not None:
        if parent is not None and in_job_trace(parent, job_id):
            chosen = parent
        elif parent is None and in_job_trace(None, job_id):
            chosen = None  # the current span
        else:
            chosen = job_root_context(job_id)
            # What we are inside of (another job's span, a producer's) stays one click away.
            other = trace.get_current_span(parent).get_span_context()
            if other.is_valid:
                all_links.append(Link(other))
    with tracer().start_as_current_span(
            name, context=chosen, attributes=_attributes(job_id, attributes), links=all_links,
            record_exception=record_exception, set_status_on_exception=record_exception,
    ) as span:
        yield span


def outbox_headers(job_id: str | None, event_type: str, run_id: str | None = None) -> dict[str, str]:
    """The trace headers an outbox row carries: the current span's, when it belongs to the
    row's job; else a short `rota.emit` span in the job's trace, linked to the current one."""
    carrier: dict[str, str] = {}
    if job_id is None or in_job_trace(None, job_id):
        propagate.inject(carrier)
    else:
        with job_span(f"rota.emit {event_type}", job_id, {"rota.run_id": run_id,
                                                         "rota.event": event_type}):
            propagate.inject(carrier)
    if job_id is not None and "traceparent" not in carrier:
        # No tracer provider (a test, a tool): still name the job's trace for the consumers.
        propagate.inject(carrier, context=job_root_context(job_id))
    return carrier
