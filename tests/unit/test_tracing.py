"""One trace per job: derived ids, parenting rules, the outbox's headers, the broker's fill."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from rota.bus.trace_fill import job_id_of
from rota.ids import new_id
from rota.tracing import (
    JobIdGenerator,
    context_from_headers,
    job_root_span_id,
    job_span,
    job_trace_id,
    outbox_headers,
    start_job_trace,
    trace_id_hex,
)


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider(id_generator=JobIdGenerator())
        trace.set_tracer_provider(provider)
        provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    if not isinstance(provider.id_generator, JobIdGenerator):
        # An earlier test set up tracing its own way; tracers read the provider's generator
        # when they are made, so giving the provider ours makes these tests independent of it.
        provider.id_generator = JobIdGenerator()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    yield memory


def _by_name(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    return next(s for s in exporter.get_finished_spans() if s.name == name)


def test_the_job_id_is_the_trace_id() -> None:
    job_id = "0190a5c2-7c1e-7000-8000-0123456789ab"
    assert trace_id_hex(job_id) == "0190a5c27c1e700080000123456789ab"
    assert job_trace_id("not-a-uuid") != 0
    assert job_root_span_id(job_id) == job_root_span_id(job_id) != job_root_span_id(new_id())


def test_root_span_has_the_job_ids_and_links_the_producer(exporter: InMemorySpanExporter) -> None:
    job_id = new_id()
    with trace.get_tracer("test").start_as_current_span("producer") as producer, \
            start_job_trace("rota.job.submit", job_id, {"rota.team": "nlp"}):
        headers = outbox_headers(job_id, "JobSubmitted")
    root = _by_name(exporter, "rota.job.submit")
    assert root.parent is None
    assert root.context.trace_id == job_trace_id(job_id)
    assert root.context.span_id == job_root_span_id(job_id)
    assert [link.context.span_id for link in root.links] == [producer.get_span_context().span_id]
    assert headers["traceparent"].startswith(f"00-{trace_id_hex(job_id)}-{job_root_span_id(job_id):016x}-")


def test_a_span_about_another_job_goes_to_its_trace_with_a_link(exporter: InMemorySpanExporter) -> None:
    preemptor, victim = new_id(), new_id()
    with start_job_trace("root-p", preemptor) as root, job_span("notice", victim):
        pass
    notice = _by_name(exporter, "notice")
    assert notice.context.trace_id == job_trace_id(victim)
    assert notice.parent is not None and notice.parent.span_id == job_root_span_id(victim)
    assert [link.context.trace_id for link in notice.links] == [root.get_span_context().trace_id]


def test_outbox_headers_bridge_into_the_rows_job(exporter: InMemorySpanExporter) -> None:
    a, b = new_id(), new_id()
    with start_job_trace("root-a", a):
        own = outbox_headers(a, "AllocationProposed")
        other = outbox_headers(b, "StopRun", run_id=new_id())
    own_ctx, other_ctx = context_from_headers(own), context_from_headers(other)
    assert trace.get_current_span(own_ctx).get_span_context().trace_id == job_trace_id(a)
    assert trace.get_current_span(other_ctx).get_span_context().trace_id == job_trace_id(b)
    emit = _by_name(exporter, "rota.emit StopRun")
    assert emit.attributes is not None and emit.attributes["rota.job_id"] == b
    assert outbox_headers(b, "RunCheckpointed")  # no current span: the job's root, still


def test_the_fill_reads_the_job_id_of_an_envelope() -> None:
    job_id = new_id()
    assert job_id_of(json.dumps({"id": "x", "job_id": job_id, "data": {}}).encode()) == job_id
    assert job_id_of(json.dumps({"job_id": None, "data": {"job_id": job_id}}).encode()) == job_id
    assert job_id_of(b"not json") is None
    assert job_id_of(b"[1, 2]") is None


def test_without_an_exporter_no_provider_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    from rota import telemetry

    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    monkeypatch.setattr(telemetry, "_configured", False)
    before = trace.get_tracer_provider()
    assert telemetry.setup_tracing("scheduler") is None
    assert trace.get_tracer_provider() is before


def test_non_recording_spans_still_name_each_jobs_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    import rota.tracing

    # What every span is when no SDK provider is installed (no exporter asked for).
    monkeypatch.setattr(rota.tracing, "tracer", lambda: trace.NoOpTracer())
    job, other = new_id(), new_id()
    with start_job_trace("rota.job.submit", job) as root:
        assert not root.is_recording()
        headers = outbox_headers(job, "JobSubmitted")
    assert context_from_headers(headers) is not None
    assert headers["traceparent"].split("-")[1] == trace_id_hex(job)
    with job_span("rota.scheduler.cycle", other):  # inside another job's span
        headers = outbox_headers(job, "AllocationProposed")
    assert headers["traceparent"].split("-")[1] == trace_id_hex(job)
